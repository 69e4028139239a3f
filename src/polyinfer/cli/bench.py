"""`polyinfer bench`: measure a candidate on the fast tier (first layers, step shapes) or the full tier
(trace replay), compare it with the reference, or report how well the two tiers agree."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import Progress, TaskID
from rich.table import Table

from polyinfer.bench.compare import ABResult
from polyinfer.bench.fast_tier import FastTierResult
from polyinfer.bench.fidelity import FidelityReport
from polyinfer.bench.metrics import SLO, Distribution, ServingMetrics
from polyinfer.bench.profile import OpProfile
from polyinfer.bench.replay import ReplayOptions
from polyinfer.bench.session import BenchSession
from polyinfer.bench.stats import Comparison
from polyinfer.cli import app
from polyinfer.engine.candidate import Candidate
from polyinfer.engine.config import EngineConfig
from polyinfer.errors import PolyinferError
from polyinfer.traffic.profile import WorkloadProfile
from polyinfer.traffic.synth import PRESETS
from polyinfer.traffic.workload import load_workload

out = Console()


class Tier(StrEnum):
    FAST = "fast"
    FULL = "full"
    FIDELITY = "fidelity"
    PROFILE = "profile"


class ReplayBar:
    """A replay's progress bar on stderr. Picklable: it is sent to the engine worker and draws there."""

    def __init__(self) -> None:
        self.bar: Progress | None = None
        self.task: TaskID | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            self.bar = Progress(console=Console(stderr=True), transient=True)
            self.task = self.bar.add_task("replaying requests", total=total)
            self.bar.start()
        assert self.task is not None
        self.bar.update(self.task, completed=done)
        if done == total:
            self.bar.stop()


@app.command()
def bench(
    model: Annotated[
        str | None,
        typer.Option(
            "--model", "-m", help="checkpoint dir, .gguf file or preset (default: SmolLM2-135M-Instruct)"
        ),
    ] = None,
    traffic: Annotated[
        str, typer.Option("--traffic", "-t", help=f"trace file, or a synthetic preset: {', '.join(PRESETS)}")
    ] = "chat",
    tier: Annotated[
        Tier,
        typer.Option(
            "--tier",
            help="fast: first layers at the workload's step shapes; full: replay the trace; fidelity: rank "
            "agreement of the two; profile: per-kernel (or per-operator) time of a decode step",
        ),
    ] = Tier.FAST,
    candidate: Annotated[
        str | None,
        typer.Option(
            "--candidate",
            help="candidate .py file or built-in name [:knob=value...], compared against the reference",
        ),
    ] = None,
    candidates: Annotated[
        str | None,
        typer.Option(
            "--candidates", help="fidelity: comma-separated candidate files or built-in names (3 or more)"
        ),
    ] = None,
    device: Annotated[str, typer.Option("--device")] = "cpu",
    dtype: Annotated[str, typer.Option("--dtype")] = "float32",
    layers: Annotated[int, typer.Option("--layers", help="fast tier: layers to load")] = 4,
    max_requests: Annotated[
        int | None, typer.Option("--max-requests", help="replay only the first N requests")
    ] = None,
    max_len: Annotated[
        int | None, typer.Option("--max-len", help="shrink requests to at most N prompt + output tokens")
    ] = None,
    time_scale: Annotated[
        float | None,
        typer.Option(
            "--time-scale", help="full tier: replay at arrival times x this (default: as fast as possible)"
        ),
    ] = None,
    slo: Annotated[str, typer.Option("--slo", help="goodput objectives, e.g. ttft=500ms,tpot=50ms")] = "",
    max_num_seqs: Annotated[int, typer.Option("--max-num-seqs")] = 64,
    block_size: Annotated[int, typer.Option("--block-size", help="KV cache block size (tokens)")] = 16,
    kv_cache_tokens: Annotated[int | None, typer.Option("--kv-cache-tokens")] = None,
    rounds: Annotated[
        int, typer.Option("--rounds", help="interleaved rounds (comparison) or timing rounds")
    ] = 5,
    reps: Annotated[int, typer.Option("--reps", help="fast tier: timed calls per shape and round")] = 20,
    warmup: Annotated[int, typer.Option("--warmup")] = 3,
    margin: Annotated[
        float, typer.Option("--margin", help="a difference is real when the CI excludes 1 by this")
    ] = 0.01,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    timeout: Annotated[float, typer.Option("--timeout", help="seconds allowed per measurement")] = 1800.0,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Measure the reference or a candidate on a model and traffic; with --candidate, against the reference."""
    if tier is Tier.FIDELITY and (candidates is None or candidate is not None):
        raise PolyinferError("--tier fidelity takes --candidates a.py,b.py,... (and no --candidate)")
    if tier is not Tier.FIDELITY and candidates is not None:
        raise PolyinferError("--candidates is for --tier fidelity; give one --candidate to compare")
    trace = load_workload(traffic, max_requests, max_len)
    options = ReplayOptions(time_scale=time_scale, slo=SLO.parse(slo))
    config = EngineConfig(
        device=device, dtype=dtype, max_num_seqs=max_num_seqs, kv_cache_tokens=kv_cache_tokens, block_size=block_size
    )
    session = BenchSession(model, config, layers, reps, warmup, rounds, margin, seed=seed, timeout_s=timeout)
    result: FastTierResult | ServingMetrics | ABResult[Any] | FidelityReport | OpProfile
    if tier is Tier.PROFILE:
        result = session.profile(WorkloadProfile.of(trace), Candidate.parse(candidate) if candidate else None)
    elif tier is Tier.FIDELITY:
        assert candidates is not None
        result = session.fidelity(trace, options, [Candidate.parse(c) for c in candidates.split(",") if c])
    elif tier is Tier.FAST:
        profile = WorkloadProfile.of(trace)
        result = (
            session.fast(profile)
            if candidate is None
            else session.fast_ab(profile, Candidate.parse(candidate))
        )
    elif candidate is None:
        result = session.full(trace, options, progress=None if as_json else ReplayBar())
    else:
        result = session.full_ab(trace, options, Candidate.parse(candidate))
    if as_json:
        header = {"tier": tier.value, "model": model, "traffic": trace.name, "requests": len(trace)}
        print(json.dumps({**header, "result": result.to_json()}))
        return
    out.print(
        f"{tier.value} tier  model {model or 'default'}  traffic {trace.name} ({len(trace)} requests)",
        highlight=False,
    )
    _show(result)


def _show(result: FastTierResult | ServingMetrics | ABResult[Any] | FidelityReport | OpProfile) -> None:
    if isinstance(result, OpProfile):
        out.print(result.table(top=25), highlight=False)
    elif isinstance(result, ABResult):
        _show(result.candidate)
        _show_comparison(result.comparison)
    elif isinstance(result, FastTierResult):
        _show_fast(result)
    elif isinstance(result, ServingMetrics):
        _show_serving(result)
    else:
        _show_fidelity(result)


def _show_serving(m: ServingMetrics) -> None:
    table = Table(title="Serving benchmark result", show_header=False)
    rows = {
        "Successful requests": f"{m.requests}",
        "Benchmark duration (s)": f"{m.duration_s:.2f}",
        "Total input tokens": f"{m.input_tokens}",
        "Total generated tokens": f"{m.output_tokens}",
        "Request throughput (req/s)": f"{m.request_throughput:.2f}",
        "Output token throughput (tok/s)": f"{m.output_tok_s:.2f}",
        "Total token throughput (tok/s)": f"{m.total_tok_s:.2f}",
        "Goodput (req/s)": f"{m.goodput_rps:.2f}",
    }
    for key, value in rows.items():
        table.add_row(key, value)
    for name, dist in (("TTFT", m.ttft), ("TPOT", m.tpot), ("ITL", m.itl), ("E2E", m.e2e)):
        table.add_section()
        for stat, ms in _stats(dist):
            table.add_row(f"{stat} {name} (ms)", f"{ms:.2f}")
    out.print(table)


def _stats(d: Distribution) -> list[tuple[str, float]]:
    return [("Mean", d.mean_ms), ("Median", d.p50_ms), ("P90", d.p90_ms), ("P99", d.p99_ms)]


def _show_fast(r: FastTierResult) -> None:
    counts = sorted({n for s in r.shapes for n in s.median_s})
    table = Table(title=f"{r.candidate}: step times, predicted at {r.full_layers} layers")
    for column in (
        "phase",
        "batch",
        "context",
        "weight",
        *(f"ms @{n}" for n in counts),
        "predicted ms",
        "CV",
    ):
        table.add_column(column, justify="left" if column == "phase" else "right")
    for s in r.shapes:
        table.add_row(
            s.shape.phase.value,
            str(s.shape.batch_size),
            str(s.shape.context_len),
            f"{s.shape.weight:.2f}",
            *(f"{s.median_s[n] * 1e3:.3f}" for n in counts),
            f"{s.predicted_s * 1e3:.3f}",
            f"{s.cv:.1%}",
        )
    out.print(table)
    p = r.prediction
    out.print(
        f"predicted: decode {p.decode_tok_s:.1f} tok/s, prefill {p.prefill_tok_s:.1f} tok/s, "
        f"TPOT {p.tpot_ms:.2f} ms; score {p.output_tok_s:.1f} output tok/s",
        highlight=False,
    )


def _show_comparison(c: Comparison) -> None:
    colour = {"faster": "green", "slower": "red"}.get(c.verdict.value, "yellow")
    out.print(
        f"{c.candidate} vs {c.incumbent}: speed ratio median {c.median:.3f} (IQR {c.q1:.3f}-{c.q3:.3f}), "
        f"{c.confidence:.0%} CI [{c.ci_low:.3f}, {c.ci_high:.3f}] over {len(c.ratios)} rounds: "
        f"[bold {colour}]{c.verdict.value}[/] (margin {c.margin:.1%})"
        + (f", re-measured {c.remeasured}x" if c.remeasured else ""),
        highlight=False,
    )


def _show_fidelity(r: FidelityReport) -> None:
    table = Table(title="Tier fidelity")
    for column in ("candidate", "fast tier predicted tok/s", "full tier measured tok/s"):
        table.add_column(column, justify="left" if column == "candidate" else "right")
    for row in r.rows:
        table.add_row(row.candidate, f"{row.predicted_tok_s:.1f}", f"{row.measured_tok_s:.1f}")
    out.print(table)
    out.print(f"Spearman rank correlation {r.spearman:.3f} (p = {r.p_value:.3f})", highlight=False)
