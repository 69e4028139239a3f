"""Tier fidelity: does the fast tier rank candidates the way the full tier does?

Over a set of candidates, the Spearman rank correlation between the fast tier's predicted output tok/s
and the full tier's measured output tok/s. Near 1, screening on the fast tier keeps the right
candidates; well below, the fast tier lies about this model, traffic and hardware, and the search
should lean on the full tier.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from polyinfer.errors import PolyinferError


@dataclass(frozen=True, slots=True)
class FidelityRow:
    candidate: str
    predicted_tok_s: float  # fast tier
    measured_tok_s: float  # full tier


@dataclass(frozen=True, slots=True)
class FidelityReport:
    rows: tuple[FidelityRow, ...]
    spearman: float  # nan when either tier scores every candidate the same
    p_value: float

    @classmethod
    def of(cls, rows: Sequence[FidelityRow]) -> FidelityReport:
        """Correlate the two tiers' rankings of the candidates in `rows` (three or more)."""
        if len(rows) < 3:
            raise PolyinferError(f"tier fidelity needs at least 3 candidates to rank, got {len(rows)}")
        predicted = [r.predicted_tok_s for r in rows]
        measured = [r.measured_tok_s for r in rows]
        if len(set(predicted)) == 1 or len(set(measured)) == 1:
            return cls(tuple(rows), math.nan, math.nan)
        from scipy import stats  # here, not at the top: it adds a second to every CLI start

        result = stats.spearmanr(predicted, measured)
        return cls(tuple(rows), float(result.statistic), float(result.pvalue))

    def to_json(self) -> dict[str, Any]:
        # JSON has no NaN; an undefined correlation is null.
        out = dataclasses.asdict(self)
        out.update(
            {
                k: None if math.isnan(v) else v
                for k, v in (("spearman", self.spearman), ("p_value", self.p_value))
            }
        )
        return out
