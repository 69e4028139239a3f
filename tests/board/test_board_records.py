"""Records validate themselves and are deeply immutable; the schema is portable to Postgres."""

from __future__ import annotations

import pytest
from sqlalchemy.dialects import postgresql
from sqlalchemy.schema import CreateIndex, CreateTable

from polyinfer.board import ApprovalAction, CandidateState, Deployment, Measurement, Study
from polyinfer.board.records import TRANSITIONS, freeze
from polyinfer.board.schema import metadata
from polyinfer.errors import BoardError


def _measurement(**fields: object) -> Measurement:
    values: dict = {
        "id": 1,
        "study_id": 1,
        "candidate_hash": "h",
        "tier": "fast",
        "metrics": {},
        "ratio_to_incumbent": None,
        "ci_low": None,
        "ci_high": None,
        "repetitions": 1,
        "timings": {},
        "created_at": 0.0,
    }
    return Measurement(**{**values, **fields})


def test_freeze_makes_json_values_read_only_all_the_way_down() -> None:
    frozen = freeze({"a": [1, {"b": [2]}], "c": "x"})
    assert frozen == {"a": (1, {"b": (2,)}), "c": "x"}
    with pytest.raises(TypeError):
        frozen["a"][1]["b"] = ()


def test_records_refuse_what_a_study_cannot_mean() -> None:
    with pytest.raises(BoardError, match="repetition"):
        _measurement(repetitions=0)
    with pytest.raises(BoardError, match="interval"):
        _measurement(ci_low=1.2, ci_high=1.1)
    with pytest.raises(BoardError, match="tier"):
        _measurement(tier="medium")
    with pytest.raises(BoardError, match="StudyState"):
        Study(1, "s", 0.0, {}, "paused")  # type: ignore[arg-type]
    with pytest.raises(BoardError, match="end before it starts"):
        Deployment(1, "art", "srv", started_at=10.0, ended_at=5.0)


def test_a_missing_ratio_ranks_as_the_baseline() -> None:
    assert _measurement().score == 1.0
    assert _measurement(ratio_to_incumbent=0.9).score == 0.9


def test_final_candidate_states_have_no_way_out() -> None:
    assert set(TRANSITIONS) == set(CandidateState)
    for state in (CandidateState.FAILED, CandidateState.VERIFIED, CandidateState.REJECTED):
        assert TRANSITIONS[state] == frozenset()
    assert CandidateState.QUEUED in TRANSITIONS[CandidateState.MEASURING]  # what recover() does
    assert {a.value for a in ApprovalAction} == {"approve", "reject", "deploy", "retire"}


def test_the_schema_compiles_for_postgres() -> None:
    dialect = postgresql.dialect()
    ddl = [str(CreateTable(t).compile(dialect=dialect)) for t in metadata.sorted_tables]
    ddl += [str(CreateIndex(i).compile(dialect=dialect)) for t in metadata.sorted_tables for i in t.indexes]
    text = "\n".join(ddl)
    assert '"check" VARCHAR(200)' in text  # a reserved word in Postgres, so it must be quoted
    assert "DOUBLE PRECISION" in text and "JSON" not in text.replace("JSONText", "")
