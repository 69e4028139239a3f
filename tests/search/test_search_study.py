"""The study loop end to end: it finds the faster knob value, promotes it through both tiers, and
reports a same-session speedup against the baseline; generators' failures land on the board."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from polyinfer.board import Board, CandidateState
from polyinfer.engine.candidate import Candidate
from polyinfer.models.load import model_spec
from polyinfer.search.generators.knobs import KnobConfig, KnobSearcher
from polyinfer.search.study import StudyConfig, StudyLoop
from polyinfer.traffic.synth import PRESETS, synthesize
from polyinfer.traffic.workload import cap_trace

WASTEFUL = Path(__file__).parent / "candidates" / "wasteful.py"


@pytest.fixture(scope="module")
def trace():
    return cap_trace(synthesize(PRESETS["chat"]), 6, 40)


def run_study(tmp_path: Path, trace, name: str = "s", **overrides) -> tuple[StudyLoop, object, Board]:
    base = Candidate.from_file(WASTEFUL)
    config = StudyConfig(name=name, model="tiny-llama", budget_s=240, rounds=3, reps=2, full_rounds=2,
                         margin=0.05, **overrides)
    board = Board.open(tmp_path / "board.db")
    searcher = KnobSearcher(KnobConfig(base=base, seed=0))
    loop = StudyLoop(config, board, trace, model_spec("tiny-llama"), [searcher],
                     baseline=base.with_knobs({"waste": 100}))
    return loop, loop.run(), board


@pytest.mark.slow
def test_study_finds_promotes_and_reports_a_verified_speedup(tmp_path, trace):
    loop, result, board = run_study(tmp_path, trace)
    snap = board.snapshot(loop.study.id)
    by_knobs = {v.record.knobs.get("waste"): v for v in snap.candidates}
    assert set(by_knobs) == {100, 0, 50}  # the whole grid, each point once
    winner = by_knobs[0]
    assert "full" in winner.best and winner.best["fast"].ratio_to_incumbent > 1.5
    assert result.best_candidate == winner.hash and result.verdict == "faster" and result.speedup > 1.5
    assert result.ci_low > 1.0
    assert by_knobs[50].best["fast"].ratio_to_incumbent < 1  # measured against the new incumbent
    counts = Counter((m.candidate_hash, m.tier) for v in snap.candidates
                     for m in board.measurements(loop.study.id, v.hash))
    assert counts[(winner.hash, "fast")] == 1  # nothing measured twice on a tier
    assert any(p.kind == "incumbent" and p.refs == (winner.hash,) for p in snap.posts)
    # each incumbent's per-operation profile is posted for the agents: the baseline's, then the winner's
    profiles = [p for p in snap.posts if p.kind == "profile"]
    assert [p.refs for p in profiles] == [(loop.baseline.hash,), (winner.hash,)]
    assert all("aten::" in p.text and "us/step" in p.text for p in profiles)
    ledger = loop.ledger
    assert ledger.experiments == 3 and 0 < ledger.busy_fraction <= 1
    assert ledger.swap_s > 0 and ledger.warmup_s > 0 and ledger.measure_s > 0
    busy = sum(m.timings["swap_s"] + m.timings["warmup_s"] + m.timings["measure_s"]
               for v in snap.candidates for m in board.measurements(loop.study.id, v.hash))
    assert busy <= ledger.swap_s + ledger.warmup_s + ledger.measure_s + 1e-6  # the final A/B and profiles add
    assert all(v.state is not CandidateState.MEASURING for v in snap.candidates)


def test_promotion_lets_the_full_tier_judge_what_the_fast_tier_cannot_see():
    from polyinfer.bench.compare import ABResult
    from polyinfer.bench.stats import summarize
    from polyinfer.search.experiment import Outcome
    from polyinfer.search.study import promote

    def outcome(ratios: list[float]) -> Outcome:
        return Outcome("fast", ABResult(summarize("a", "b", ratios, 0.02), None, None), 0.0, 0.0, 0.0)

    same, faster, slower = outcome([1.0, 1.001, 0.999, 1.0]), outcome([1.5] * 4), outcome([0.5] * 4)
    incumbent = Candidate.builtin("fast", {"fuse_qkv": True})
    steps = incumbent.with_knobs({"serve.async_steps": True})
    assert promote(incumbent, steps, same)  # only the step knob changed: the full tier must decide
    assert not promote(incumbent, steps, slower)
    assert not promote(incumbent, incumbent.with_knobs({"rope": "table"}), same)  # the fast tier saw it
    assert not promote(incumbent, steps.with_knobs({"rope": "table"}), same)
    assert promote(incumbent, incumbent.with_knobs({"rope": "table"}), faster)
