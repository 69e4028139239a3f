"""The candidate contract: a Python source module plus knobs that implements the forward pass.

A candidate module defines

    def build(ctx: SwapContext) -> Forward

and may declare `KNOBS = {"name": [choice, ...]}` for the knob searcher. `build` runs once at swap time
and may derive weights (fused QKV, quantized copies) or capture graphs; the returned `Forward` is called
with a `Batch` every step and returns logits `[len(batch.logits_indices), vocab]`. It reads and writes
the engine's `KVPool` (never its own KV memory) and keeps no state between batches beyond caches keyed
by shape. The candidate's identity is the content hash of its source and knobs.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import torch

from polyinfer.engine.batch import Batch
from polyinfer.engine.kv_pool import KVPool
from polyinfer.errors import CandidateError
from polyinfer.models.spec import ModelSpec
from polyinfer.models.weights import Weights

BUILTIN_DIR = Path(__file__).resolve().parent.parent / "candidates"


class Forward(Protocol):
    def __call__(self, batch: Batch) -> torch.Tensor: ...


@dataclass(frozen=True, slots=True)
class SwapContext:
    spec: ModelSpec  # num_layers is the number of layers loaded (the fast tier loads a few)
    weights: Weights
    kv: KVPool
    knobs: Mapping[str, Any]
    device: torch.device
    dtype: torch.dtype


@dataclass(frozen=True, slots=True)
class Candidate:
    source: str
    knobs: Mapping[str, Any] = field(default_factory=dict)
    name: str = ""

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "knobs", dict(json.loads(json.dumps(dict(self.knobs), sort_keys=True))))
        except (TypeError, ValueError) as e:
            raise CandidateError(f"candidate knobs must be JSON values: {e}") from None

    @property
    def hash(self) -> str:
        payload = self.source.encode() + b"\0" + json.dumps(self.knobs, sort_keys=True).encode()
        return hashlib.sha256(payload).hexdigest()[:16]

    @property
    def label(self) -> str:
        return f"{self.name or 'candidate'}@{self.hash[:8]}"

    def with_knobs(self, knobs: Mapping[str, Any]) -> Candidate:
        return Candidate(self.source, {**self.knobs, **knobs}, self.name)

    @classmethod
    def from_file(cls, path: str | Path, knobs: Mapping[str, Any] | None = None) -> Candidate:
        p = Path(path)
        try:
            source = p.read_text()
        except OSError as e:
            raise CandidateError(f"cannot read candidate {p}: {e.strerror}") from None
        return cls(source, knobs or {}, p.stem)

    @classmethod
    def builtin(cls, name: str, knobs: Mapping[str, Any] | None = None) -> Candidate:
        path = BUILTIN_DIR / f"{name}.py"
        if not path.is_file():
            known = sorted(q.stem for q in BUILTIN_DIR.glob("*.py") if not q.stem.startswith("_"))
            raise CandidateError(f"no built-in candidate {name!r}; built-ins: {', '.join(known)}")
        return cls.from_file(path, knobs)

    @classmethod
    def parse(cls, ref: str, knobs: Mapping[str, Any] | None = None) -> Candidate:
        """`SOURCE[:knob=value...]`: a candidate file or a built-in's name, then knobs whose values are
        read as JSON where they parse and as strings otherwise (`fast:decode_attention=batched`);
        `knobs` adds more."""
        source, *settings = ref.split(":")
        parsed: dict[str, Any] = {}
        for setting in settings:
            key, sep, text = setting.partition("=")
            if not (key and sep):
                raise CandidateError(f"cannot read knob {setting!r} in {ref!r}; write SOURCE:name=value")
            try:
                parsed[key] = json.loads(text)
            except json.JSONDecodeError:
                parsed[key] = text
        parsed.update(knobs or {})
        if Path(source).is_file():
            return cls.from_file(source, parsed)
        if source.endswith(".py") or "/" in source:
            raise CandidateError(f"no candidate file at {source}")
        return cls.builtin(source, parsed)

    @classmethod
    def reference(cls) -> Candidate:
        return cls.builtin("reference")


def import_candidate(candidate: Candidate) -> ModuleType:
    """Import the candidate's source as a fresh module named by its hash (no restart needed)."""
    name = f"polyinfer_candidate_{candidate.hash}"
    module_spec = importlib.util.spec_from_loader(name, loader=None)
    assert module_spec is not None
    module = importlib.util.module_from_spec(module_spec)
    module.__file__ = f"<candidate {candidate.label}>"
    try:
        code = compile(candidate.source, module.__file__, "exec")
        sys.modules[name] = module
        exec(code, module.__dict__)
    except Exception as e:
        sys.modules.pop(name, None)
        raise CandidateError(f"candidate {candidate.label} failed to import: {type(e).__name__}: {e}") from e
    if not callable(getattr(module, "build", None)):
        raise CandidateError(f"candidate {candidate.label} defines no build(ctx) function")
    return module


def declared_knobs(candidate: Candidate) -> dict[str, list[Any]]:
    """The knob choices the candidate declares (`KNOBS`), for the knob searcher."""
    knobs = getattr(import_candidate(candidate), "KNOBS", {})
    if not isinstance(knobs, dict) or not all(isinstance(v, list) and v for v in knobs.values()):
        raise CandidateError(f"candidate {candidate.label}: KNOBS must map names to non-empty lists")
    return knobs


def declared_check(candidate: Candidate) -> Callable[[dict[str, Any]], str | None]:
    """The candidate's `invalid(knobs)`: why a knob setting cannot build, or None. A family whose knobs
    do not all combine declares it, so a search skips those settings instead of measuring a failure."""
    check = getattr(import_candidate(candidate), "invalid", None)
    if check is None:
        return lambda knobs: None
    if not callable(check):
        raise CandidateError(f"candidate {candidate.label}: invalid must be a function of the knobs")
    return check


def declared_seeds(candidate: Candidate) -> list[dict[str, Any]]:
    """Starting points the candidate's author suggests (`SEEDS`: knob settings, the rest at defaults)."""
    seeds = getattr(import_candidate(candidate), "SEEDS", [])
    if not isinstance(seeds, list) or not all(isinstance(s, dict) for s in seeds):
        raise CandidateError(f"candidate {candidate.label}: SEEDS must be a list of knob settings")
    return seeds
