"""AgentPool: each generator proposes from its own thread into one bounded queue, so the measurement
loop never waits for an agent that is thinking; what they learn they share only through the board."""

from __future__ import annotations

import queue
import threading
import time

from polyinfer.board import Board
from polyinfer.search.generators.base import Generator
from polyinfer.search.proposal import Note, Proposal


class AgentPool:
    def __init__(self, generators: list[Generator], board: Board, study_id: int, depth: int = 4) -> None:
        self.generators = generators
        self.board = board
        self.study_id = study_id
        self.queue: queue.Queue[Proposal] = queue.Queue(maxsize=depth)
        self.notes: queue.SimpleQueue[tuple[str, Note]] = queue.SimpleQueue()
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._run, args=(g,), name=f"agent-{g.name}", daemon=True)
            for g in generators
        ]

    def __enter__(self) -> AgentPool:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=5)

    @property
    def exhausted(self) -> bool:
        return all(g.exhausted for g in self.generators) and self.queue.empty()

    def next(self, timeout: float) -> Proposal | None:
        try:
            return self.queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def take_notes(self) -> list[tuple[str, Note]]:
        out = []
        while not self.notes.empty():
            out.append(self.notes.get())
        return out

    def _run(self, generator: Generator) -> None:
        while not self.stop.is_set() and not generator.exhausted:
            if self.queue.full():
                time.sleep(0.05)
                continue
            try:
                proposals = generator.propose(self.board.snapshot(self.study_id))
            except Exception as e:  # a generator bug must show on the board, not end the study
                self.notes.put(
                    (generator.name, Note("failure", f"generator crashed: {type(e).__name__}: {e}"))
                )
                time.sleep(1.0)
                continue
            for note in generator.take_notes():
                self.notes.put((generator.name, note))
            for p in proposals:
                while not self.stop.is_set():
                    try:
                        self.queue.put(p, timeout=0.2)
                        break
                    except queue.Full:
                        continue
            if not proposals:
                time.sleep(0.2)  # nothing new until a measurement lands
