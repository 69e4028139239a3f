"""Comparing a run with its control: logits error, greedy agreement, bit-identity.

The run under test is teacher-forced onto the control's tokens (`run(..., forced=...)`), so every
position of the two had identical inputs: a near-tie that flips one greedy token in half precision
costs that one position, instead of making everything after it incomparable.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from polyinfer.verify.config import Tolerance
from polyinfer.verify.run import Run, Trace


@dataclass(frozen=True, slots=True)
class Comparison:
    rel_err: float  # worst row: max |a - b| / max |b|; inf when either side is not finite
    agreement: float  # positions where the run's argmax is the control's token / positions
    prefix: float  # worst sequence: positions before its first disagreement / its positions
    bitwise: bool  # every logit identical
    rows: int  # positions compared

    def within(self, tol: Tolerance) -> bool:
        return self.rel_err <= tol.logits_rel and self.agreement >= tol.agreement

    def numbers(self, tol: Tolerance) -> dict[str, Any]:
        return {
            "max_rel_err": self.rel_err,
            "tolerance": tol.logits_rel,
            "agreement": self.agreement,
            "min_agreement": tol.agreement,
            "agreement_prefix": self.prefix,
            "rows": self.rows,
        }

    def explain(self, tol: Tolerance, what: str) -> str:
        if self.within(tol):
            return ""
        if math.isinf(self.rel_err):
            return f"{what}: non-finite logits (NaN or inf)"
        if self.rel_err > tol.logits_rel:
            return f"{what}: relative logits error {self.rel_err:.3g} exceeds {tol.logits_rel:g}"
        return f"{what}: greedy tokens agree at {self.agreement:.3f} of positions, below {tol.agreement:g}"


def forced(control: Run) -> list[tuple[int, ...] | None]:
    """The control's tokens, to teacher-force the run under test onto them."""
    return [t.tokens for t in control.traces]


def compare(runs: Sequence[Trace], controls: Sequence[Trace]) -> Comparison:
    """`runs[i]` (forced onto `controls[i]`'s tokens) against `controls[i]`, the control taken as truth."""
    worst_err, worst_prefix, bitwise, rows, agree = 0.0, 1.0, True, 0, 0
    for a, b in zip(runs, controls, strict=True):
        if a.tokens != b.tokens:
            raise ValueError("compare() needs the run teacher-forced onto the control's tokens")
        n = len(b.tokens)
        same = a.logits.argmax(dim=-1) == b.logits.argmax(dim=-1)
        first = int((~same).nonzero()[0]) if not bool(same.all()) else n
        worst_prefix = min(worst_prefix, first / max(n, 1))
        agree += int(same.sum())
        rows += n
        bitwise &= torch.equal(a.logits, b.logits)
        worst_err = max(worst_err, _rel_err(a.logits, b.logits))
    return Comparison(worst_err, agree / max(rows, 1), worst_prefix, bitwise, rows)


def _rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.numel() == 0:
        return 0.0
    if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
        return math.inf
    scale = b.abs().amax(dim=-1).clamp_min(1e-12)
    return float(((a - b).abs().amax(dim=-1) / scale).max())
