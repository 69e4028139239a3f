"""Interleaved A/B on a real (tiny) engine: a deliberately slowed candidate is called slower, the
reference against itself is the same, and a suspicious speedup is measured again.

Effects are made large (tens of milliseconds of sleep against a ~1 ms forward pass) so that the
verdicts hold on a busy machine; nothing here asserts an absolute speed.
"""

from __future__ import annotations

from bench.workloads import sleepy, slow_start, small_trace
from polyinfer.bench.compare import ab_fast, ab_full, confirm
from polyinfer.bench.fast_tier import measure
from polyinfer.bench.replay import ReplayOptions
from polyinfer.bench.stats import Verdict
from polyinfer.engine.candidate import Candidate
from polyinfer.traffic.profile import WorkloadProfile

REFERENCE = Candidate.reference()
PROFILE = WorkloadProfile.of(small_trace(8))
FAST = {"full_layers": 3, "reps": 5, "warmup": 1}


def test_fast_tier_measures_every_shape_at_two_depths(engine):
    r = measure(engine, REFERENCE, PROFILE, full_layers=30, reps=3, warmup=1, rounds=2)
    assert r.shapes and all(set(s.median_s) == {1, 3} for s in r.shapes)
    assert all(s.predicted_s >= s.median_s[3] for s in r.shapes)  # 30 layers cost more than 3
    assert r.score > 0 and r.candidate == REFERENCE.label
    assert engine.blocks.num_free == engine.kv.num_blocks  # the timing batches gave their blocks back


def test_slowed_candidate_is_called_slower(engine):
    result = ab_fast(engine, REFERENCE, sleepy(20), PROFILE, rounds=3, **FAST)
    c = result.comparison
    assert c.verdict is Verdict.SLOWER and c.ci_high < 1 - c.margin
    assert len(c.ratios) == 3 and result.candidate.score < result.incumbent.score


def test_a_clearly_slower_candidate_stops_after_two_rounds(engine):
    raced = ab_fast(engine, REFERENCE, sleepy(20), PROFILE, rounds=6, stop_below=0.8, **FAST).comparison
    assert len(raced.ratios) == 2 and raced.verdict is Verdict.SLOWER
    # A candidate that is not clearly slower runs every round.
    even = ab_fast(engine, REFERENCE, REFERENCE, PROFILE, rounds=4, stop_below=0.5, **FAST).comparison
    assert len(even.ratios) == 4


def test_reference_against_itself_is_the_same(engine):
    c = ab_fast(engine, REFERENCE, REFERENCE, PROFILE, rounds=8, margin=0.1, **FAST).comparison
    assert c.verdict is Verdict.SAME
    assert c.ci_low <= 1.1 and c.ci_high >= 0.9


def test_speedup_above_three_is_measured_again(engine):
    calls = []

    def measure_once():
        calls.append(1)
        return ab_fast(engine, sleepy(20), REFERENCE, PROFILE, rounds=2, **FAST)

    kept = confirm(measure_once, rechecks=2)
    assert len(calls) == 3 and kept.comparison.remeasured == 2
    assert kept.comparison.median > 3 and kept.comparison.verdict is Verdict.FASTER


def test_first_use_costs_land_in_the_warm_up_not_in_a_round(engine):
    first = ab_fast(engine, REFERENCE, slow_start(300), PROFILE, rounds=2, **FAST)
    assert first.warmup_s >= 0.3  # each forward's first call at each batch size sleeps; the warm-up made them
    even = ab_fast(engine, REFERENCE, REFERENCE, PROFILE, rounds=2, **FAST)
    assert even.warmup_s < 0.3
    trace = small_trace(2, output_len=2)
    full = ab_full(engine, REFERENCE, slow_start(300), trace, ReplayOptions(warmup_requests=0), rounds=2,
                   warmup_rounds=1)
    assert full.warmup_s >= 0.3
    assert ab_full(engine, REFERENCE, REFERENCE, trace, rounds=2, warmup_rounds=0).warmup_s < 0.01


def test_warmup_rounds_replay_each_side_untimed_first(engine, monkeypatch):
    from polyinfer.bench import compare

    replays = []
    real = compare.replay
    monkeypatch.setattr(compare, "replay", lambda *a, **k: replays.append(1) or real(*a, **k))
    trace = small_trace(2, output_len=2)
    result = ab_full(engine, REFERENCE, REFERENCE, trace, ReplayOptions(warmup_requests=0), rounds=2,
                     warmup_rounds=1)
    assert len(replays) == 2 * (2 + 1) and len(result.comparison.ratios) == 2


def test_full_tier_comparison_replays_each_side_per_round(engine):
    trace = small_trace(4, output_len=4)
    result = ab_full(engine, REFERENCE, sleepy(20), trace, ReplayOptions(warmup_requests=1), rounds=3)
    assert result.comparison.verdict is Verdict.SLOWER
    assert result.candidate.requests == result.incumbent.requests == 4
    assert engine.candidate is not None and engine.candidate.hash == REFERENCE.hash  # put back
