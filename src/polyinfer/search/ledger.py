"""Ledger: what the study loop has done so far, for the live view, the summary and the plot."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Entry:
    at_s: float  # since the loop started
    candidate: str  # label
    generator: str
    tier: str
    ratio: float | None  # candidate / incumbent, None when it failed
    verdict: str  # faster | same | slower | failed | screened-out


@dataclass
class Ledger:
    budget_s: float
    started: float = field(default_factory=time.monotonic)
    entries: list[Entry] = field(default_factory=list)
    swap_s: float = 0.0  # building candidates (and the time of builds that failed)
    warmup_s: float = 0.0  # untimed first uses: kernel compiles, graph captures
    measure_s: float = 0.0  # timed A/B rounds, and profiling
    best_speedup: float = 1.0  # versus the baseline, compounded along the incumbent chain
    best_curve: list[tuple[float, float]] = field(default_factory=lambda: [(0.0, 1.0)])
    incumbent: str = "reference"
    queue_depth: int = 0
    resumed: int = 0  # measurements found on the board from an earlier run
    search_s: float | None = None  # when the search phase ended
    search_busy_s: float = 0.0

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    @property
    def remaining_s(self) -> float:
        return self.budget_s - self.elapsed_s

    @property
    def experiments(self) -> int:
        return sum(e.tier == "fast" for e in self.entries)

    @property
    def per_hour(self) -> float:
        return self.experiments * 3600 / max(self.elapsed_s, 1e-9)

    @property
    def busy_fraction(self) -> float:
        """Of the search phase (the final A/B, measurement by construction, does not count)."""
        if self.search_s is None:
            return min(1.0, self.busy_s / max(self.elapsed_s, 1e-9))
        return min(1.0, self.search_busy_s / max(self.search_s, 1e-9))

    @property
    def busy_s(self) -> float:
        return self.swap_s + self.warmup_s + self.measure_s

    def end_search(self) -> None:
        self.search_s, self.search_busy_s = self.elapsed_s, self.busy_s

    @property
    def idle_s(self) -> float:
        return max(0.0, self.elapsed_s - self.busy_s)

    def record(self, entry: Entry, swap_s: float = 0.0, warmup_s: float = 0.0, measure_s: float = 0.0) -> None:
        self.entries.append(entry)
        self.swap_s += swap_s
        self.warmup_s += warmup_s
        self.measure_s += measure_s

    def new_incumbent(self, label: str, speedup: float) -> None:
        self.incumbent = label
        self.best_speedup = speedup
        self.best_curve.append((self.elapsed_s, speedup))
