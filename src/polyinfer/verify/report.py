"""The verification report: one CheckResult per check, the verdict, the cost, and its two renderings.

Every result carries the numbers behind its verdict and the seed it ran with; `polyinfer verify
CANDIDATE --seed S --only NAME` replays one check exactly, because each check's seed is derived from the
battery seed and the check's name.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from polyinfer.errors import PolyinferError

if TYPE_CHECKING:  # the board needs SQLAlchemy, which verifying alone does not
    from polyinfer.board.board import Board


def _json_number(value: Any) -> Any:
    # inf and nan are not JSON; a failed comparison often produces them, so keep them readable.
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


@dataclass(frozen=True, slots=True)
class CheckResult:
    name: str  # "family.check", e.g. "contamination.needle"
    passed: bool
    numbers: Mapping[str, Any]
    seed: int
    seconds: float
    reason: str = ""  # why it failed (or why it was skipped); empty when it simply passed
    skipped: bool = False  # not applicable here (e.g. perplexity without a tokenizer); counts as passed

    def __post_init__(self) -> None:
        numbers = {k: _json_number(v) for k, v in self.numbers.items()}
        object.__setattr__(self, "numbers", MappingProxyType(numbers))
        object.__setattr__(self, "passed", bool(self.passed))

    def __reduce__(self) -> tuple[Any, ...]:
        # A report travels back from the worker process by pickle, which cannot take a mappingproxy.
        return (
            CheckResult,
            (self.name, self.passed, dict(self.numbers), self.seed, self.seconds, self.reason, self.skipped),
        )

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in CheckResult.__dataclass_fields__} | {
            "numbers": dict(self.numbers)
        }


@dataclass(frozen=True, slots=True)
class Report:
    candidate_hash: str
    candidate_name: str
    model: str  # the LoadedModel's source
    weights_hash: str
    num_layers: int
    device: str
    dtype: str
    block_size: int
    seed: int
    exact: bool
    checks: tuple[CheckResult, ...]
    seconds: float  # the whole battery's cost, canary and re-verification included
    speedup: float | None = None  # the speedup that counts: claimed, or confirmed by a re-measurement
    created_at: float = 0.0
    # Half precision: the reference's own worst-row logits error against float32 (verify/calibration.py),
    # and the logits tolerance the checks used (the dtype's, or a multiple of that floor).
    noise_floor: float | None = None
    logits_tolerance: float | None = None

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)

    @property
    def failed(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.checks if not c.passed)

    def check(self, name: str) -> CheckResult:
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(name)

    def tolerance_line(self) -> str:
        """The logits tolerance the checks used, and the noise floor it came from (half precision)."""
        floor = (f" ({self.noise_floor:.3g} is the reference's own {self.dtype} error against float32)"
                 if self.noise_floor is not None else "")
        return f"logits tolerance: {self.logits_tolerance:.3g}{floor}"

    def to_json(self) -> str:
        value = {name: getattr(self, name) for name in Report.__dataclass_fields__}
        value["checks"] = [c.to_dict() for c in self.checks]
        value["passed"] = self.passed
        return json.dumps(value, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Report:
        try:
            value = json.loads(text)
            value.pop("passed", None)
            value["checks"] = tuple(CheckResult(**c) for c in value["checks"])
            return cls(**value)
        except (ValueError, TypeError, KeyError) as e:
            raise PolyinferError(f"not a verification report: {e}") from None

    def to_markdown(self) -> str:
        verdict = "PASSED" if self.passed else f"FAILED ({', '.join(self.failed)})"
        lines = [
            f"# Verification of {self.candidate_name or 'candidate'} `{self.candidate_hash}`",
            "",
            f"**{verdict}** in {self.seconds:.2f} s (battery cost for this candidate).",
            "",
            f"- model: `{self.model}` ({self.num_layers} layers), weights `{self.weights_hash[:16]}`",
            f"- engine: {self.device}, {self.dtype}, block size {self.block_size}",
            f"- seed: {self.seed}{' (exact mode: bit-identical to the reference)' if self.exact else ''}",
        ]
        if self.logits_tolerance is not None:
            lines.append(f"- {self.tolerance_line()}")
        if self.speedup is not None:
            lines.append(f"- speedup that counts: {self.speedup:.3f}x")
        lines += ["", "| check | result | numbers | seed | seconds |", "| --- | --- | --- | --- | --- |"]
        for c in self.checks:
            result = "skipped" if c.skipped else ("pass" if c.passed else "**FAIL**")
            numbers = ", ".join(f"{k}={_short(v)}" for k, v in c.numbers.items())
            lines.append(f"| {c.name} | {result} | {numbers} | {c.seed} | {c.seconds:.3f} |")
        failures = [c for c in self.checks if not c.passed or c.skipped]
        if failures:
            lines += ["", "## Reasons", ""]
            lines += [f"- **{c.name}**: {c.reason}" for c in failures]
        lines += ["", f"Replay one check: `polyinfer verify CANDIDATE --seed {self.seed} --only NAME`", ""]
        return "\n".join(lines)


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    text = str(value)
    return text if len(text) <= 24 else text[:21] + "..."


def record_verdicts(board: Board, study_id: int, report: Report) -> None:
    """One board verdict per check of `report`, for the study's candidate the report verified."""
    for c in report.checks:
        details = {**c.numbers, "reason": c.reason, "seconds": c.seconds, "skipped": c.skipped}
        board.record_verdict(
            study_id, report.candidate_hash, check=c.name, passed=c.passed, details=details, seed=c.seed
        )
