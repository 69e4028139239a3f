"""Connecting to the board's database, and the two kinds of transaction the board runs.

SQLite (the default: one file in the study directory) runs in WAL mode, where readers never block
the writer and the writer never blocks readers, so agents in other processes take snapshots while a
study records. `synchronous=FULL`: in WAL mode NORMAL and FULL both survive the process being killed
(a commit has reached the OS once COMMIT returns, and a torn transaction at the WAL's tail is ignored
on recovery); only FULL also survives a power cut or kernel panic, for one fsync per commit. The board
commits a few times per measurement, which takes seconds, so that fsync costs nothing that matters.

Python's sqlite3 driver (before 3.16) does not BEGIN before a SELECT, so a read of several statements
would see several states of the board. We switch its transaction handling off and BEGIN ourselves:
plain BEGIN for reads (one WAL snapshot for the whole transaction) and BEGIN IMMEDIATE for writes (the
write lock is taken up front, so a second writer waits out the busy timeout instead of failing when
a read transaction tries to become a write one). Other databases (Postgres) read at REPEATABLE READ
for the same one-snapshot guarantee.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.exc import ArgumentError

from polyinfer.errors import BoardError

BUSY_TIMEOUT_MS = 30_000  # how long a SQLite connection waits for another process's write lock
_WRITE = "polyinfer_board_write"  # the execution option that marks a write transaction


def open_engine(target: str | Path) -> Engine:
    """An engine for a SQLAlchemy URL, or for a SQLite file at a path (its directory is created)."""
    if "://" in str(target):
        url = str(target)
    else:
        path = Path(target).expanduser().resolve()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise BoardError(f"cannot create the board's directory {path.parent}: {e.strerror}") from None
        url = f"sqlite:///{path}"
    try:
        engine = create_engine(url)
    except (ArgumentError, ImportError) as e:
        raise BoardError(f"cannot open the board at {target}: {e}") from None
    if engine.dialect.name == "sqlite":
        _configure_sqlite(engine)
    return engine


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves, below
        cursor = dbapi_connection.cursor()
        # The busy timeout comes first: switching a new file to WAL itself waits for a lock.
        for pragma in (
            f"busy_timeout = {BUSY_TIMEOUT_MS}",
            "journal_mode = WAL",
            "synchronous = FULL",
            "foreign_keys = ON",
        ):
            cursor.execute(f"PRAGMA {pragma}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(_WRITE) else "BEGIN")


@contextmanager
def transaction(engine: Engine, *, write: bool) -> Iterator[Connection]:
    """One transaction: committed when the block ends, rolled back if it raises.

    A read transaction sees one consistent state of the board however many statements it runs.
    """
    with engine.connect() as conn:
        if write:
            conn.execution_options(**{_WRITE: True})
        elif engine.dialect.name != "sqlite":
            conn.execution_options(isolation_level="REPEATABLE READ")
        with conn.begin():
            yield conn
