"""The live terminal view of a running study (rich), redrawn from the ledger."""

from __future__ import annotations

from rich.console import Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table

from polyinfer.search.ledger import Ledger


def render(ledger: Ledger, title: str) -> Panel:
    head = Table.grid(padding=(0, 3))
    head.add_row(
        f"elapsed [bold]{ledger.elapsed_s:5.0f}[/]/{ledger.budget_s:.0f} s",
        f"experiments [bold]{ledger.experiments}[/] ({ledger.per_hour:.0f}/h)",
        f"queue [bold]{ledger.queue_depth}[/]",
        f"device busy [bold]{100 * ledger.busy_fraction:.0f}%[/]",
        f"best speedup [bold green]{ledger.best_speedup:.3f}x[/]",
    )
    head.add_row(
        f"incumbent [cyan]{ledger.incumbent}[/]",
        f"swap {ledger.swap_s:.1f} s",
        f"warm-up {ledger.warmup_s:.1f} s",
        f"measure {ledger.measure_s:.1f} s",
        f"idle {ledger.idle_s:.1f} s",
        f"resumed {ledger.resumed}" if ledger.resumed else "",
    )
    recent = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("t (s)", "candidate", "generator", "tier", "ratio", "verdict"):
        recent.add_column(col)
    colours = {"faster": "green", "slower": "red", "failed": "red", "screened-out": "red"}
    for e in ledger.entries[-8:]:
        colour = colours.get(e.verdict, "white")
        recent.add_row(
            f"{e.at_s:.0f}",
            e.candidate,
            e.generator,
            e.tier,
            "-" if e.ratio is None else f"{e.ratio:.3f}",
            f"[{colour}]{e.verdict}[/]",
        )
    return Panel(Group(head, recent), title=title, border_style="blue")


class LiveView:
    """A context manager whose instances are callables the study loop hands each ledger update to."""

    def __init__(self, title: str, enabled: bool = True) -> None:
        self.title = title
        self.live = Live(refresh_per_second=4, transient=False) if enabled else None

    def __enter__(self) -> LiveView:
        if self.live:
            self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live:
            self.live.stop()

    def __call__(self, ledger: Ledger) -> None:
        if self.live:
            self.live.update(render(ledger, self.title))
