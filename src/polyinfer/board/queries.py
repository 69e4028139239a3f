"""The SQL questions the Board asks inside its transactions, one function each.

Each takes the open connection, so it joins the caller's transaction and sees the same snapshot.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sqlalchemy import Connection, RowMapping, Table, insert, select, update

from polyinfer.board import schema
from polyinfer.board.records import CandidateRecord, CandidateState, Post, Study
from polyinfer.errors import BoardError


def insert_row(conn: Connection, table: Table, **values: Any) -> RowMapping:
    """Insert one row and return it as stored (with its id and defaults)."""
    return conn.execute(insert(table).values(**values).returning(*table.c)).mappings().one()


def study(conn: Connection, study_id: int) -> Study:
    row = conn.execute(select(schema.studies).where(schema.studies.c.id == study_id)).mappings().first()
    if row is None:
        raise BoardError(f"the board has no study with id {study_id}")
    return Study(**row)


def find_candidate(conn: Connection, study_id: int, hash: str) -> CandidateRecord | None:
    t = schema.candidates
    row = conn.execute(select(t).where(t.c.study_id == study_id, t.c.hash == hash)).mappings().first()
    return None if row is None else CandidateRecord(**row)


def candidate(conn: Connection, study_id: int, hash: str) -> CandidateRecord:
    found = find_candidate(conn, study_id, hash)
    if found is None:
        raise BoardError(f"study {study_id} has no candidate {hash}")
    return found


def move(
    conn: Connection, current: CandidateRecord, state: CandidateState, error: str | None
) -> CandidateRecord:
    # Compare-and-set on the state read in this transaction, so a concurrent writer cannot be overwritten.
    t = schema.candidates
    stmt = (
        update(t)
        .where(t.c.study_id == current.study_id, t.c.hash == current.hash, t.c.state == current.state.value)
        .values(state=state.value, error=error)
        .returning(*t.c)
    )
    row = conn.execute(stmt).mappings().first()
    if row is None:
        raise BoardError(f"candidate {current.hash} changed state while being moved to {state}")
    return CandidateRecord(**row)


def facts(conn: Connection, table: Table, study_id: int, candidate_hash: str) -> Iterator[RowMapping]:
    """The rows of a table of facts about one candidate (measurements, verdicts), oldest first."""
    query = select(table).where(table.c.study_id == study_id, table.c.candidate_hash == candidate_hash)
    return iter(conn.execute(query.order_by(table.c.id)).mappings())


def recent_posts(conn: Connection, study_id: int, limit: int) -> tuple[Post, ...]:
    t = schema.posts
    query = select(t).where(t.c.study_id == study_id).order_by(t.c.id.desc()).limit(limit)
    return tuple(reversed([Post(**r) for r in conn.execute(query).mappings()]))
