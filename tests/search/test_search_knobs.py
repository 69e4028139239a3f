"""The knob searcher against a real board, measuring by a known function of the knobs.

Results arrive one round late, as they do when the study loop measures in the background, so the searcher
must keep trials open across calls and never re-propose a pending candidate.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import pytest
from optuna.samplers import CmaEsSampler, TPESampler
from optuna.trial import TrialState

from polyinfer.board import Board, CandidateState
from polyinfer.engine.candidate import Candidate
from polyinfer.errors import PolyinferError
from polyinfer.search.generators import KnobSearcher, make_generator
from polyinfer.search.proposal import Proposal

FAMILY = """
KNOBS = {"block": [64, 16, 32, 128], "warps": [4, 1, 2, 8], "layout": ["nhd", "hnd"]}


def build(ctx):
    raise NotImplementedError("never built: the test measures it by a formula")
"""
BASE = Candidate(FAMILY, {}, "family")
DEFAULTS = {"block": 64, "warps": 4, "layout": "nhd"}
OPTIMUM = {"block": 32, "warps": 2, "layout": "hnd"}
GRID = [
    dict(zip(("block", "warps", "layout"), p, strict=True))
    for p in itertools.product((16, 32, 64, 128), (1, 2, 4, 8), ("nhd", "hnd"))
]


def point(knobs: Any) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(knobs.items()))


def score(knobs: dict[str, Any]) -> float:
    return (
        100
        - 10 * (math.log2(knobs["block"]) - 5) ** 2
        - 5 * (math.log2(knobs["warps"]) - 1) ** 2
        + (3 if knobs["layout"] == "hnd" else 0)
    )


def fails(knobs: dict[str, Any]) -> bool:
    return knobs["block"] == 128 and knobs["warps"] == 8  # "exceeds shared memory"


class Study:
    """A study loop in miniature: propose, queue on the board, measure what was queued the round before."""

    def __init__(self, tmp_path: Path, measure: bool = True) -> None:
        self.board = Board.open(tmp_path / "board.db")
        self.id = self.board.create_study("knobs").id
        self.measure = measure
        self.proposals: list[Proposal] = []
        self.batch_sizes: list[int] = []

    def add(self, candidate: Candidate, generator: str) -> bool:
        return self.board.add_candidate(
            self.id,
            candidate.hash,
            name=candidate.name,
            source=candidate.source,
            knobs=candidate.knobs,
            generator=generator,
        )

    def measure_queued(self) -> None:
        for record in self.board.pending_candidates(self.id):
            self.measure_one(record.hash, dict(record.knobs))

    def run(self, searcher: KnobSearcher, rounds: int = 100) -> list[Proposal]:
        for _ in range(rounds):
            if searcher.exhausted:
                break
            queued_before = self.board.pending_candidates(self.id)
            batch = searcher.propose(self.board.snapshot(self.id))
            self.batch_sizes.append(len(batch))
            for p in batch:
                assert self.add(p.candidate, p.generator), f"duplicate proposal {p.candidate.knobs}"
            if self.measure:
                for record in queued_before:  # last round's candidates only: results arrive late
                    self.measure_one(record.hash, dict(record.knobs))
            self.proposals.extend(batch)
        return self.proposals

    def measure_one(self, hash: str, knobs: dict[str, Any]) -> None:
        if fails(knobs):
            self.board.set_candidate_state(self.id, hash, CandidateState.FAILED, error="OutOfResources")
        else:
            self.board.record_measurement(
                self.id, hash, tier="fast", metrics={"score": score(knobs)}, repetitions=1
            )


def searcher(**config: Any) -> KnobSearcher:
    made = make_generator("knobs", base=BASE, **config)
    assert isinstance(made, KnobSearcher)
    return made


def test_the_first_proposal_is_the_family_with_its_default_knobs(tmp_path: Path) -> None:
    first = searcher().propose(Study(tmp_path).board.snapshot(1))[0]
    assert first.candidate == BASE.with_knobs(DEFAULTS)
    assert first.generator == "knobs" and first.parent_hash == BASE.hash
    assert "baseline" in (first.post or "")


def test_the_familys_seeds_come_next_and_seeds_outside_the_space_are_dropped(tmp_path: Path) -> None:
    seeded = Candidate(BASE.source.replace(
        "KNOBS =", 'SEEDS = [{"block": 128, "layout": "hnd"}, {"block": 256}, {"depth": 2}]\nKNOBS ='), {}, "family")
    s = make_generator("knobs", base=seeded, batch=3)
    assert isinstance(s, KnobSearcher)
    first, second, _ = s.propose(Study(tmp_path).board.snapshot(1))
    assert first.candidate == seeded.with_knobs(DEFAULTS)
    assert second.candidate == seeded.with_knobs({**DEFAULTS, "block": 128, "layout": "hnd"})
    assert s.seeds() == [{**DEFAULTS, "block": 128, "layout": "hnd"}]  # 256 is no choice; depth no knob


def test_it_covers_the_grid_without_a_duplicate_and_ends_exhausted(tmp_path: Path) -> None:
    study = Study(tmp_path)
    s = searcher(batch=3)
    proposals = study.run(s)
    assert s.exhausted and s.grid_size == len(GRID) == 32
    assert sorted(point(p.candidate.knobs) for p in proposals) == sorted(point(k) for k in GRID)
    assert max(study.batch_sizes) == 3
    assert s.propose(study.board.snapshot(study.id)) == []


def test_settings_the_family_declares_invalid_are_never_proposed(tmp_path: Path) -> None:
    constrained = Candidate(FAMILY + """

def invalid(knobs):
    if knobs["layout"] == "hnd" and knobs["warps"] == 1:
        return "hnd needs more than one warp"
    return None
""", {}, "family")
    s = make_generator("knobs", base=constrained, batch=3)
    assert isinstance(s, KnobSearcher)
    study = Study(tmp_path)
    proposals = study.run(s)
    valid = [k for k in GRID if not (k["layout"] == "hnd" and k["warps"] == 1)]
    assert s.exhausted and len(valid) == 28
    assert sorted(point(p.candidate.knobs) for p in proposals) == sorted(point(k) for k in valid)
    notes = s.take_notes()
    assert any("declares invalid" in n.text and "hnd needs more than one warp" in n.text for n in notes)


def test_the_fast_familys_constraints_are_what_its_build_refuses() -> None:
    from polyinfer.candidates import fast

    assert fast.invalid({"activation": "triton"}) == fast.invalid({"activation": "triton", "fuse_qkv": True})
    assert "fuse_gate_up" in (fast.invalid({"activation": "triton"}) or "")
    assert "decode_attention=triton" in (fast.invalid({"cuda_graphs": True}) or "")
    assert fast.invalid({"cuda_graphs": True, "decode_attention": "triton"}) is None
    assert "pdl" in (fast.invalid({"pdl": True}) or "")  # no Triton kernel chosen: nothing launches with PDL
    assert fast.invalid({"pdl": True, "norm": "triton"}) is None
    assert fast.invalid({}) is None and all(fast.invalid(seed) is None for seed in fast.SEEDS)


# A numeric family of 256 points: a budget of a quarter of the grid finds the optimum by search, not luck
# (four random runs of 64 draws would all hit it with probability 0.25**4).
NUMERIC = Candidate(
    'KNOBS = {"a": [1, 2, 3, 4, 5, 6, 7, 8], "b": [8, 7, 6, 5, 4, 3, 2, 1], "c": [1, 2, 3, 4]}\n'
    "def build(ctx):\n    pass\n",
    {},
    "numeric",
)


def numeric_score(knobs: dict[str, Any]) -> float:
    return 100 - (knobs["a"] - 6) ** 2 - (knobs["b"] - 3) ** 2 - 2 * (knobs["c"] - 2) ** 2


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("sampler", ["tpe", "cmaes"])
def test_it_finds_the_optimum_within_its_budget(tmp_path: Path, sampler: str, seed: int) -> None:
    board = Board.open(tmp_path / "board.db")
    study = board.create_study("numeric").id
    s = make_generator("knobs", base=NUMERIC, sampler=sampler, batch=4, max_trials=64, seed=seed)
    assert isinstance(s, KnobSearcher)
    found: list[float] = []
    while not s.exhausted:
        queued = board.pending_candidates(study)
        for p in s.propose(board.snapshot(study)):
            c = p.candidate
            assert board.add_candidate(
                study, c.hash, name=c.name, source=c.source, knobs=c.knobs, generator=p.generator
            )
            found.append(numeric_score(dict(c.knobs)))
        for r in queued:
            board.record_measurement(
                study, r.hash, tier="fast", metrics={"score": numeric_score(dict(r.knobs))}, repetitions=1
            )
    assert len(found) == 64 and max(found) == 100


def test_results_and_failures_are_told(tmp_path: Path) -> None:
    study = Study(tmp_path)
    s = searcher(batch=4)
    study.run(s)
    study.measure_queued()
    s.propose(study.board.snapshot(study.id))  # tells the last round
    trials = s.study.trials
    assert all(t.state in (TrialState.COMPLETE, TrialState.FAIL) for t in trials)
    for t in trials:
        knobs = {a.name: a.choices[t.params[a.name]] for a in s.axes}
        assert t.state is (TrialState.FAIL if fails(knobs) else TrialState.COMPLETE)
        if not fails(knobs):
            assert t.value == score(knobs)
    assert s.study.best_trial.value == score(OPTIMUM)


def test_a_candidate_already_on_the_board_is_told_its_result_not_proposed(tmp_path: Path) -> None:
    study = Study(tmp_path)
    known = BASE.with_knobs(OPTIMUM)
    study.add(known, "llm-attention")
    study.measure_one(known.hash, OPTIMUM)
    s = searcher(batch=4)
    proposals = study.run(s)
    assert known.hash not in {p.candidate.hash for p in proposals}
    assert len(proposals) == len(GRID) - 1 and s.exhausted
    assert any(t.value == score(OPTIMUM) for t in s.study.trials if t.state is TrialState.COMPLETE)


def test_a_measurement_without_the_metric_fails_the_trial_with_a_note(tmp_path: Path) -> None:
    study = Study(tmp_path, measure=False)
    s = searcher(batch=1)
    [first] = s.propose(study.board.snapshot(study.id))
    study.add(first.candidate, first.generator)
    study.board.record_measurement(
        study.id, first.candidate.hash, tier="fast", metrics={"tok_s": 9.0}, repetitions=1
    )
    s.propose(study.board.snapshot(study.id))
    assert s.study.trials[0].state is TrialState.FAIL
    [note] = s.take_notes()
    assert note.kind == "failure" and "'score'" in note.text and note.refs == (first.candidate.hash,)


def test_cmaes_treats_numeric_knobs_as_ordered(tmp_path: Path) -> None:
    study = Study(tmp_path)
    s = searcher(sampler="cmaes", batch=4)
    assert isinstance(s.study.sampler, CmaEsSampler)
    assert s.take_notes() == []
    by_name = {a.name: a for a in s.axes}
    assert by_name["block"].choices == (16, 32, 64, 128)  # sorted, so an index step is a size step
    assert by_name["layout"].choices == ("nhd", "hnd")
    proposals = study.run(s)
    assert proposals[0].candidate.knobs == DEFAULTS
    assert len({p.candidate.hash for p in proposals}) == len(proposals) == len(GRID)


def test_cmaes_on_categorical_knobs_falls_back_to_tpe_and_says_so() -> None:
    base = Candidate('KNOBS = {"layout": ["nhd", "hnd"], "fuse": [True, False]}\ndef build(ctx):\n    pass\n')
    s = make_generator("knobs", base=base, sampler="cmaes")
    assert isinstance(s, KnobSearcher) and isinstance(s.study.sampler, TPESampler)
    [note] = s.take_notes()
    assert "CMA-ES needs numeric knobs" in note.text and "TPE" in note.text


def test_a_family_without_knobs_is_proposed_once(tmp_path: Path) -> None:
    study = Study(tmp_path)
    s = make_generator("knobs")  # the reference: no knobs
    proposals = study.run(s)
    assert [p.candidate for p in proposals] == [Candidate.reference()]
    assert s.exhausted


def test_bad_settings_are_refused() -> None:
    with pytest.raises(PolyinferError, match="unknown knob sampler"):
        make_generator("knobs", sampler="grid")
    with pytest.raises(PolyinferError, match="batch"):
        make_generator("knobs", batch=0)
    with pytest.raises(PolyinferError, match="no built-in candidate"):
        make_generator("knobs", base="no-such-family")
