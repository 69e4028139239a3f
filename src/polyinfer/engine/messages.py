"""Typed messages between the supervisor and an engine worker process."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from polyinfer.engine.config import EngineConfig


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """What a worker loads at start; everything else arrives as calls."""

    model: str | None  # a model reference as `load_model` takes it; None is the embedded default
    config: EngineConfig = field(default_factory=EngineConfig)
    num_layers: int | None = None  # load only the first k layers (the fast tier)
    memory_limit_gb: float | None = None  # address-space cap for the worker (CPU only)
    # Intra-op threads on CPU. One keeps timings steady on a small shared machine; None keeps torch's default.
    cpu_threads: int | None = 1


@dataclass(frozen=True, slots=True)
class Call:
    """Run `fn(engine, *args)` in the worker; `fn` must be a module-level function (it is pickled)."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class Ready:
    load_s: float  # process start to weights resident
    first_forward_s: float  # building and probing the reference candidate
    weights_bytes: int
    kv_blocks: int


@dataclass(frozen=True, slots=True)
class Done:
    value: Any
    seconds: float


class FailureKind(Enum):
    RAISED = "raised"  # the call raised; the worker is fine
    TIMEOUT = "timeout"  # no answer in time; the worker was killed and restarted
    CRASHED = "crashed"  # the worker died; it was restarted


@dataclass(frozen=True, slots=True)
class Failed:
    kind: FailureKind
    message: str
