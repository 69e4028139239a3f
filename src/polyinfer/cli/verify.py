"""`polyinfer verify CANDIDATE`: run the verification battery on a candidate file and print the report.

By default the battery runs in an engine worker process under a time limit, so a hostile or broken
candidate fails its report instead of hanging or killing the command. Exit status: 0 passed, 1 failed,
2 bad input.
"""

from __future__ import annotations

import json

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from polyinfer.cli import app
from polyinfer.engine.candidate import Candidate
from polyinfer.errors import PolyinferError
from polyinfer.verify import ALL_CHECKS, BatteryConfig, Report, verify_candidate


def parse_knobs(text: str | None) -> dict[str, object]:
    try:
        parsed = json.loads(text) if text else {}
    except json.JSONDecodeError as e:
        raise PolyinferError(f"--knobs must be a JSON object: {e}") from None
    if not isinstance(parsed, dict):
        raise PolyinferError("--knobs must be a JSON object")
    return parsed


@app.command()
def verify(
    candidate: str = typer.Argument(..., help="candidate source file, or a built-in candidate's name"),
    model: str = typer.Option(
        None, "--model", "-m", help="checkpoint dir, .gguf file or preset (default: SmolLM2-135M-Instruct)"
    ),
    layers: int = typer.Option(None, "--layers", help="load only the first K layers"),
    exact: bool = typer.Option(False, "--exact", help="also require logits bit-identical to the reference"),
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
    device: str = typer.Option("cpu", "--device"),
    dtype: str = typer.Option("float32", "--dtype"),
    block_size: int = typer.Option(16, "--block-size"),
    seed: int = typer.Option(None, "--seed", help="the battery seed (default: fresh); replays a report"),
    only: str = typer.Option(None, "--only", help="comma-separated checks to run, e.g. contamination.needle"),
    knobs: str = typer.Option(None, "--knobs", help="the candidate's knobs as a JSON object"),
    timeout: float = typer.Option(900.0, "--timeout", help="seconds the whole battery may take"),
    in_process: bool = typer.Option(
        False, "--in-process", help="run in this process (trusted candidates only)"
    ),
) -> None:
    """Run the verification battery on a candidate."""
    cand = Candidate.parse(candidate, parse_knobs(knobs))
    names = tuple(n.strip() for n in only.split(",") if n.strip()) if only else ()
    unknown = [n for n in names if n not in ALL_CHECKS]
    if unknown:
        raise PolyinferError(f"unknown check {unknown[0]!r}; checks: {', '.join(ALL_CHECKS)}")
    config = BatteryConfig(
        device=device, dtype=dtype, block_size=block_size, only=names, exact=exact, timeout_s=timeout
    )
    report = verify_candidate(cand, model, config, seed=seed, num_layers=layers, isolated=not in_process)
    if as_json:
        print(report.to_json())
    else:
        show(report, Console())
    if not report.passed:
        raise typer.Exit(1)


def show(report: Report, console: Console) -> None:
    table = Table(
        box=box.SIMPLE_HEAD, title=f"{report.candidate_name or 'candidate'} {report.candidate_hash}"
    )
    for column in ("check", "result", "numbers", "seconds"):
        table.add_column(column, justify="right" if column == "seconds" else "left", overflow="fold")
    for c in report.checks:
        result = "[dim]skipped[/]" if c.skipped else ("[green]pass[/]" if c.passed else "[bold red]FAIL[/]")
        numbers = ", ".join(f"{k}={_fmt(v)}" for k, v in c.numbers.items() if k not in _SETTINGS)
        table.add_row(c.name, result, numbers, f"{c.seconds:.2f}")
    console.print(table)
    for c in report.checks:
        if not c.passed:
            console.print(f"[bold red]{c.name}[/]: {c.reason}", highlight=False)
    verdict = "[bold green]PASSED[/]" if report.passed else "[bold red]FAILED[/]"
    console.print(
        f"{verdict} on {report.model} ({report.num_layers} layers, {report.device}, {report.dtype}) "
        f"in {report.seconds:.2f} s; seed {report.seed}",
        highlight=False,
    )
    if report.logits_tolerance is not None:
        console.print(report.tolerance_line(), highlight=False, soft_wrap=True)


# Numbers that restate the battery's settings or identities rather than what the check measured.
_SETTINGS = frozenset({"tolerance", "min_agreement", "limit", "verified_hash", "measured_hash"})


def _fmt(value: object) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)
