"""VerifyContext: everything a check needs, and nothing else. Checks are `check(ctx) -> Outcome`.

A check builds its own engines through `ctx.lab(...)` (pool size, prefix caching and scheduler limits
are part of what it tests); every lab shares the loaded weights, holds the reference forward and the
candidate's forward side by side, and the candidate's forward is always the guarded one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from polyinfer.engine.candidate import Candidate, Forward
from polyinfer.engine.engine import Engine
from polyinfer.models.load import LoadedModel
from polyinfer.verify.config import BatteryConfig, Tolerance
from polyinfer.verify.guard import GuardedForward, GuardLog


@dataclass(frozen=True, slots=True)
class Outcome:
    """A check's verdict before the battery stamps it with name, seed and time."""

    passed: bool
    numbers: dict[str, Any]
    reason: str = ""
    skipped: bool = False


@dataclass(frozen=True, slots=True)
class Lab:
    engine: Engine
    reference: Forward
    candidate: Forward  # guarded


@dataclass(frozen=True, slots=True)
class VerifyContext:
    model: LoadedModel
    candidate: Candidate
    config: BatteryConfig
    seed: int  # this check's seed: every random choice the check makes derives from it
    log: GuardLog

    @property
    def tol(self) -> Tolerance:
        return self.config.tolerances

    @property
    def block_size(self) -> int:
        return self.config.block_size

    def with_seed(self, seed: int) -> VerifyContext:
        return dataclasses.replace(self, seed=seed)

    def with_candidate(self, candidate: Candidate, log: GuardLog) -> VerifyContext:
        return dataclasses.replace(self, candidate=candidate, log=log)

    def generator(self) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed)

    def prompts(self, gen: torch.Generator, lengths: list[int]) -> list[list[int]]:
        vocab = self.model.spec.vocab_size
        return [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in lengths]

    def lengths(self, gen: torch.Generator, n: int, longest: int | None = None) -> list[int]:
        return torch.randint(1, (longest or self.config.max_prompt_len) + 1, (n,), generator=gen).tolist()

    def lab(self, **engine: Any) -> Lab:
        """A fresh engine on the shared weights with `engine` overriding the battery's EngineConfig."""
        eng = Engine(self.model, self.config.engine_config(**engine))
        assert eng.forward is not None  # the engine starts on the reference
        forward, _ = eng.prepare(self.candidate)
        guarded = GuardedForward(self.candidate, forward, self.model.spec.vocab_size, self.log)
        return Lab(eng, eng.forward, guarded)
