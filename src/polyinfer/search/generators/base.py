"""The generator interface: an agent that proposes candidates from a snapshot of the board.

The study loop calls `propose` again and again from a background thread, so a generator may block on
network I/O, and the measurement queue never waits on it. A generator never raises for expected trouble
(a bad reply, a timeout, code that fails screening): it returns [] and keeps a note of what happened,
which the loop collects with `take_notes` and posts to the board. Once `exhausted` is true (its budget is
spent or its space explored) the loop stops asking it.
"""

from __future__ import annotations

import threading
from typing import Protocol

from polyinfer.board import BoardSnapshot
from polyinfer.search.proposal import Note, Proposal


class Generator(Protocol):
    name: str  # unique within a study; the board records it as each candidate's generator

    @property
    def exhausted(self) -> bool: ...

    def propose(self, snapshot: BoardSnapshot) -> list[Proposal]: ...

    def take_notes(self) -> list[Note]:
        """The notes kept since the last call, oldest first; each is returned once."""
        ...


class Notebook:
    """The notes a generator keeps until the loop takes them; safe to share between threads."""

    def __init__(self) -> None:
        self._notes: list[Note] = []
        self._lock = threading.Lock()

    def add(self, kind: str, text: str, refs: tuple[str, ...] = ()) -> None:
        with self._lock:
            self._notes.append(Note(kind, text, refs))

    def take(self) -> list[Note]:
        with self._lock:
            notes, self._notes = self._notes, []
        return notes
