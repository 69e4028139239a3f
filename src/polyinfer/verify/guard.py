"""GuardedForward: the candidate's forward, checked before every call to still be the verified code.

Before each step the guard recomputes the candidate's content hash and a fingerprint of the code its
forward can reach (functions and classes of its module, callables bound on the forward object). A
candidate that rebinds its own functions after `build` (say, to a faster wrong path once verification
is likely over) changes the fingerprint at the next call. Data-dependent behaviour through plain values
is outside what a code hash can see; determinism and the contamination checks cover part of that.
"""

from __future__ import annotations

import hashlib
import inspect
import sys
from types import CodeType, FunctionType, MethodType
from typing import Any

import torch

from polyinfer.engine.batch import Batch
from polyinfer.engine.candidate import Candidate, Forward
from polyinfer.errors import CandidateError


class GuardLog:
    """What the guards of one battery saw: forward calls checked, and every integrity violation."""

    def __init__(self) -> None:
        self.calls = 0
        self.violations: list[str] = []


class GuardedForward:
    def __init__(self, candidate: Candidate, forward: Forward, vocab_size: int, log: GuardLog) -> None:
        self.candidate = candidate
        self.forward = forward
        self.vocab_size = vocab_size
        self.log = log
        self.expected_hash = candidate.hash
        self.expected_code = code_fingerprint(forward)

    def __call__(self, batch: Batch) -> torch.Tensor:
        self.log.calls += 1
        if self.candidate.hash != self.expected_hash:
            self._violation(
                f"the candidate's hash changed from {self.expected_hash} to {self.candidate.hash}"
            )
        if code_fingerprint(self.forward) != self.expected_code:
            self._violation("the candidate's code changed after it was built (a function was rebound)")
        try:
            with torch.inference_mode():
                logits = self.forward(batch)
        except Exception as e:
            raise CandidateError(f"the candidate raised {type(e).__name__}: {e}") from e
        expected = (int(batch.logits_indices.shape[0]), self.vocab_size)
        if not isinstance(logits, torch.Tensor) or tuple(logits.shape) != expected:
            got = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
            raise CandidateError(f"the candidate returned logits {got}, expected {expected}")
        return logits

    def _violation(self, message: str) -> None:
        self.log.violations.append(message)
        raise CandidateError(f"integrity: {message}")


def code_fingerprint(forward: Forward) -> str:
    """sha256 over the code reachable from `forward`'s module and instance, by name, in a stable order."""
    digest = hashlib.sha256()
    for name, code in sorted(_reachable_code(forward), key=lambda item: item[0]):
        digest.update(name.encode() + b"\0" + code + b"\0")
    return digest.hexdigest()


def _reachable_code(forward: Any) -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    for namespace in _namespaces(forward):
        module = namespace.get("__name__")
        for name, value in list(namespace.items()):
            key = f"{module}.{name}"
            if getattr(value, "__module__", None) == module and (
                inspect.isfunction(value) or inspect.isclass(value)
            ):
                out += _code_of(key, value)
            elif callable(value):  # a name rebound to something imported counts too
                where = f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', '')}"
                out.append((key, where.encode()))
    for name, value in list(getattr(forward, "__dict__", {}).items()):
        if isinstance(value, FunctionType | MethodType):
            out += _code_of(f"self.{name}", value)
    return out


def _namespaces(forward: Any) -> list[dict[str, Any]]:
    """The globals of the module that defines the forward's class (or function) and of its `__call__`."""
    found: dict[int, dict[str, Any]] = {}
    module = sys.modules.get(getattr(forward, "__module__", None) or "")
    if module is not None:
        found[id(module.__dict__)] = module.__dict__
    call = forward if isinstance(forward, FunctionType) else type(forward).__call__
    namespace = getattr(inspect.unwrap(call), "__globals__", None) if call is not None else None
    if namespace is not None:  # unwrapped: decorators such as inference_mode live in torch
        found[id(namespace)] = namespace
    return list(found.values())


def _code_of(name: str, value: Any) -> list[tuple[str, bytes]]:
    if inspect.isclass(value):  # the bases too: a candidate may subclass the reference and patch it
        return [
            pair
            for klass in value.__mro__[:-1]
            for attr, member in vars(klass).items()
            for pair in _code_of(f"{name}.{klass.__qualname__}.{attr}", member)
        ]
    function = inspect.unwrap(getattr(value, "__func__", value))  # bound, static and class methods
    code = getattr(function, "__code__", None)
    return [(name, _code_bytes(code))] if isinstance(code, CodeType) else []


def _code_bytes(code: CodeType) -> bytes:
    # Not marshal: its output depends on reference counts, so the same code can serialise differently.
    parts = [code.co_code, repr(code.co_names).encode(), repr(code.co_varnames).encode()]
    parts += [_code_bytes(c) if isinstance(c, CodeType) else repr(c).encode() for c in code.co_consts]
    return b"\1".join(parts)
