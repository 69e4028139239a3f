"""`polyinfer review [ID]`, `polyinfer approve ID`, `polyinfer reject ID`: the review gate.

The artifact directory is the source of truth; `--board` mirrors each decision into a study's board.
"""

from __future__ import annotations

import json
import time
from typing import Any

import typer
from rich import box
from rich.console import Console
from rich.markdown import Markdown
from rich.syntax import Syntax
from rich.table import Table

from polyinfer.board.board import Board
from polyinfer.cli import app
from polyinfer.review import gate
from polyinfer.review.provenance import Hardware
from polyinfer.review.store import ArtifactStore

ROOT_HELP = "artifact directory (default: $POLYINFER_HOME/artifacts)"


@app.command()
def review(
    artifact_id: str = typer.Argument(None, help="the artifact to show; none lists them all"),
    root: str = typer.Option(None, "--root", help=ROOT_HELP),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """List proposed artifacts, or show one: its report, measurements and diff."""
    store, console = ArtifactStore(root), Console()
    if artifact_id is None:
        artifacts = store.artifacts()
        if as_json:
            print(json.dumps([a.summary() for a in artifacts], indent=2))
            return
        table = Table(box=box.SIMPLE_HEAD, title=f"artifacts in {store.root}")
        for column in ("id", "candidate", "state", "verified", "speedup", "model", "created"):
            table.add_column(column, no_wrap=column in ("id", "state", "created"), overflow="fold")
        for a in artifacts:
            m = a.meta
            table.add_row(
                a.id,
                m.candidate_name,
                a.state.value,
                "yes" if m.verified else "[red]no[/]",
                f"{m.speedup:.2f}x" if m.speedup else "-",
                m.model,
                _when(m.created_at),
            )
        console.print(table)
        return
    artifact = store.get(artifact_id)
    if as_json:
        print(
            json.dumps(
                {**artifact.summary(), "audit": [e.model_dump(mode="json") for e in store.audit(artifact.id)]}
            )
        )
        return
    console.print(Markdown(artifact.read("report.md")))
    console.print(_measurements(json.loads(artifact.read("measurements.json"))))
    diff = artifact.read("diff.patch")
    console.rule("diff against the reference candidate")
    console.print(Syntax(diff, "diff", word_wrap=True) if diff else "(identical to the reference)")
    audit = Table(box=box.SIMPLE_HEAD, title=f"{artifact.id}: {artifact.state.value}")
    for column in ("when", "by", "from", "to", "note"):
        audit.add_column(column)
    for e in store.audit(artifact.id):
        audit.add_row(_when(e.at), e.by, e.from_state or "-", e.to_state, e.note)
    console.print(audit)
    console.print(f"approve: polyinfer approve {artifact.id} --by NAME [--note TEXT]", highlight=False)


@app.command()
def approve(
    artifact_id: str = typer.Argument(...),
    by: str = typer.Option(..., "--by", help="who approves"),
    note: str = typer.Option("", "--note"),
    model: str = typer.Option(
        None, "--model", "-m", help="the model to approve it for (default: the artifact's)"
    ),
    root: str = typer.Option(None, "--root", help=ROOT_HELP),
    board: str = typer.Option(None, "--board", help="also record the approval on this board (path or URL)"),
) -> None:
    """Approve a verified, current artifact for deployment."""
    store = ArtifactStore(root)
    provenance = store.provenance(artifact_id)
    weights_hash = provenance.current_weights_hash(model)
    hardware = Hardware.current(provenance.device)
    artifact = _with_board(
        board,
        lambda b: gate.approve(
            store, artifact_id, by, note, weights_hash=weights_hash, hardware=hardware, board=b
        ),
    )
    print(f"approved {artifact.id} by {by}")


@app.command()
def reject(
    artifact_id: str = typer.Argument(...),
    by: str = typer.Option(..., "--by", help="who rejects"),
    note: str = typer.Option(..., "--note", help="why"),
    root: str = typer.Option(None, "--root", help=ROOT_HELP),
    board: str = typer.Option(None, "--board", help="also record the rejection on this board (path or URL)"),
) -> None:
    """Reject an artifact, saying why."""
    store = ArtifactStore(root)
    artifact = _with_board(board, lambda b: gate.reject(store, artifact_id, by, note, board=b))
    print(f"rejected {artifact.id} by {by}")


def _with_board(target: str | None, action: Any) -> Any:
    if target is None:
        return action(None)
    with Board.open(target) as board:
        return action(board)


def _measurements(values: dict[str, Any]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, title="measurements against the baseline")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in _flatten(values):
        table.add_row(key, f"{value:.4g}" if isinstance(value, float) else str(value))
    return table


def _flatten(values: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = []
    for key, value in values.items():
        if isinstance(value, dict):
            rows += _flatten(value, f"{prefix}{key}.")
        else:
            rows.append((f"{prefix}{key}", value))
    return rows


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(at))
