"""Supervisor: owns an engine worker process, bounds every call in time, restarts the worker when a
candidate hangs or kills it, and puts the last good candidate back."""

from __future__ import annotations

import multiprocessing as mp
import time
from dataclasses import dataclass
from typing import Any

from polyinfer.engine import worker
from polyinfer.engine.candidate import Candidate
from polyinfer.engine.engine import SwapReport
from polyinfer.engine.messages import Call, Done, Failed, FailureKind, Ready, WorkerSpec
from polyinfer.errors import CandidateError, PolyinferError


class WorkerFailure(CandidateError):
    def __init__(self, kind: FailureKind, message: str) -> None:
        super().__init__(f"{kind.value}: {message}")
        self.kind = kind


@dataclass(frozen=True, slots=True)
class ColdStart:
    total_s: float  # spawn -> ready: process start, imports, weight load, first forward
    load_s: float
    first_forward_s: float


class EngineProcess:
    """A persistent engine in its own process. Use as a context manager."""

    def __init__(self, spec: WorkerSpec, start_timeout_s: float = 900.0) -> None:
        self.spec = spec
        self.start_timeout_s = start_timeout_s
        self.ctx = mp.get_context("spawn")  # fresh interpreter: no inherited CUDA state or candidate modules
        self.proc: Any = None
        self.conn: Any = None
        self.current: Candidate | None = None  # the last successfully swapped-in candidate
        self.restarts = 0
        self.cold_start: ColdStart | None = None
        self.ready: Ready | None = None

    def __enter__(self) -> EngineProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> ColdStart:
        t0 = time.perf_counter()
        self.conn, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=worker.serve, args=(child, self.spec), daemon=True)
        self.proc.start()
        child.close()
        reply = self._receive(self.start_timeout_s, restart=False)
        if isinstance(reply, Failed):
            self.close()
            raise PolyinferError(f"engine worker failed to start: {reply.message}")
        assert isinstance(reply, Ready)
        self.ready = reply
        self.cold_start = ColdStart(time.perf_counter() - t0, reply.load_s, reply.first_forward_s)
        return self.cold_start

    def call(self, fn: Any, *args: Any, timeout_s: float = 120.0) -> Any:
        """Run `fn(engine, *args)` in the worker. Raises WorkerFailure; a timeout or crash restarts it."""
        if self.proc is None:
            self.start()
        try:
            self.conn.send(Call(fn, args))
        except (BrokenPipeError, OSError):
            self._restart()
            raise WorkerFailure(FailureKind.CRASHED, "the worker was gone before the call") from None
        reply = self._receive(timeout_s, restart=True)
        if isinstance(reply, Failed):
            raise WorkerFailure(reply.kind, reply.message)
        assert isinstance(reply, Done)
        return reply.value

    def swap(self, candidate: Candidate, timeout_s: float = 300.0) -> SwapReport:
        report = self.call(worker.swap, candidate, timeout_s=timeout_s)
        self.current = candidate
        return report

    def _receive(self, timeout_s: float, restart: bool) -> Ready | Done | Failed:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.conn.poll(min(0.2, max(0.0, deadline - time.monotonic()))):
                try:
                    return self.conn.recv()
                except (EOFError, OSError):
                    break
            if not self.proc.is_alive():
                break
        else:
            self._kill()
            if restart:
                self._restart()
            return Failed(FailureKind.TIMEOUT, f"no answer within {timeout_s:.0f} s; the worker was restarted")
        self.proc.join(timeout=5)  # the pipe can close before the exit status is reaped
        code = self.proc.exitcode
        self._kill()
        if restart:
            self._restart()
        return Failed(FailureKind.CRASHED, f"the worker process died (exit code {code}); it was restarted")

    def _restart(self) -> None:
        self.restarts += 1
        self.start()
        if self.current is not None and self.current.hash != Candidate.reference().hash:
            try:
                self.call(worker.swap, self.current, timeout_s=300.0)
            except WorkerFailure:
                self.current = None

    def _kill(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self.proc.kill()
        if self.proc is not None:
            self.proc.join(timeout=10)
        self.proc = None

    def close(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            try:
                self.conn.send(None)
                self.proc.join(timeout=5)
            except (BrokenPipeError, OSError):
                pass
        self._kill()
