"""Serving knobs: engine settings a candidate may carry as knobs prefixed `serve.`, searched alongside
its own. They change scheduling and caching, never the forward pass's arithmetic, and can change
between steps (the pool's layout stays put)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from polyinfer.engine.config import EngineConfig
from polyinfer.errors import CandidateError

PREFIX = "serve."
SERVING_KNOBS: dict[str, list[Any]] = {
    "serve.prefix_caching": [False, True],
    "serve.max_prefill_chunk": [512, 256, 128],
    # Overlapping the host's work with the device's needs a device that runs asynchronously: offered on
    # CUDA only (on a CPU it would only cost the search full-tier runs); asked for by name it runs anywhere.
    "serve.async_steps": [False, *([True] if torch.cuda.is_available() else [])],
}

# Serving knobs that change only how the host drives steps, not which steps run: the fast tier, which
# times forward passes, cannot see them, so only the full tier can judge a change of these alone.
STEP_KNOBS = frozenset({"serve.async_steps"})


@dataclass(frozen=True, slots=True)
class Serving:
    prefix_caching: bool
    max_prefill_chunk: int
    async_steps: bool

    @classmethod
    def of(cls, config: EngineConfig, knobs: Mapping[str, Any]) -> Serving:
        """The engine's own settings, overridden by the candidate's `serve.` knobs."""
        unknown = sorted(k for k in knobs if k.startswith(PREFIX) and k not in SERVING_KNOBS)
        if unknown:
            raise CandidateError(f"unknown serving knobs {unknown}; serving knobs are {sorted(SERVING_KNOBS)}")
        caching = knobs.get("serve.prefix_caching", config.prefix_caching)
        chunk = knobs.get("serve.max_prefill_chunk", config.max_prefill_chunk)
        steps = knobs.get("serve.async_steps", config.async_steps)
        if not isinstance(caching, bool) or not isinstance(chunk, int) or chunk < 1 or not isinstance(steps, bool):
            raise CandidateError(f"bad serving knobs: prefix_caching={caching!r}, max_prefill_chunk={chunk!r}, "
                                 f"async_steps={steps!r}")
        return cls(caching, chunk, steps)

    def apply(self, engine: Any) -> None:
        """Make these the engine's settings; a step in flight is settled first, under the old ones."""
        engine.drain()
        engine.blocks.prefix_caching = self.prefix_caching
        engine.scheduler.config = dataclasses.replace(engine.scheduler.config, max_prefill_chunk=self.max_prefill_chunk)
        engine.async_steps = self.async_steps
        engine.serving = self


def candidate_knobs(knobs: Mapping[str, Any]) -> dict[str, Any]:
    """The knobs that are the candidate's own (everything but the serving knobs)."""
    return {k: v for k, v in knobs.items() if not k.startswith(PREFIX)}
