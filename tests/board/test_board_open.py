"""Opening a board: SQLite files in WAL mode, clear errors for what cannot be opened."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from polyinfer.board import Board
from polyinfer.board.schema import SCHEMA_VERSION
from polyinfer.errors import BoardError


def test_a_sqlite_board_is_a_wal_file_with_a_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "runs" / "study-1" / "board.db"
    with Board.open(path) as board:
        assert board.url == f"sqlite:///{path}"
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
    with Board.open(f"sqlite:///{path}") as board:  # the same file by URL
        assert board.studies() == ()


def test_a_board_from_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "board.db"
    Board.open(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    with pytest.raises(BoardError, match=f"schema version {SCHEMA_VERSION + 1}"):
        Board.open(path)


def test_what_cannot_be_opened_is_a_board_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(BoardError, match="directory"):
        Board.open(tmp_path / "file" / "board.db")
    with pytest.raises(BoardError, match="cannot open the board"):
        Board.open("nosuchdb://host/db")
    (tmp_path / "garbage.db").write_bytes(b"not a database" * 100)
    with pytest.raises(BoardError, match="cannot open the board"):
        Board.open(tmp_path / "garbage.db")
