"""`polyinfer optimize`, `polyinfer status` and `polyinfer board`: run a study, watch it, read its posts."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import optuna
import typer
from rich.console import Console
from rich.table import Table

from polyinfer.board import Board, CandidateState
from polyinfer.board.records import Study
from polyinfer.cli import app
from polyinfer.engine.candidate import Candidate
from polyinfer.engine.messages import WorkerSpec
from polyinfer.engine.supervisor import EngineProcess
from polyinfer.errors import PolyinferError
from polyinfer.models.default import polyinfer_home
from polyinfer.models.load import load_model, model_spec
from polyinfer.review.store import create_artifact
from polyinfer.search import experiment, report
from polyinfer.search.generators.registry import make_agents
from polyinfer.search.progress import LiveView
from polyinfer.search.study import StudyConfig, StudyLoop, StudyResult
from polyinfer.traffic.workload import load_workload
from polyinfer.verify import BatteryConfig, record_verdicts, verify_candidate

out = Console()


def parse_duration(text: str) -> float:
    """'90s', '10m', '1h30m' or plain seconds."""
    match = re.fullmatch(r"\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s?)?\s*", text)
    if not text.strip() or not match or not any(match.groups()):
        raise PolyinferError(f"cannot read the duration {text!r}; write e.g. 90s, 10m or 1h30m")
    h, m, s = (float(g) if g else 0.0 for g in match.groups())
    return h * 3600 + m * 60 + s


def open_board(url: str | None) -> Board:
    return Board.open(url or polyinfer_home() / "board.db")


def study_dir(name: str) -> Path:
    return polyinfer_home() / "studies" / name


@app.command()
def optimize(
    model: str = typer.Option(None, "--model", "-m", help="checkpoint dir, .gguf or preset (default: SmolLM2-135M-Instruct)"),
    traffic: str = typer.Option("chat", "--traffic", "-t", help="trace file or synthetic preset"),
    budget: str = typer.Option("3m", "--budget", help="search wall time, e.g. 90s, 10m, 1h"),
    agents: str = typer.Option("knobs", "--agents", help="generators, e.g. knobs or knobs,llm:attention"),
    baseline: str = typer.Option("reference", "--baseline",
                                 help="the candidate to beat: a .py file or built-in name, with optional :knob=value"),
    study: str = typer.Option(None, "--study", help="study name; an existing study resumes"),
    board: str = typer.Option(None, "--board", help="board URL or SQLite path (default: $POLYINFER_HOME/board.db)"),
    device: str = typer.Option("cpu", "--device"),
    dtype: str = typer.Option("float32", "--dtype"),
    max_experiments: int = typer.Option(None, "--max-experiments"),
    fast_layers: int = typer.Option(None, "--fast-layers", help="layers the fast tier loads (default: a fifth)"),
    max_requests: int = typer.Option(8, "--max-requests", help="requests of the trace the full tier replays"),
    max_len: int = typer.Option(128, "--max-len", help="cap on prompt + output tokens per replayed request"),
    block_size: int = typer.Option(16, "--block-size", help="KV cache block size (tokens), for the whole study"),
    max_num_seqs: int = typer.Option(64, "--max-num-seqs", help="most sequences the scheduler runs at once"),
    kv_cache_tokens: int = typer.Option(None, "--kv-cache-tokens", help="KV pool size (default: what memory allows)"),
    seed: int = typer.Option(0, "--seed"),
    as_json: bool = typer.Option(False, "--json", help="print the result as JSON instead of a live view"),
) -> None:
    """Search for a faster forward pass for this model, traffic and hardware."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    config = StudyConfig(name=study or time.strftime("study-%Y%m%d-%H%M%S"), model=model, traffic=traffic,
                         budget_s=parse_duration(budget), max_experiments=max_experiments, agents=agents,
                         device=device, dtype=dtype, fast_layers=fast_layers, seed=seed, block_size=block_size,
                         max_num_seqs=max_num_seqs, kv_cache_tokens=kv_cache_tokens)
    config.engine_config()  # refuse bad engine settings before loading anything
    spec = model_spec(model)
    trace = load_workload(traffic, max_requests, max_len)
    generators = make_agents(agents, base="fast", serving=True, seed=seed)
    with open_board(board) as b, LiveView(f"polyinfer optimize: {config.name}", enabled=not as_json) as view:
        loop = StudyLoop(config, b, trace, spec, generators, view, Candidate.parse(baseline))
        result = loop.run()
        table = report.summary_table(b, loop.study.id)
        artifact = propose(b, loop, result, quiet=as_json) if result.best_candidate else None
    summary, plot = report.save(study_dir(config.name), result, loop.ledger)
    if as_json:
        print(json.dumps({**result.to_json(), "summary": str(summary), "plot": str(plot), **(artifact or {})}))
        return
    out.print(table)
    out.print(f"\n[bold]{result.best_label}[/] vs the baseline ({baseline}), full tier, same session: "
              f"[bold green]{result.speedup:.3f}x[/] (95% CI {result.ci_low:.3f}-{result.ci_high:.3f}, "
              f"{result.verdict}); {result.baseline_tok_s:.1f} -> {result.best_tok_s:.1f} output tok/s")
    out.print(f"{result.experiments} experiments in {result.elapsed_s:.0f} s ({result.experiments_per_hour:.0f}/h), "
              f"device busy {100 * result.busy_fraction:.0f}% (swap {result.swap_s:.1f} s, warm-up/compile "
              f"{result.warmup_s:.1f} s, measure {result.measure_s:.1f} s, idle {result.idle_s:.1f} s)")
    out.print(f"summary {summary}\nplot    {plot}\nposts   polyinfer board {config.name}")
    if artifact:
        verdict = "[green]passed[/]" if artifact["verified"] else "[red]FAILED[/] (it cannot be approved)"
        out.print(f"verification {verdict} in {artifact['verify_s']:.0f} s; review it: "
                  f"[bold]polyinfer review {artifact['artifact']}[/]")
        for name, reason in artifact["verify_failures"].items():
            out.print(f"  [red]{name}[/]: {reason}", highlight=False)
    else:
        out.print("nothing beat the baseline beyond noise, so there is nothing to review")


def propose(b: Board, loop: StudyLoop, result: StudyResult, quiet: bool) -> dict[str, Any]:
    """Verify the study's winner (isolated, fresh seed) and leave a proposed artifact for a person."""
    c, best = loop.config, loop.incumbent
    if not quiet:
        out.print(f"verifying {best.label} against the reference (equivalence, KV-cache contamination, "
                  "invariance, integrity)...")

    def remeasure(candidate: Candidate) -> float:
        """A claim above 3x is measured again from scratch: a new worker, a new seed, the full tier."""
        with EngineProcess(WorkerSpec(c.model, c.engine_config())) as proc:
            return proc.call(experiment.full, loop.baseline, candidate, loop.trace, 3, c.margin, c.seed + 2,
                             timeout_s=c.experiment_timeout_s).ratio

    verdict = verify_candidate(best, c.model, BatteryConfig(device=c.device, dtype=c.dtype),
                               measured_hash=best.hash, claimed_speedup=result.speedup, claimed_low=result.ci_low,
                               remeasure=remeasure,
                               isolated=True)
    record_verdicts(b, loop.study.id, verdict)
    b.set_candidate_state(loop.study.id, best.hash,
                          CandidateState.VERIFIED if verdict.passed else CandidateState.REJECTED)
    model = load_model(c.model, dtype=c.engine_config().torch_dtype, device=c.device, num_layers=1)
    artifact = create_artifact(best, verdict, model, measurements=result.to_json(), profile=loop.profile)
    failures = {name: verdict.check(name).reason for name in verdict.failed}
    return {"artifact": artifact.id, "verified": verdict.passed, "verify_s": verdict.seconds,
            "verify_failures": failures}


def _study(b: Board, name: str | None) -> Study:
    studies = b.studies()
    if not studies:
        raise PolyinferError("no studies on this board yet; run `polyinfer optimize`")
    if name is None:
        return max(studies, key=lambda s: s.created_at)
    found = b.get_study(name)
    if found is None:
        raise PolyinferError(f"no study {name!r}; studies: {', '.join(s.name for s in studies)}")
    return found


@app.command()
def status(
    study: str = typer.Argument(None, help="a study name (default: all studies)"),
    board: str = typer.Option(None, "--board"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """The studies on the board, or one study's candidates and incumbent."""
    with open_board(board) as b:
        if study is None:
            rows = []
            for s in b.studies():
                snap = b.snapshot(s.id, posts=0)
                rows.append({"study": s.name, "state": str(s.state), "candidates": len(snap.candidates),
                             "failed": len(snap.failures), "created": s.created_at})
            if as_json:
                print(json.dumps(rows))
                return
            table = Table(title="studies")
            for col in ("study", "state", "candidates", "failed", "created"):
                table.add_column(col)
            for r in rows:
                table.add_row(r["study"], r["state"], str(r["candidates"]), str(r["failed"]),
                              time.strftime("%Y-%m-%d %H:%M", time.localtime(float(r["created"]))))
            out.print(table)
            return
        s = _study(b, study)
        snap = b.snapshot(s.id)
        if as_json:
            print(json.dumps({
                "study": s.name, "state": str(s.state), "config": dict(s.config),
                "candidates": [{"hash": v.hash, "name": v.record.name, "generator": v.record.generator,
                                "knobs": dict(v.record.knobs), "state": str(v.state), "error": v.record.error,
                                "ratios": {t: m.ratio_to_incumbent for t, m in v.best.items()}}
                               for v in snap.candidates]}))
            return
        out.print(f"[bold]{s.name}[/] ({s.state}): {len(snap.candidates)} candidates, {len(snap.failures)} failed")
        out.print(report.summary_table(b, s.id))


@app.command("board")
def board_posts(
    study: str = typer.Argument(None, help="a study name (default: the latest)"),
    board: str = typer.Option(None, "--board"),
    limit: int = typer.Option(50, "--limit", "-n"),
) -> None:
    """The agents' message board of a study: ideas, results, failures, incumbent changes."""
    with open_board(board) as b:
        s = _study(b, study)
        colours = {"failure": "red", "incumbent": "green", "result": "bold green", "idea": "cyan"}
        for p in b.posts(s.id, limit=limit):
            stamp = time.strftime("%H:%M:%S", time.localtime(p.created_at))
            refs = f" [dim]({', '.join(r[:8] for r in p.refs)})[/]" if p.refs else ""
            out.print(f"[dim]{stamp}[/] [{colours.get(p.kind, 'white')}]{p.kind:9}[/] [bold]{p.agent}[/]: "
                      f"{p.text}{refs}", highlight=False)
