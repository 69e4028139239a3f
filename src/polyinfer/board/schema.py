"""The board's tables, in portable SQLAlchemy Core types (SQLite and Postgres alike).

JSON is stored as text and timestamps as double-precision Unix seconds, so no dialect-specific type is
needed. `schema_version` holds one row; a board written by a newer schema is refused rather than
misread, and a later schema bump adds its migration to `ensure_schema`.
"""

from __future__ import annotations

import json
from types import MappingProxyType
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Connection,
    Dialect,
    Double,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    insert,
    select,
)

from polyinfer.errors import BoardError

SCHEMA_VERSION = 1

metadata = MetaData()


def _plain(value: Any) -> Any:
    if isinstance(value, MappingProxyType):  # a frozen record's field written back
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


def encode_json(value: Any, what: str) -> str:
    """`value` as JSON text; a value JSON cannot hold is the caller's mistake, reported as such."""
    try:
        return json.dumps(value, sort_keys=True, default=_plain)
    except (TypeError, ValueError) as e:
        raise BoardError(f"{what} must be JSON values: {e}") from None


class JSONText(TypeDecorator[Any]):
    impl = Text
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        return None if value is None else encode_json(value, "board fields")

    def process_result_value(self, value: str | None, dialect: Dialect) -> Any:
        return None if value is None else json.loads(value)


schema_version = Table("schema_version", metadata, Column("version", Integer, primary_key=True))

studies = Table(
    "studies",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(200), nullable=False, unique=True),
    Column("created_at", Double, nullable=False),
    Column("config", JSONText, nullable=False),
    Column("state", String(16), nullable=False),
)

candidates = Table(
    "candidates",
    metadata,
    Column("study_id", ForeignKey("studies.id"), primary_key=True),
    Column("hash", String(64), primary_key=True),
    Column("name", String(200), nullable=False),
    Column("source", Text, nullable=False),
    Column("knobs", JSONText, nullable=False),
    Column("parent_hash", String(64)),
    Column("generator", String(200), nullable=False),
    Column("state", String(16), nullable=False),
    Column("created_at", Double, nullable=False),
    Column("error", Text),
    Index("candidates_by_state", "study_id", "state"),
)


def _about_candidate(name: str) -> tuple[Any, ...]:
    """The columns of a fact about one candidate: its own id, and the (study_id, candidate_hash) key."""
    return (
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("study_id", Integer, nullable=False),
        Column("candidate_hash", String(64), nullable=False),
        ForeignKeyConstraint(["study_id", "candidate_hash"], ["candidates.study_id", "candidates.hash"]),
        Index(f"{name}_by_candidate", "study_id", "candidate_hash"),
    )


measurements = Table(
    "measurements",
    metadata,
    *_about_candidate("measurements"),
    Column("tier", String(16), nullable=False),
    Column("metrics", JSONText, nullable=False),
    Column("ratio_to_incumbent", Double),
    Column("ci_low", Double),
    Column("ci_high", Double),
    Column("repetitions", Integer, nullable=False),
    Column("timings", JSONText, nullable=False),
    Column("created_at", Double, nullable=False),
)

verdicts = Table(
    "verdicts",
    metadata,
    *_about_candidate("verdicts"),
    Column("check", String(200), nullable=False),
    Column("passed", Boolean, nullable=False),
    Column("details", JSONText, nullable=False),
    Column("seed", BigInteger),
    Column("created_at", Double, nullable=False),
)

posts = Table(
    "posts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("study_id", ForeignKey("studies.id"), nullable=False, index=True),
    Column("agent", String(200), nullable=False),
    Column("kind", String(32), nullable=False),
    Column("text", Text, nullable=False),
    Column("refs", JSONText, nullable=False),
    Column("created_at", Double, nullable=False),
)

approvals = Table(
    "approvals",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("artifact_id", String(200), nullable=False, index=True),
    Column("action", String(16), nullable=False),
    Column("by", String(200), nullable=False),
    Column("note", Text, nullable=False),
    Column("created_at", Double, nullable=False),
)

deployments = Table(
    "deployments",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("artifact_id", String(200), nullable=False),
    Column("server", String(200), nullable=False, index=True),
    Column("started_at", Double, nullable=False),
    Column("ended_at", Double),
)


def ensure_schema(conn: Connection) -> None:
    """Create missing tables and stamp the version; refuse a board from a newer schema.

    Runs inside the caller's write transaction, so two processes opening a new board do not race.
    """
    metadata.create_all(conn)
    found = conn.scalar(select(schema_version.c.version))
    if found is None:
        conn.execute(insert(schema_version).values(version=SCHEMA_VERSION))
    elif found != SCHEMA_VERSION:
        raise BoardError(
            f"this board has schema version {found}, but this polyinfer reads version {SCHEMA_VERSION}; "
            "upgrade polyinfer to open it"
        )
