"""The Board's contract, run against every backend: a SQLite file always, Postgres when
POLYINFER_TEST_POSTGRES_URL names a database the suite may wipe."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine

from polyinfer.board import Board, CandidateState, Study, StudyState
from polyinfer.board.schema import metadata
from polyinfer.errors import BoardError

POSTGRES_URL = os.environ.get("POLYINFER_TEST_POSTGRES_URL")


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param(
            "postgres",
            marks=pytest.mark.skipif(not POSTGRES_URL, reason="POLYINFER_TEST_POSTGRES_URL not set"),
        ),
    ]
)
def board_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "study" / "board.db")
    assert POSTGRES_URL is not None
    engine = create_engine(POSTGRES_URL)
    metadata.drop_all(engine)
    engine.dispose()
    return POSTGRES_URL


@pytest.fixture
def board(board_url: str) -> Iterator[Board]:
    with Board.open(board_url) as b:
        yield b


@pytest.fixture
def study(board: Board) -> Study:
    return board.create_study("s", {"model": "preset:tiny", "budget": {"hours": 2}})


def _add(
    board: Board,
    study: Study,
    hash: str,
    name: str = "c",
    knobs: dict | None = None,
    parent_hash: str | None = None,
) -> bool:
    return board.add_candidate(
        study.id,
        hash,
        name=name,
        source="def build(ctx): ...",
        knobs=knobs or {},
        generator="test",
        parent_hash=parent_hash,
    )


def _measure(board: Board, study: Study, hash: str, tier: str = "fast", ratio: float | None = None) -> None:
    board.record_measurement(
        study.id, hash, tier=tier, metrics={"tok_s": 1.0}, repetitions=1, ratio_to_incumbent=ratio
    )


def test_studies_round_trip_and_persist(board_url: str) -> None:
    with Board.open(board_url) as board:
        study = board.create_study("s", {"model": "preset:tiny", "agents": ["knobs", "llm"]})
        assert study.state is StudyState.RUNNING
        assert board.get_study("s") == study
        assert board.get_study("missing") is None
        with pytest.raises(BoardError, match="already exists"):
            board.create_study("s")
        finished = board.set_study_state(study.id, StudyState.FINISHED)
    with Board.open(board_url) as board:  # reopened: nothing lives in memory only
        assert board.studies() == (finished,)
        assert finished.config == {"model": "preset:tiny", "agents": ("knobs", "llm")}
        assert finished.state is StudyState.FINISHED


def test_candidate_hash_is_unique_within_a_study(board: Board, study: Study) -> None:
    assert _add(board, study, "h1", name="first", knobs={"block": [64, 128]}, parent_hash="h0")
    assert not _add(board, study, "h1", name="second")
    other = board.create_study("other")
    assert _add(board, other, "h1")
    record = board.candidate(study.id, "h1")
    assert record is not None
    assert (record.name, record.knobs, record.parent_hash, record.state) == (
        "first",
        {"block": (64, 128)},
        "h0",
        CandidateState.QUEUED,
    )
    assert board.candidate(study.id, "nope") is None


def test_candidate_lifecycle_follows_its_transitions(board: Board, study: Study) -> None:
    _add(board, study, "a")
    board.set_candidate_state(study.id, "a", CandidateState.MEASURING)
    _measure(board, study, "a")
    assert board.candidate(study.id, "a").state is CandidateState.MEASURED  # type: ignore[union-attr]
    board.set_candidate_state(study.id, "a", CandidateState.VERIFIED)
    with pytest.raises(BoardError, match="cannot go from verified to measuring"):
        board.set_candidate_state(study.id, "a", CandidateState.MEASURING)

    _add(board, study, "b")
    board.set_candidate_state(study.id, "b", CandidateState.MEASURING)
    failed = board.set_candidate_state(
        study.id, "b", CandidateState.FAILED, error="CUDA error: illegal address"
    )
    assert failed.error == "CUDA error: illegal address"
    with pytest.raises(BoardError, match="not measured again"):
        _measure(board, study, "b")
    with pytest.raises(BoardError, match="no candidate"):
        board.set_candidate_state(study.id, "ghost", CandidateState.MEASURING)


def test_measurements_round_trip(board: Board, study: Study) -> None:
    _add(board, study, "a")
    m = board.record_measurement(
        study.id,
        "a",
        tier="full",
        metrics={"tok_s": 812.5, "ttft_ms": {"p50": 11.0, "p99": 40.5}},
        repetitions=5,
        ratio_to_incumbent=1.08,
        ci_low=1.05,
        ci_high=1.11,
        timings={"swap_s": 1.5, "warmup_s": 3.0, "measure_s": 20.0},
    )
    assert board.measurements(study.id, "a") == (m,)
    assert (m.tier, m.metrics["ttft_ms"]["p99"], m.ratio_to_incumbent, m.ci_low, m.ci_high) == (
        "full",
        40.5,
        1.08,
        1.05,
        1.11,
    )
    assert m.timings == {"swap_s": 1.5, "warmup_s": 3.0, "measure_s": 20.0}
    assert board.measured_hashes(study.id, "full") == {"a"}
    assert board.measured_hashes(study.id, "fast") == frozenset()


def test_an_invalid_write_leaves_nothing_behind(board: Board, study: Study) -> None:
    _add(board, study, "a")
    board.set_candidate_state(study.id, "a", CandidateState.MEASURING)
    with pytest.raises(BoardError, match="tier 'slow'"):
        board.record_measurement(study.id, "a", tier="slow", metrics={}, repetitions=1)
    with pytest.raises(BoardError, match="JSON"):
        board.record_measurement(study.id, "a", tier="fast", metrics={"t": object()}, repetitions=1)
    assert board.measurements(study.id, "a") == ()
    assert board.candidate(study.id, "a").state is CandidateState.MEASURING  # type: ignore[union-attr]
    with pytest.raises(BoardError, match="JSON"):
        _add(board, study, "b", knobs={"dtype": {1, 2}})
    assert board.candidate(study.id, "b") is None


def test_verdicts_round_trip(board: Board, study: Study) -> None:
    _add(board, study, "a")
    v = board.record_verdict(
        study.id, "a", check="kv_contamination", passed=False, details={"max_abs": 0.5}, seed=2**62 + 1
    )
    assert board.verdicts(study.id, "a") == (v,)
    assert (v.check, v.passed, v.details, v.seed) == ("kv_contamination", False, {"max_abs": 0.5}, 2**62 + 1)
    with pytest.raises(BoardError, match="no candidate"):
        board.record_verdict(study.id, "ghost", check="quality", passed=True)


def test_posts_are_the_most_recent_oldest_first(board: Board, study: Study) -> None:
    for i in range(5):
        board.post(study.id, "llm-1", "idea", f"idea {i}", refs=["a", "b"] if i == 4 else [])
    recent = board.posts(study.id, limit=3)
    assert [p.text for p in recent] == ["idea 2", "idea 3", "idea 4"]
    assert recent[-1].refs == ("a", "b")
    assert (recent[-1].agent, recent[-1].kind) == ("llm-1", "idea")


def test_approvals_keep_an_audit_trail(board: Board) -> None:
    board.record_approval("art-1", "approve", "alice", "fast and verified")
    board.record_approval("art-1", "retire", "bob")
    assert [(a.action, a.by, a.note) for a in board.approvals("art-1")] == [
        ("approve", "alice", "fast and verified"),
        ("retire", "bob", ""),
    ]
    with pytest.raises(BoardError, match="not a ApprovalAction"):
        board.record_approval("art-1", "ship", "mallory")
    assert len(board.approvals("art-1")) == 2


def test_a_deployment_ends_the_one_it_replaces(board: Board) -> None:
    first = board.record_deployment("art-1", "srv-a")
    other = board.record_deployment("art-9", "srv-b")
    second = board.record_deployment("art-2", "srv-a")
    running = {d.id: d.ended_at for d in board.deployments()}
    assert running[first.id] == second.started_at
    assert running[other.id] is None and running[second.id] is None
    ended = board.end_deployment(second.id)
    assert ended.ended_at is not None and ended.ended_at >= ended.started_at
    with pytest.raises(BoardError, match="is running"):
        board.end_deployment(second.id)
    assert [d.artifact_id for d in board.deployments("srv-a")] == ["art-1", "art-2"]


def test_recover_requeues_only_interrupted_measurements(board: Board, study: Study) -> None:
    for h in ("a", "b", "c", "d"):
        _add(board, study, h)
    for h in ("a", "b", "c"):
        board.set_candidate_state(study.id, h, CandidateState.MEASURING)
    _measure(board, study, "a")
    assert [c.hash for c in board.recover(study.id)] == ["b", "c"]
    assert [c.hash for c in board.pending_candidates(study.id)] == ["b", "c", "d"]
    assert board.recover(study.id) == ()
    assert board.measured_hashes(study.id, "fast") == {"a"}


def test_snapshot_is_immutable_and_does_not_change_under_its_reader(board: Board, study: Study) -> None:
    _add(board, study, "a", knobs={"tiles": [16, 32], "opts": {"graphs": True}})
    board.post(study.id, "knobs", "note", "started")
    snap = board.snapshot(study.id)
    view = snap.candidate("a")
    assert view is not None
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.incumbent = view  # type: ignore[misc]
    with pytest.raises(TypeError):
        view.record.knobs["tiles"] = [8]  # type: ignore[index]
    with pytest.raises(TypeError):
        view.record.knobs["opts"]["graphs"] = False
    with pytest.raises(TypeError):
        view.best["fast"] = None  # type: ignore[index]
    board.set_candidate_state(study.id, "a", CandidateState.MEASURING)
    _measure(board, study, "a")
    assert view.state is CandidateState.QUEUED and not view.best and snap.incumbent is None
    assert board.snapshot(study.id).candidate("a").state is CandidateState.MEASURED  # type: ignore[union-attr]
    assert [p.text for p in snap.posts] == ["started"]


def test_incumbent_is_the_best_full_tier_candidate_or_else_the_best_fast_one(
    board: Board, study: Study
) -> None:
    for h in ("base", "x", "y", "z"):
        _add(board, study, h)
    _measure(board, study, "base")  # the baseline: no incumbent yet, ranks as 1.0
    _measure(board, study, "x", ratio=1.3)
    _measure(board, study, "y", ratio=1.1)
    _measure(board, study, "y", ratio=1.2)  # the best of a candidate's measurements counts
    assert board.snapshot(study.id).incumbent.hash == "x"  # type: ignore[union-attr]

    _measure(board, study, "y", tier="full", ratio=1.15)
    snap = board.snapshot(study.id)
    assert snap.incumbent.hash == "y"  # type: ignore[union-attr]  # any full-tier result beats fast-tier ones
    assert snap.incumbent.best["fast"].ratio_to_incumbent == 1.2  # type: ignore[union-attr]

    board.set_candidate_state(study.id, "y", CandidateState.REJECTED, error="failed determinism")
    snap = board.snapshot(study.id)
    assert snap.incumbent.hash == "x"  # type: ignore[union-attr]
    assert [c.hash for c in snap.in_state(CandidateState.REJECTED)] == ["y"]

    board.set_candidate_state(study.id, "z", CandidateState.MEASURING)
    board.set_candidate_state(study.id, "z", CandidateState.FAILED, error="OOM")
    assert [(f.hash, f.error) for f in board.snapshot(study.id).failures] == [("z", "OOM")]


def test_writes_to_an_unknown_study_are_refused(board: Board) -> None:
    with pytest.raises(BoardError, match="no study with id 42"):
        board.add_candidate(42, "h", name="c", source="", knobs={}, generator="g")
    with pytest.raises(BoardError, match="no study with id 42"):
        board.post(42, "agent", "note", "hello")
    with pytest.raises(BoardError, match="no study with id 42"):
        board.snapshot(42)
