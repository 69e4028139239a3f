"""Statistics of an interleaved A/B comparison: candidate against incumbent, one speed ratio per round.

A round times both in the same session, close together, in random order, so drift that moves both
cancels in their ratio. Over the rounds we report the median ratio, its spread (interquartile range)
and a seeded percentile-bootstrap confidence interval of the median. A difference is called real only
when the interval excludes 1 by the margin: faster when its lower end is above 1 + margin, slower when
its upper end is below 1 - margin. A speedup above `SUSPICIOUS_SPEEDUP` is more often a broken
measurement (or a broken candidate) than a breakthrough, so it must be measured again before it counts
(`polyinfer.bench.compare.confirm`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

SUSPICIOUS_SPEEDUP = 3.0


class Verdict(StrEnum):
    FASTER = "faster"
    SLOWER = "slower"
    SAME = "same"  # no difference beyond the margin can be claimed


@dataclass(frozen=True, slots=True)
class Comparison:
    """`ratios` are candidate speed / incumbent speed, one per round: above 1 the candidate is faster."""

    incumbent: str
    candidate: str
    ratios: tuple[float, ...]
    median: float
    q1: float
    q3: float
    ci_low: float
    ci_high: float
    confidence: float
    margin: float
    verdict: Verdict
    remeasured: int = 0  # how many times a suspicious speedup was measured again

    @property
    def needs_remeasure(self) -> bool:
        return self.median > SUSPICIOUS_SPEEDUP and self.remeasured == 0

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def summarize(
    incumbent: str,
    candidate: str,
    ratios: Sequence[float],
    margin: float = 0.01,
    confidence: float = 0.95,
    resamples: int = 4000,
    seed: int = 0,
) -> Comparison:
    """Summarise per-round speed ratios (see the module docstring)."""
    if not ratios:
        raise ValueError("a comparison needs at least one round")
    r = np.asarray(ratios, dtype=float)
    rng = np.random.default_rng(seed)
    medians = np.median(rng.choice(r, size=(resamples, r.size), replace=True), axis=1)
    tail = 100 * (1 - confidence) / 2
    low, high = (float(v) for v in np.percentile(medians, [tail, 100 - tail]))
    q1, median, q3 = (float(v) for v in np.percentile(r, [25, 50, 75]))
    verdict = Verdict.FASTER if low > 1 + margin else Verdict.SLOWER if high < 1 - margin else Verdict.SAME
    return Comparison(
        incumbent,
        candidate,
        tuple(float(x) for x in r),
        median,
        q1,
        q3,
        low,
        high,
        confidence,
        margin,
        verdict,
    )
