"""Per-operation profile of a candidate's decode step: where its forward spends the time.

On CUDA the rows are kernels and their device time; on a CPU, PyTorch operators and their own CPU
time (children excluded). The study posts one for each new incumbent (post kind `profile`), which is
what the LLM agent reads; `benchmarks/forward_profile.py` prints it for any candidate.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import statistics
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity

from polyinfer.bench.shapes import Limits, Phase, ShapeMix
from polyinfer.bench.steps import held_batch
from polyinfer.bench.timer import time_calls
from polyinfer.engine.candidate import Candidate
from polyinfer.engine.engine import Engine
from polyinfer.engine.sampler import argmax
from polyinfer.engine.serving import Serving
from polyinfer.traffic.profile import WorkloadProfile


@contextlib.contextmanager
def native_stderr_muted() -> Iterator[None]:
    """The process's stderr (file descriptor 2) goes to /dev/null: the profiler's native library prints
    a line as it starts and stops, which would land in the middle of a study's live view."""
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def short_name(name: str) -> str:
    """A kernel's name without `void` and template arguments: `at::native::reduce_kernel<...>`."""
    name = name.removeprefix("void ")
    cut = name.find("<")
    return name if cut < 0 else name[:cut] + "<...>"


@dataclass(frozen=True, slots=True)
class OpTime:
    name: str
    us_per_step: float
    calls_per_step: float


@dataclass(frozen=True, slots=True)
class OpProfile:
    candidate: str  # label
    device: str
    batch_size: int
    context_len: int
    step_us: float  # median step time measured outside the profiler
    ops: tuple[OpTime, ...]  # most expensive first; shares are of their sum (the profiler slows a CPU)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def ops_us(self) -> float:
        return sum(op.us_per_step for op in self.ops)

    def table(self, top: int = 15) -> str:
        what = "kernels, device time" if self.device == "cuda" else "operators, own CPU time"
        lines = [f"{self.candidate}: decode step at batch {self.batch_size}, context {self.context_len} on "
                 f"{self.device}: {self.step_us:.0f} us; {what} {self.ops_us:.0f} us",
                 f"{'us/step':>9} {'share':>6} {'calls':>6}  op"]
        lines += [f"{op.us_per_step:9.1f} {op.us_per_step / self.ops_us:6.1%} {op.calls_per_step:6.1f}  "
                  f"{short_name(op.name)[:90]}" for op in self.ops[:top]]
        if len(self.ops) > top:
            rest = sum(op.us_per_step for op in self.ops[top:])
            lines.append(f"{rest:9.1f} {rest / self.ops_us:6.1%} {'':>6}  ({len(self.ops) - top} more)")
        return "\n".join(lines)


def profile_step(engine: Engine, candidate: Candidate, batch_size: int, context_len: int,
                 calls: int = 5) -> OpProfile:
    """Profile `candidate` (prepared beside the current forward, not swapped in) on one decode batch."""
    forward, _ = engine.prepare(candidate)
    cuda = engine.device.type == "cuda"
    with held_batch(engine, batch_size, context_len, 1) as batch, torch.inference_mode():
        step_s = statistics.median(time_calls(lambda: argmax(forward(batch)), engine.device, 5, 2))
        activity = ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU
        with native_stderr_muted(), torch.profiler.profile(activities=[activity]) as prof:
            for _ in range(calls):
                argmax(forward(batch))
            if cuda:
                torch.cuda.synchronize(engine.device)
    ops = []
    for e in prof.key_averages():
        us = (e.self_device_time_total if cuda else e.self_cpu_time_total) / calls
        if us > 0:
            ops.append(OpTime(e.key, us, e.count / calls))
    ops.sort(key=lambda op: -op.us_per_step)
    return OpProfile(candidate.label, engine.device.type, batch_size, context_len, step_s * 1e6, tuple(ops))


def profile_workload(engine: Engine, candidate: Candidate, workload: WorkloadProfile, calls: int = 5) -> OpProfile:
    """`profile_step` at the decode shape that carries most of `workload`'s decode tokens."""
    mix = ShapeMix.of(workload, Limits.of(engine, Serving.of(engine.config, candidate.knobs)))
    shape = max(mix.of_phase(Phase.DECODE), key=lambda s: s.weight)
    return profile_step(engine, candidate, shape.batch_size, shape.context_len, calls)
