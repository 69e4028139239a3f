"""The end of a study: a summary table of the best candidates and a plot of best speedup over time,
saved next to the study."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib
from rich.table import Table

from polyinfer.board import Board
from polyinfer.engine.candidate import Candidate, declared_knobs
from polyinfer.engine.serving import SERVING_KNOBS
from polyinfer.errors import PolyinferError
from polyinfer.search.ledger import Ledger
from polyinfer.search.study import StudyResult


def summary_table(board: Board, study_id: int, top: int = 10) -> Table:
    snap = board.snapshot(study_id)
    rows = []
    for view in snap.candidates:
        fast, full = view.best.get("fast"), view.best.get("full")
        if fast is not None:
            rows.append((view, fast, full))
    rows.sort(key=lambda r: -float(r[1].metrics.get("score", 0.0)))
    table = Table(title="best candidates: fast-tier ratio to the incumbent of the time; full tier when promoted")
    for col in ("candidate", "non-default knobs", "fast ratio [95% CI]", "full", "state"):
        table.add_column(col)
    for view, fast, full in rows[:top]:
        rec = view.record
        table.add_row(
            f"{rec.name}@{rec.hash[:8]}",
            changed_knobs(rec.source, rec.knobs),
            f"{fast.ratio_to_incumbent or 1:.3f} [{fast.ci_low or 1:.3f}, {fast.ci_high or 1:.3f}]",
            "-" if full is None else f"{full.ratio_to_incumbent or 1:.3f}",
            str(rec.state),
        )
    failed = len(snap.failures)
    if failed:
        table.caption = f"{failed} candidate(s) failed; `polyinfer board {snap.study.name}` shows why"
    return table


def save(directory: Path, result: StudyResult, ledger: Ledger) -> tuple[Path, Path]:
    """Write summary.json and progress.png into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    summary = directory / "summary.json"
    summary.write_text(json.dumps(result.to_json(), indent=2))
    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    xs = [t for t, _ in ledger.best_curve] + [ledger.elapsed_s]
    ys = [s for _, s in ledger.best_curve] + [ledger.best_speedup]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.step(xs, ys, where="post", color="tab:blue", label="incumbent (full tier, compounded)")
    fast = [e for e in ledger.entries if e.ratio is not None and e.tier == "fast"]
    if fast:
        ax.scatter(
            [e.at_s for e in fast],
            [e.ratio or 0.0 for e in fast],
            s=12,
            color="tab:gray",
            alpha=0.6,
            label="fast-tier ratio to incumbent",
        )
    ax.axhline(1.0, color="black", linewidth=0.6)
    ax.set_xlabel("study time (s)")
    ax.set_ylabel("speedup over the reference")
    ax.set_title(f"{result.study}: final {result.speedup:.2f}x [{result.ci_low:.2f}, {result.ci_high:.2f}]")
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    plot = directory / "progress.png"
    fig.savefig(plot, dpi=120)
    plt.close(fig)
    return summary, plot


def changed_knobs(source: str, knobs: Mapping[str, Any]) -> str:
    """The knobs that differ from their family's first choice, briefly: `fuse_qkv, decode_attention=batched`."""
    try:
        defaults = {k: v[0] for k, v in {**declared_knobs(Candidate(source)), **SERVING_KNOBS}.items()}
    except PolyinferError:
        defaults = {}
    shown = [
        k.removeprefix("serve.") if v is True else f"{k.removeprefix('serve.')}={v}"
        for k, v in knobs.items()
        if defaults.get(k, object()) != v and k != "nonce"
    ]
    return ", ".join(shown) or "-"
