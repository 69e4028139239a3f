"""Synthetic workloads: seeded traces with chosen arrivals, length mix, shared prefixes and conversations.

The generative story, one session (conversation) at a time:
- sessions start by a renewal process with gamma inter-arrival gaps (CV 1 is Poisson, above 1 bursty,
  0 evenly spaced) at `rate / turns` per second, so requests arrive at about `rate` per second;
- a session opens, with probability `shared_fraction`, with one of `shared_prefixes` system prompts of
  `shared_prefix_len` tokens (the same tokens in every session that draws it);
- each turn sends the whole conversation so far plus `input_len` new tokens and gets `output_len`
  tokens back; on the first turn the system prompt counts towards the new tokens (the message fills
  the rest, at least one token), so single-turn prompt lengths follow `input_len` whatever the
  sharing. The next turn follows an exponential think time (mean `think_s`, which includes the wait
  for the reply). Prefix hashes follow from this content, block by block.

Arrivals, lengths and prefix choices draw from separate seeded streams, so changing the length mix
of a spec leaves its arrival times unchanged (with `max_len`, a conversation cut short only loses
its later turns).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from polyinfer.traffic.trace import Request, Trace, TraceError, stable_hash


@dataclass(frozen=True, slots=True)
class Lognormal:
    """Lengths whose logarithm is normal: half are below `median`; p90 is median * exp(1.28 * sigma)."""

    median: float
    sigma: float

    def __post_init__(self) -> None:
        if self.median <= 0 or self.sigma < 0:
            raise TraceError(
                f"lognormal lengths need median > 0 and sigma >= 0, got {self.median}, {self.sigma}"
            )

    def sample(self, rng: np.random.Generator) -> float:
        return float(rng.lognormal(math.log(self.median), self.sigma))


@dataclass(frozen=True, slots=True)
class Empirical:
    """Lengths resampled, with replacement, from observed ones (e.g. `Empirical(tuple(input lengths))`)."""

    values: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.values or min(self.values) < 1:
            raise TraceError("empirical lengths need at least one value, all >= 1")

    def sample(self, rng: np.random.Generator) -> float:
        return float(self.values[int(rng.integers(len(self.values)))])


@dataclass(frozen=True, slots=True)
class SynthSpec:
    """A synthetic workload. Exactly one of `requests` and `duration_s` bounds it.

    `scale` multiplies every length (messages, replies, system prompts) so a preset shrinks to what a
    small model can replay; `max_len` then caps prompt + output per request: replies are clipped
    first, then the fresh message, and a conversation ends when its history leaves no room.
    """

    rate: float = 2.0
    cv: float = 1.0
    requests: int | None = 500
    duration_s: float | None = None
    input_len: Lognormal | Empirical = field(default_factory=lambda: Lognormal(600, 0.7))
    output_len: Lognormal | Empirical = field(default_factory=lambda: Lognormal(200, 0.8))
    shared_prefix_len: int = 0
    shared_prefixes: int = 1
    shared_fraction: float = 0.0
    turns: int = 1
    think_s: float = 10.0
    scale: float = 1.0
    max_len: int | None = None
    block_size: int = 16
    seed: int = 0
    name: str = "synth"

    MIN_ROOM: ClassVar[int] = 2  # one prompt token and one output token

    def __post_init__(self) -> None:
        if (self.requests is None) == (self.duration_s is None):
            raise TraceError("give exactly one of a request count and a duration")
        checks = {
            "rate > 0": self.rate > 0,
            "cv >= 0": self.cv >= 0,
            "requests >= 1": self.requests is None or self.requests >= 1,
            "duration_s > 0": self.duration_s is None or self.duration_s > 0,
            "shared_prefix_len >= 0": self.shared_prefix_len >= 0,
            "shared_prefixes >= 1": self.shared_prefixes >= 1,
            "0 <= shared_fraction <= 1": 0 <= self.shared_fraction <= 1,
            "turns >= 1": self.turns >= 1,
            "think_s >= 0": self.think_s >= 0,
            "scale > 0": self.scale > 0,
            "block_size >= 1": self.block_size >= 1,
            "max_len leaves room after the shared prefix": self.max_len is None
            or self.max_len >= self.system_len + self.MIN_ROOM,
        }
        failed = [rule for rule, ok in checks.items() if not ok]
        if failed:
            raise TraceError(f"invalid synthetic workload: need {'; '.join(failed)}")

    @property
    def system_len(self) -> int:
        return round(self.shared_prefix_len * self.scale)


PRESETS: dict[str, SynthSpec] = {
    # An assistant-style chat service: Poisson arrivals, prompts around 600 tokens of which 80% open
    # with one of 4 system prompts of 256 tokens, and replies around 200 tokens.
    "chat": SynthSpec(
        rate=2.0,
        input_len=Lognormal(600, 0.7),
        output_len=Lognormal(200, 0.8),
        shared_prefix_len=256,
        shared_prefixes=4,
        shared_fraction=0.8,
        name="chat",
    ),
    # Retrieval-augmented QA: a fixed instruction, then retrieved passages (a long, unshared prompt)
    # and a short answer. Prefill-bound.
    "rag": SynthSpec(
        rate=1.0,
        input_len=Lognormal(3000, 0.4),
        output_len=Lognormal(120, 0.6),
        shared_prefix_len=128,
        shared_prefixes=1,
        shared_fraction=1.0,
        name="rag",
    ),
    # Tool-using agents: a long system prompt with the tool specs, then six turns a session, each
    # bringing a tool result back after a short wait. Each turn resends the whole session, so prefix
    # caching carries it.
    "agent": SynthSpec(
        rate=2.0,
        input_len=Lognormal(300, 0.8),
        output_len=Lognormal(150, 0.7),
        shared_prefix_len=1024,
        shared_prefixes=2,
        shared_fraction=1.0,
        turns=6,
        think_s=2.0,
        name="agent",
    ),
    # Code completion: a long file context and a short completion, at a high request rate.
    "code": SynthSpec(
        rate=5.0,
        input_len=Lognormal(1800, 0.6),
        output_len=Lognormal(60, 0.9),
        name="code",
    ),
    # Offline batch jobs (summarization, evaluation): everything queued at once, long replies.
    # Throughput-bound: the scheduler's largest batches.
    "batch": SynthSpec(
        rate=1000.0,
        cv=0.0,
        requests=256,
        input_len=Lognormal(1500, 0.5),
        output_len=Lognormal(400, 0.5),
        name="batch",
    ),
}


def synthesize(spec: SynthSpec) -> Trace:
    """The trace `spec` describes; the same spec (seed included) always gives the same trace."""
    arrival_rng, length_rng, prefix_rng = np.random.default_rng(spec.seed).spawn(3)
    session_rate = spec.rate / spec.turns
    requests: list[Request] = []
    start = 0.0
    for session in itertools.count():
        if session:
            start += _gap(arrival_rng, session_rate, spec.cv)
        if spec.duration_s is not None and start >= spec.duration_s:
            break
        if spec.requests is not None and _enough(requests, spec.requests, start):
            break
        system = None
        if spec.system_len and prefix_rng.random() < spec.shared_fraction:
            system = int(prefix_rng.integers(spec.shared_prefixes))
        requests.extend(_conversation(spec, session, start, system, arrival_rng, length_rng))
    requests.sort(key=lambda r: r.arrival_s)
    if spec.duration_s is not None:
        requests = [r for r in requests if r.arrival_s < spec.duration_s]
    else:
        requests = requests[: spec.requests]
    return Trace(f"{spec.name}-seed{spec.seed}", "synth", tuple(requests), spec.block_size)


def _gap(rng: np.random.Generator, rate: float, cv: float) -> float:
    if cv == 0:
        return 1.0 / rate
    shape = 1.0 / cv**2  # a gamma's CV is 1/sqrt(shape)
    return float(rng.gamma(shape, 1.0 / (rate * shape)))


def _enough(requests: list[Request], count: int, start: float) -> bool:
    """Whether the first `count` arrivals are settled: later sessions start at `start` or after."""
    if len(requests) < count:
        return False
    return sorted(r.arrival_s for r in requests)[count - 1] <= start


def _conversation(
    spec: SynthSpec,
    session: int,
    start: float,
    system: int | None,
    arrival_rng: np.random.Generator,
    length_rng: np.random.Generator,
) -> list[Request]:
    segments: list[tuple[object, int]] = []  # the conversation so far, as (content id, tokens)
    if system is not None:
        segments.append((("system", system), spec.system_len))
    context = sum(n for _, n in segments)
    # All think times are drawn up front so that a conversation cut short by max_len consumes the
    # arrival stream like any other and later sessions keep their start times.
    arrivals = start + np.concatenate(
        ([0.0], np.cumsum(arrival_rng.exponential(spec.think_s, spec.turns - 1)))
    )
    turns = []
    for turn, arrival in enumerate(arrivals.tolist()):
        fresh = _length(spec.input_len, length_rng, spec.scale)
        if turn == 0:
            fresh = max(1, fresh - context)  # the system prompt is part of the first prompt's length
        output = _length(spec.output_len, length_rng, spec.scale)
        if spec.max_len is not None:
            room = spec.max_len - context
            if room < spec.MIN_ROOM:
                break
            output = min(output, room - 1)
            fresh = min(fresh, room - output)
        segments.append((("user", session, turn), fresh))
        turns.append(
            Request(
                arrival,
                context + fresh,
                output,
                _block_hashes(segments, spec.block_size),
                session=f"s{session}" if spec.turns > 1 else None,
            )
        )
        segments.append((("reply", session, turn), output))
        context += fresh + output
    return turns


def _length(dist: Lognormal | Empirical, rng: np.random.Generator, scale: float) -> int:
    return max(1, round(dist.sample(rng) * scale))


def _block_hashes(segments: list[tuple[object, int]], block_size: int) -> tuple[int, ...]:
    """Chained hashes of the blocks of a prompt made of `segments`; equal content gives equal hashes."""
    hashes: list[int] = []
    block: list[tuple[object, int, int]] = []  # pieces (content id, first token, end token)
    filled, previous = 0, 0
    for content, length in segments:
        offset = 0
        while offset < length:
            take = min(length - offset, block_size - filled)
            block.append((content, offset, offset + take))
            offset, filled = offset + take, filled + take
            if filled == block_size:
                previous = stable_hash((previous, tuple(block)))
                hashes.append(previous)
                block, filled = [], 0
    if block:
        hashes.append(stable_hash((previous, tuple(block))))
    return tuple(hashes)
