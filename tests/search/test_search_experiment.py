"""A fast-tier experiment builds its candidate once, and the incumbent once per study, not per experiment."""

from __future__ import annotations

from collections import Counter

import pytest

from polyinfer.bench import fast_tier
from polyinfer.engine.candidate import Candidate
from polyinfer.engine.config import EngineConfig
from polyinfer.engine.engine import Engine
from polyinfer.models.load import load_model
from polyinfer.search import experiment
from polyinfer.traffic.profile import WorkloadProfile
from polyinfer.traffic.synth import PRESETS, synthesize
from polyinfer.traffic.workload import cap_trace


@pytest.fixture
def builds(monkeypatch) -> Counter:
    """Calls of `Engine.prepare` (import, build, probe) per candidate label."""
    counts: Counter = Counter()
    prepare = Engine.prepare

    def counted(self, candidate):
        counts[candidate.label] += 1
        return prepare(self, candidate)

    monkeypatch.setattr(Engine, "prepare", counted)
    return counts


def test_each_side_is_built_once(builds):
    engine = Engine(load_model("tiny-llama"), EngineConfig(kv_cache_tokens=2048, max_num_seqs=4))
    profile = WorkloadProfile.of(cap_trace(synthesize(PRESETS["chat"]), 4, 40))
    fast = Candidate.builtin("fast")
    incumbent, newer = Candidate.reference(), fast.with_knobs({"fuse_qkv": True})
    run = lambda inc, cand: experiment.fast(engine, inc, cand, profile, 30, 2, 2, 0.05, 0)  # noqa: E731
    builds.clear()  # the engine built the reference to start on
    for cand in (fast, fast.with_knobs({"rope": "table"})):
        out = run(incumbent, cand)
        assert out.swap_s > 0 and out.warmup_s > 0 and out.measure_s > 0 and len(out.ab.comparison.ratios) == 2
    assert builds[incumbent.label] == 1  # kept across the two experiments
    assert builds[fast.label] == 1 and builds[fast.with_knobs({"rope": "table"}).label] == 1
    # A new incumbent replaces the kept one.
    run(newer, fast)
    assert builds[newer.label] == 1 and builds[fast.label] == 2
    assert experiment._INCUMBENTS[engine][0] == newer.hash


def test_a_full_tier_experiment_builds_each_side_once(builds):
    engine = Engine(load_model("tiny-llama"), EngineConfig(kv_cache_tokens=2048, max_num_seqs=4))
    builds.clear()
    trace = cap_trace(synthesize(PRESETS["chat"]), 2, 24)
    fast = Candidate.builtin("fast")
    out = experiment.full(engine, Candidate.reference(), fast, trace, 2, 0.05, 0)
    assert len(out.ab.comparison.ratios) == 2
    assert builds == {Candidate.reference().label: 1, fast.label: 1}


def test_the_prepared_forwards_are_the_ones_timed(monkeypatch):
    engine = Engine(load_model("tiny-llama"), EngineConfig(kv_cache_tokens=2048, max_num_seqs=4))
    profile = WorkloadProfile.of(cap_trace(synthesize(PRESETS["chat"]), 4, 40))
    calls = Counter()
    real = fast_tier.prepare_layers

    def counted(engine, candidate):
        calls[candidate.label] += 1
        return real(engine, candidate)

    monkeypatch.setattr(fast_tier, "prepare_layers", counted)
    experiment.fast(engine, Candidate.reference(), Candidate.builtin("fast"), profile, 30, 2, 2, 0.05, 0)
    assert sum(calls.values()) == 2  # one per side; ab_fast built nothing again
