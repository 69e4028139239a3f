"""Statistics of interleaved comparisons: verdicts, the bootstrap interval, re-measuring big speedups."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from polyinfer.bench.compare import ABResult, confirm
from polyinfer.bench.metrics import RequestRecord, ServingMetrics
from polyinfer.bench.stats import SUSPICIOUS_SPEEDUP, Verdict, summarize


def ratios_around(centre: float, spread: float, n: int = 12, seed: int = 1) -> list[float]:
    return list(centre + spread * np.random.default_rng(seed).standard_normal(n))


NOISY = [0.5, 1.6, 0.8, 1.3, 0.9, 1.2, 1.0, 1.1, 0.7, 1.4]  # median 1.05, but anything goes


@pytest.mark.parametrize(
    ("ratios", "verdict"),
    [
        (ratios_around(1.20, 0.02), Verdict.FASTER),
        (ratios_around(0.80, 0.02), Verdict.SLOWER),
        (ratios_around(1.00, 0.02), Verdict.SAME),
        (ratios_around(1.005, 0.001), Verdict.SAME),  # real but inside the 1% margin
        (NOISY, Verdict.SAME),
    ],
)
def test_verdict_needs_the_interval_to_clear_the_margin(ratios, verdict):
    c = summarize("inc", "cand", ratios)
    assert c.verdict is verdict
    assert c.ci_low <= c.median <= c.ci_high
    assert c.q1 <= c.median <= c.q3


def test_interval_is_seeded_and_narrows_with_rounds():
    few = summarize("a", "b", ratios_around(1.1, 0.05, n=5))
    assert few == summarize("a", "b", ratios_around(1.1, 0.05, n=5))
    many = summarize("a", "b", ratios_around(1.1, 0.05, n=60))
    assert many.ci_high - many.ci_low < few.ci_high - few.ci_low
    assert summarize("a", "b", [1.0, 1.1, 1.2], margin=0.0).median == pytest.approx(1.1)


def _result(median_ratio: float) -> ABResult[ServingMetrics]:
    m = ServingMetrics.of([RequestRecord(0.0, 1, (1.0,))])
    return ABResult(summarize("inc", "cand", [median_ratio] * 3), m, m)


def test_a_suspicious_speedup_is_measured_again_and_the_lowest_kept():
    runs = iter([_result(5.0), _result(4.0), _result(1.5)])
    kept = confirm(lambda: next(runs), rechecks=2)
    assert kept.comparison.remeasured == 2
    assert kept.comparison.median == pytest.approx(1.5) and kept.comparison.verdict is Verdict.FASTER
    assert not kept.comparison.needs_remeasure


def test_an_ordinary_result_is_measured_once():
    calls = itertools.count()

    def measure():
        next(calls)
        return _result(SUSPICIOUS_SPEEDUP * 0.9)

    kept = confirm(measure)
    assert next(calls) == 1 and kept.comparison.remeasured == 0


def test_a_confirmed_speedup_still_counts():
    kept = confirm(lambda: _result(4.0), rechecks=1)
    assert kept.comparison.remeasured == 1 and kept.comparison.verdict is Verdict.FASTER
    assert dataclasses.asdict(kept.comparison)["verdict"] == "faster"
