"""`polyinfer traffic`: profile a trace, synthesize a workload, and measure drift between two."""

from __future__ import annotations

import dataclasses
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from polyinfer.cli import app
from polyinfer.errors import PolyinferError
from polyinfer.traffic.drift import DRIFT_THRESHOLD, DriftReport, drifted
from polyinfer.traffic.formats import FORMATS, load_trace
from polyinfer.traffic.formats.native import write_trace
from polyinfer.traffic.profile import LengthStats, WorkloadProfile, load_profile
from polyinfer.traffic.synth import PRESETS, Empirical, Lognormal, synthesize

traffic_app = typer.Typer(
    no_args_is_help=True, help="Traffic: trace files -> workload profile; synthesis; drift."
)
app.add_typer(traffic_app, name="traffic")
out = Console()


class Arrival(StrEnum):
    POISSON = "poisson"
    GAMMA = "gamma"


@traffic_app.command("profile")
def profile_command(
    trace: Annotated[
        Path, typer.Argument(help="trace file (Azure CSV, BurstGPT CSV, Mooncake or polyinfer JSONL)")
    ],
    format: Annotated[
        str | None, typer.Option("--format", help=f"insist on this format: {', '.join(FORMATS)}")
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", help="BurstGPT only: keep this model's rows (e.g. ChatGPT)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the profile as one line of JSON")] = False,
) -> None:
    """Summarise a trace: request count, arrival rate and burstiness, length percentiles, prefix reuse."""
    profile = WorkloadProfile.of(load_trace(trace, format=format, model=model))
    if as_json:
        print(profile.to_json())
        return
    table = Table(title=f"{profile.name} ({profile.source_format})", show_header=False)
    rows = {
        "requests": f"{profile.requests}" + (f" in {profile.sessions} sessions" if profile.sessions else ""),
        "duration": f"{profile.duration_s:.1f} s",
        "arrival rate": f"{profile.rate_rps:.3f} req/s",
        "inter-arrival CV": f"{profile.interarrival_cv:.2f}  (1 = Poisson)",
        "input tokens": _lengths(profile.input_len),
        "output tokens": _lengths(profile.output_len),
        "prefix reuse": f"{profile.prefix_reuse:.1%} of prompt tokens",
        "offered load": f"{profile.offered_input_tok_s:.0f} prompt + {profile.offered_output_tok_s:.0f} output tok/s",
    }
    for key, value in rows.items():
        table.add_row(key, value)
    out.print(table)


def _lengths(s: LengthStats) -> str:
    return f"mean {s.mean:.0f}  p50 {s.p50:.0f}  p90 {s.p90:.0f}  p99 {s.p99:.0f}  max {s.max}"


@traffic_app.command("synth")
def synth_command(
    output: Annotated[Path, typer.Option("--output", "-o", help="polyinfer JSONL trace to write")],
    preset: Annotated[str, typer.Option("--preset", help=f"starting point: {', '.join(PRESETS)}")] = "chat",
    rate: Annotated[float | None, typer.Option("--rate", help="requests per second")] = None,
    requests: Annotated[int | None, typer.Option("--requests", help="number of requests")] = None,
    duration: Annotated[
        float | None, typer.Option("--duration", help="seconds of traffic (instead of --requests)")
    ] = None,
    arrival: Annotated[Arrival | None, typer.Option("--arrival", help="gamma takes --cv")] = None,
    cv: Annotated[
        float | None, typer.Option("--cv", help="inter-arrival coefficient of variation (>1 bursty)")
    ] = None,
    input_median: Annotated[
        float | None, typer.Option("--input-median", help="median fresh prompt tokens per turn")
    ] = None,
    input_sigma: Annotated[
        float | None, typer.Option("--input-sigma", help="log-space spread of prompt lengths")
    ] = None,
    output_median: Annotated[
        float | None, typer.Option("--output-median", help="median output tokens")
    ] = None,
    output_sigma: Annotated[
        float | None, typer.Option("--output-sigma", help="log-space spread of output lengths")
    ] = None,
    lengths_from: Annotated[
        Path | None, typer.Option("--lengths-from", help="resample both lengths from this trace")
    ] = None,
    shared_prefix_len: Annotated[
        int | None, typer.Option("--shared-prefix-len", help="system prompt tokens")
    ] = None,
    shared_prefixes: Annotated[
        int | None, typer.Option("--shared-prefixes", help="number of distinct system prompts")
    ] = None,
    shared_fraction: Annotated[
        float | None, typer.Option("--shared-fraction", help="fraction of sessions with one")
    ] = None,
    turns: Annotated[int | None, typer.Option("--turns", help="turns per conversation")] = None,
    scale: Annotated[
        float | None, typer.Option("--scale", help="multiply every length (shrink for small models)")
    ] = None,
    max_len: Annotated[
        int | None, typer.Option("--max-len", help="cap prompt + output tokens per request")
    ] = None,
    seed: Annotated[int | None, typer.Option("--seed")] = None,
) -> None:
    """Write a seeded synthetic workload, starting from a preset and overriding what is given."""
    if preset not in PRESETS:
        raise PolyinferError(f"unknown preset {preset!r}; presets: {', '.join(PRESETS)}")
    spec = PRESETS[preset]
    if requests is not None and duration is not None:
        raise PolyinferError("give --requests or --duration, not both")
    if arrival is Arrival.POISSON and cv not in (None, 1.0):
        raise PolyinferError("Poisson arrivals have CV 1; use --arrival gamma for --cv")
    if arrival is Arrival.GAMMA and cv is None:
        raise PolyinferError("--arrival gamma needs --cv (1 is Poisson, above 1 bursty)")
    given = {
        "rate": rate,
        "cv": 1.0 if arrival is Arrival.POISSON else cv,
        "requests": requests,
        "shared_prefix_len": shared_prefix_len,
        "shared_prefixes": shared_prefixes,
        "shared_fraction": shared_fraction,
        "turns": turns,
        "scale": scale,
        "max_len": max_len,
        "seed": seed,
    }
    changes: dict[str, Any] = {key: value for key, value in given.items() if value is not None}
    if duration is not None:
        changes |= {"duration_s": duration, "requests": None}
    lognormal_options = (input_median, input_sigma, output_median, output_sigma)
    if lengths_from is not None:
        if any(v is not None for v in lognormal_options):
            raise PolyinferError(
                "--lengths-from replaces the length distributions; drop --input-*/--output-*"
            )
        source = load_trace(lengths_from)
        changes["input_len"] = Empirical(tuple(r.input_len for r in source.requests))
        changes["output_len"] = Empirical(tuple(r.output_len for r in source.requests))
    else:
        changes["input_len"] = _lognormal(spec.input_len, input_median, input_sigma)
        changes["output_len"] = _lognormal(spec.output_len, output_median, output_sigma)
    spec = dataclasses.replace(spec, **changes)
    trace = synthesize(spec)
    write_trace(trace, output)
    out.print(f"wrote {len(trace)} requests over {trace.duration_s:.1f} s to {output}", highlight=False)


def _lognormal(
    base: Lognormal | Empirical, median: float | None, sigma: float | None
) -> Lognormal | Empirical:
    if median is None and sigma is None:
        return base
    if not isinstance(base, Lognormal):
        raise PolyinferError("this preset resamples lengths; --*-median and --*-sigma do not apply")
    return Lognormal(base.median if median is None else median, base.sigma if sigma is None else sigma)


@traffic_app.command("drift")
def drift_command(
    baseline: Annotated[Path, typer.Argument(help="trace or saved profile the configuration was tuned for")],
    current: Annotated[Path, typer.Argument(help="trace or saved profile of the traffic now")],
    threshold: Annotated[float, typer.Option("--threshold")] = DRIFT_THRESHOLD,
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
) -> None:
    """Score how far CURRENT traffic has moved from BASELINE (0 same, 1 entirely different)."""
    report = drifted(load_profile(baseline), load_profile(current), threshold)
    if as_json:
        print(report.model_dump_json())
        return
    _print_drift(report)


def _print_drift(report: DriftReport) -> None:
    table = Table(show_header=True)
    table.add_column("component")
    table.add_column("change", justify="right")
    for name, value in report.components.items():
        table.add_row(name, f"{value:.3f}", style="bold red" if value > report.threshold else None)
    out.print(table)
    verdict = "[bold red]drifted[/]" if report.drifted else "[green]within threshold[/]"
    out.print(f"score {report.score:.3f} (threshold {report.threshold}): {verdict}")
