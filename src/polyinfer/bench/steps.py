"""Step shapes: time the current candidate's forward on synthetic decode/prefill batches, and run real
decode steps through the whole engine (scheduler, batch building, sampling included)."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from polyinfer.bench.timer import time_calls
from polyinfer.engine.batch import Batch
from polyinfer.engine.candidate import Candidate
from polyinfer.engine.engine import Engine
from polyinfer.engine.sampler import argmax
from polyinfer.engine.sequence import SamplingParams, Sequence, SequenceStatus


@dataclass(frozen=True, slots=True)
class StepTiming:
    kind: str  # "decode" or "prefill"
    batch_size: int
    context_len: int
    tokens: int  # rows fed per step
    seconds: tuple[float, ...]

    @property
    def median_s(self) -> float:
        return statistics.median(self.seconds)

    @property
    def cv(self) -> float:
        return statistics.pstdev(self.seconds) / statistics.mean(self.seconds)


def step_batch(
    engine: Engine, batch_size: int, context_len: int, query_len: int
) -> tuple[Batch, list[Sequence]]:
    """A batch of `batch_size` sequences feeding `query_len` tokens each at the end of a `context_len`
    context. KV blocks are taken from the pool (their contents are whatever is there: timing only)."""
    seqs: list[Sequence] = []
    for _ in range(batch_size):
        seq = Sequence([1] * context_len, SamplingParams())
        if not engine.blocks.can_grow(seq, context_len):
            for s in seqs:
                engine.blocks.release(s)
            raise ValueError(f"the KV pool cannot hold {batch_size} x {context_len} tokens")
        engine.blocks.grow(seq, context_len)
        seqs.append(seq)
    start = context_len - query_len
    gen = torch.Generator().manual_seed(batch_size * 7919 + context_len)
    ids = torch.randint(0, engine.spec.vocab_size, (batch_size, query_len), generator=gen).tolist()
    batch = Batch.build(
        ids,
        [start] * batch_size,
        [s.block_table for s in seqs],
        engine.kv.block_size,
        [True] * batch_size,
        0 if query_len == 1 else batch_size,
        engine.device,
    )
    return batch, seqs


@contextlib.contextmanager
def held_batch(engine: Engine, batch_size: int, context_len: int, query_len: int) -> Iterator[Batch]:
    """`step_batch`'s batch, its KV blocks given back to the pool on exit."""
    batch, seqs = step_batch(engine, batch_size, context_len, query_len)
    try:
        yield batch
    finally:
        for s in seqs:
            engine.blocks.release(s)


def time_step(
    engine: Engine, batch_size: int, context_len: int, query_len: int = 1, reps: int = 30, warmup: int = 5
) -> StepTiming:
    """Time the forward pass alone (plus greedy argmax) at one batch shape."""
    forward = engine.forward
    assert forward is not None
    with held_batch(engine, batch_size, context_len, query_len) as batch, torch.inference_mode():
        seconds = time_calls(lambda: argmax(forward(batch)), engine.device, reps, warmup)
    kind = "decode" if query_len == 1 else "prefill"
    return StepTiming(kind, batch_size, context_len, batch_size * query_len, tuple(seconds))


def engine_decode_tok_s(engine: Engine, batch_size: int, prompt_len: int, steps: int, windows: int = 3) -> float:
    """Output tokens per second of whole engine steps once every sequence is decoding: the median over
    `windows` consecutive windows of `steps` steps (one window can catch a pause of the host's)."""
    gen = torch.Generator().manual_seed(prompt_len)
    params = SamplingParams(max_tokens=windows * steps + 8, ignore_eos=True)
    seqs = [
        engine.add_request(
            torch.randint(0, engine.spec.vocab_size, (prompt_len,), generator=gen).tolist(), params
        )
        for _ in range(batch_size)
    ]
    while any(s.in_prefill for s in seqs):
        engine.step()
    for _ in range(2):
        engine.step()
    rates = []
    for _ in range(windows):
        t0 = time.perf_counter()  # each step reads the sampled ids of itself or (async) of the one before
        for _ in range(steps):
            engine.step()
        rates.append(batch_size * steps / (time.perf_counter() - t0))
    while any(s.status is not SequenceStatus.FINISHED for s in seqs):
        engine.step()
    return statistics.median(rates)


@dataclass(frozen=True, slots=True)
class LogitsCheck:
    """A candidate's logits against the current forward's on one batch shape."""

    kind: str
    batch_size: int
    rel_err: float  # ||candidate - current|| / ||current||
    max_abs_err: float
    argmax_agreement: float  # fraction of rows whose greedy token is the same


def check_logits(engine: Engine, candidate: Candidate, batch_size: int, context_len: int,
                 query_len: int = 1) -> LogitsCheck:
    """Run the current forward and `candidate` (prepared beside it, not swapped in) on the same batch.

    A quick screen for benchmarks that sweep candidates; the verification battery is the real test.
    """
    other, _ = engine.prepare(candidate)
    current = engine.forward
    assert current is not None
    with held_batch(engine, batch_size, context_len, query_len) as batch, torch.inference_mode():
        want = current(batch).float()
        got = other(batch).float()
    diff = got - want
    return LogitsCheck("decode" if query_len == 1 else "prefill", batch_size,
                       float(diff.norm() / want.norm()), float(diff.abs().max()),
                       float((got.argmax(-1) == want.argmax(-1)).float().mean()))
