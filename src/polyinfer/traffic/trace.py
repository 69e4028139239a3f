"""Request and Trace: the records every traffic source (trace file, synthesis, server recording) yields.

Prefix blocks: `Request.prefix_hashes[i]` names the content of prompt tokens `[0, (i+1) * block_size)`
(a chained hash, as in Mooncake traces and paged KV caches), so two requests share their first `k`
blocks exactly when their first `k` hashes are equal. The last block may be partial.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from polyinfer.errors import PolyinferError


class TraceError(PolyinferError):
    """A trace cannot be read or built: unreadable file, unknown format, malformed row (named by file and
    line), or an invalid workload description."""


@dataclass(frozen=True, slots=True)
class Request:
    """One request as the traffic saw it: when it arrived and how many tokens went in and came out.

    Lengths count tokens and are at least 1: a request with an empty prompt or no output cannot be
    replayed. `session` groups the turns of one conversation.
    """

    arrival_s: float
    input_len: int
    output_len: int
    prefix_hashes: tuple[int | str, ...] = ()
    prompt_ids: tuple[int, ...] | None = None
    session: str | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.arrival_s) and self.arrival_s >= 0):
            raise TraceError(f"arrival time {self.arrival_s} must be a finite number >= 0")
        if self.input_len < 1 or self.output_len < 1:
            raise TraceError(
                f"lengths must be >= 1 (input_len={self.input_len}, output_len={self.output_len})"
            )
        if self.prompt_ids is not None and len(self.prompt_ids) != self.input_len:
            raise TraceError(
                f"prompt_ids has {len(self.prompt_ids)} tokens but input_len is {self.input_len}"
            )


@dataclass(frozen=True, slots=True)
class Trace:
    """Requests in arrival order, with where they came from.

    `block_size` is the number of tokens behind each prefix hash (None when the source has no hashes);
    `skipped` counts source rows that described no servable request (failures, zero lengths).
    """

    name: str
    format: str
    requests: tuple[Request, ...]
    block_size: int | None = None
    skipped: int = 0

    def __post_init__(self) -> None:
        if not self.requests:
            raise TraceError(f"trace {self.name!r} holds no requests")
        arrivals = [r.arrival_s for r in self.requests]
        if any(b < a for a, b in itertools.pairwise(arrivals)):
            raise TraceError(f"trace {self.name!r}: requests are not in arrival order")
        if self.block_size is not None and self.block_size < 1:
            raise TraceError(f"trace {self.name!r}: block_size must be >= 1, got {self.block_size}")
        if self.block_size is None and any(r.prefix_hashes for r in self.requests):
            raise TraceError(f"trace {self.name!r} has prefix hashes but no block_size")

    def __len__(self) -> int:
        return len(self.requests)

    @property
    def duration_s(self) -> float:
        """Time from the first arrival to the last."""
        return self.requests[-1].arrival_s - self.requests[0].arrival_s

    def prompt_tokens(self, request: Request, vocab_size: int) -> list[int]:
        """Token ids to replay `request` with: its recorded `prompt_ids`, else ids derived from its hashes.

        Each prefix block's tokens are drawn from a generator seeded by that block's hash, so requests
        that share prefix blocks share those tokens and a replay exercises the prefix cache exactly as
        the trace says; tokens past the hashed blocks are unique to the request.
        """
        if request.prompt_ids is not None:
            return list(request.prompt_ids)
        block = self.block_size or request.input_len
        tokens: list[int] = []
        for h in request.prefix_hashes:
            tokens.extend(_draw_tokens(h, min(block, request.input_len - len(tokens)), vocab_size))
        tokens.extend(_draw_tokens(repr(request), request.input_len - len(tokens), vocab_size))
        return tokens


def _draw_tokens(seed: object, n: int, vocab_size: int) -> list[int]:
    rng = np.random.default_rng(stable_hash(seed))
    return rng.integers(0, vocab_size, max(n, 0)).tolist()


def stable_hash(value: object) -> int:
    """A 63-bit hash of `repr(value)` that, unlike `hash()`, is the same in every process."""
    digest = hashlib.blake2b(repr(value).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def block_hashes(prompt_ids: Sequence[int], block_size: int) -> tuple[int, ...]:
    """Chained hashes of the prompt's blocks (the last may be partial), as a recording server computes them."""
    hashes: list[int] = []
    previous = 0
    for start in range(0, len(prompt_ids), block_size):
        previous = stable_hash((previous, tuple(prompt_ids[start : start + block_size])))
        hashes.append(previous)
    return tuple(hashes)
