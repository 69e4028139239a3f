"""Sequence: one request's tokens, KV blocks and progress through the engine."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from enum import Enum

from polyinfer.errors import RequestError


class SequenceStatus(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class FinishReason(Enum):
    STOP = "stop"  # an end-of-sequence or stop token
    LENGTH = "length"  # max_tokens or the model's context


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Greedy when temperature is 0; otherwise temperature, then top-k, then top-p, seeded if `seed` is set."""

    max_tokens: int = 16
    temperature: float = 0.0
    top_k: int = 0  # 0: no top-k cut
    top_p: float = 1.0
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise RequestError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise RequestError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise RequestError(f"top_k must be >= 0, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise RequestError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


_ids = itertools.count()


class Sequence:
    def __init__(self, prompt_ids: list[int], params: SamplingParams, arrival: float | None = None) -> None:
        self.id = next(_ids)
        self.prompt_ids = list(prompt_ids)
        self.output_ids: list[int] = []
        self.params = params
        self.status = SequenceStatus.WAITING
        self.finish_reason: FinishReason | None = None
        self.block_table: list[int] = []
        self.block_hashes: list[int] = []  # chained hashes of the full blocks computed so far
        self.num_computed = 0  # tokens whose K/V are in the pool
        self.num_cached = 0  # of those, tokens found in the prefix cache at admission
        self.arrival = time.perf_counter() if arrival is None else arrival
        self.token_times: list[float] = []  # when each output token was sampled
        self.num_preemptions = 0

    @property
    def tokens(self) -> list[int]:
        return self.prompt_ids + self.output_ids

    def token_slice(self, start: int, stop: int) -> list[int]:
        """`tokens[start:stop]` without building the whole token list (a decode step reads one token)."""
        p = len(self.prompt_ids)
        if start >= p:
            return self.output_ids[start - p : stop - p]
        if stop <= p:
            return self.prompt_ids[start:stop]
        return self.prompt_ids[start:] + self.output_ids[: stop - p]

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def num_pending(self) -> int:
        """Tokens whose K/V still need computing before the next token can be sampled."""
        return len(self) - self.num_computed

    @property
    def in_prefill(self) -> bool:
        return self.num_pending > 1 or not self.output_ids

    def __repr__(self) -> str:
        return f"Sequence(id={self.id}, len={len(self)}, computed={self.num_computed}, {self.status.value})"
