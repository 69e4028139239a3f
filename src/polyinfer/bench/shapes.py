"""Step shapes: the decode and prefill batches a workload puts through the engine, with their weights.

The fast tier times these shapes instead of replaying the trace. They come from the workload profile
and the engine's limits, for the saturated regime that a capacity measurement runs in: every request
waiting at the start, `max_num_seqs` of them in flight.

- Decode: which batch sizes the decode tokens are generated at follows from a small simulation of
  continuous batching over the profile's output lengths (full batches while the queue lasts, then the
  drain). Batch sizes are grouped into buckets around powers of two (and the slot count itself); a
  bucket is timed at its token-weighted mean size and weighs its share of decode tokens. The context
  is input p50 + output p50 / 2, the middle of an average request's decode.
- Prefill: each prompt is cut into chunks of at most `max_prefill_chunk` tokens; chunk sizes are
  bucketed the same way and weighted by their share of prefill tokens. One sequence per step, the
  context equal to the chunk (later chunks of a long prompt attend further back; that is left out).

Buckets holding under `MIN_WEIGHT` of their phase's tokens are dropped and the rest renormalised, so a
handful of shapes stands for the workload.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from polyinfer.engine.engine import Engine
from polyinfer.engine.serving import Serving
from polyinfer.traffic.profile import WorkloadProfile

MIN_WEIGHT = 0.05
SIMULATED_REQUESTS = 1024  # enough for the drain's share of tokens; bounds the simulation's cost


class Phase(StrEnum):
    DECODE = "decode"
    PREFILL = "prefill"


@dataclass(frozen=True, slots=True)
class StepShape:
    phase: Phase
    batch_size: int
    context_len: int  # tokens of context per sequence, this step's included
    query_len: int  # tokens fed per sequence: 1 for decode, the chunk for prefill
    weight: float  # share of its phase's tokens this shape stands for

    @property
    def tokens(self) -> int:
        return self.batch_size * self.query_len


@dataclass(frozen=True, slots=True)
class Limits:
    """The engine settings that bound step shapes."""

    max_num_seqs: int
    max_prefill_chunk: int
    max_model_len: int
    kv_tokens: int
    block_size: int
    prefix_caching: bool = False

    @classmethod
    def of(cls, engine: Engine, serving: Serving | None = None) -> Limits:
        """The engine's limits, under `serving` (a candidate's serving knobs) or its current ones."""
        serving = serving or engine.serving
        return cls(
            engine.config.max_num_seqs,
            serving.max_prefill_chunk,
            engine.max_model_len,
            engine.kv.num_blocks * engine.kv.block_size,
            engine.kv.block_size,
            serving.prefix_caching,
        )


@dataclass(frozen=True, slots=True)
class ShapeMix:
    """The shapes standing for a workload, and what an average request costs in tokens of each phase."""

    shapes: tuple[StepShape, ...]
    prefill_tokens: float  # per request, after the prefix cache
    decode_tokens: float  # per request: outputs after the first, which the prefill samples
    output_tokens: float  # per request

    def of_phase(self, phase: Phase) -> tuple[StepShape, ...]:
        return tuple(s for s in self.shapes if s.phase is phase)

    @classmethod
    def of(cls, profile: WorkloadProfile, limits: Limits) -> ShapeMix:
        inputs = np.asarray(profile.input_len.sketch)
        outputs = np.maximum(1, np.rint(profile.output_len.sketch)).astype(int)
        cached = profile.prefix_reuse if limits.prefix_caching else 0.0
        context = int(min(profile.input_len.p50 + profile.output_len.p50 / 2, limits.max_model_len - 1))
        context = max(context, 1)
        per_seq = -(-context // limits.block_size) * limits.block_size
        slots = max(1, min(limits.max_num_seqs, profile.requests, limits.kv_tokens // per_seq))
        n = min(profile.requests, SIMULATED_REQUESTS)
        order = np.random.default_rng(0).permutation(n)  # sketch quantiles in a fixed mixed order
        decode = decode_occupancy([int(outputs[i * len(outputs) // n]) for i in order], slots)
        chunk = min(limits.max_prefill_chunk, limits.max_model_len - 1, limits.kv_tokens)
        prefill: Counter[int] = Counter()
        for length in np.maximum(1, np.rint(inputs * (1 - cached))).astype(int):
            prefill[chunk] += int(length // chunk) * chunk
            prefill[int(length % chunk)] += int(length % chunk)
        shapes = [StepShape(Phase.DECODE, b, context, 1, w) for b, w in _buckets(decode, slots).items()]
        shapes += [StepShape(Phase.PREFILL, 1, q, q, w) for q, w in _buckets(prefill, chunk).items()]
        return cls(
            shapes=tuple(shapes),
            prefill_tokens=float(profile.input_len.mean * (1 - cached)),
            decode_tokens=float(np.mean(outputs) - 1),
            output_tokens=float(profile.output_len.mean),
        )


def decode_occupancy(output_lens: Iterable[int], slots: int) -> Counter[int]:
    """Decode tokens generated at each batch size when requests with these output lengths, all waiting
    at the start in this order, run through `slots` sequence slots (a slot frees when a request ends)."""
    queue = deque(output_lens)
    remaining: list[int] = []
    tokens: Counter[int] = Counter()
    while queue or remaining:
        while queue and len(remaining) < slots:
            left = queue.popleft() - 1  # the first output token is sampled by the prefill
            if left:
                remaining.append(left)
        if remaining:
            tokens[len(remaining)] += len(remaining)
            remaining = [r - 1 for r in remaining if r > 1]
    return tokens


def _buckets(tokens: Counter[int], cap: int) -> dict[int, float]:
    """Token counts by size -> weight by representative size. Sizes group into buckets around the powers
    of two up to `cap` (and `cap`), nearest in log; a bucket stands at its members' token-weighted mean."""
    centres = sorted({2**i for i in range(int(math.log2(cap)) + 1)} | {cap})
    members: dict[int, Counter[int]] = {}
    for size, count in tokens.items():
        if size > 0 and count > 0:
            centre = min(centres, key=lambda c: abs(math.log2(c / size)))
            members.setdefault(centre, Counter())[size] += count
    total = sum(tokens.values())
    kept: Counter[int] = Counter()
    for group in members.values():
        count = sum(group.values())
        if count / total >= MIN_WEIGHT:
            kept[round(sum(size * c for size, c in group.items()) / count)] += count
    return {size: count / sum(kept.values()) for size, count in sorted(kept.items())}
