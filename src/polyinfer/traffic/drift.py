"""Drift: has the traffic moved far enough from what an artifact was tuned for to search again?

Every component is a number in [0, 1] on the same footing, "how much of the workload changed":
- `input_len`, `output_len`: the two-sample Kolmogorov–Smirnov distance between the length
  distributions, i.e. the largest difference, over all lengths L, in the fraction of requests no
  longer than L. Computed from the profiles' 32-quantile sketches, so it resolves steps of 1/32;
- `prefix_reuse`: the absolute change in the fraction of prompt tokens a prefix cache could skip;
- `arrival_rate`, `burstiness`: the relative change |a - b| / max(a, b) in requests per second and in
  the inter-arrival CV.

The score is the largest component, not an average: one dimension moving is enough to make a tuned
configuration stale (batch sizes follow the rate, chunked-prefill sizes follow input lengths), and an
average would let four steady numbers hide it.

DRIFT_THRESHOLD = 0.2 means, in words: some length L that 50% of requests used to stay under is now
stayed under by 30% or 70% of them; or 20 points of prompt tokens changed cacheability; or the rate or
burstiness moved by a fifth. Smaller moves are within what the tuned batch and chunk sizes absorb.
Sampling noise alone stays below it once both workloads have a few hundred requests: for two samples
of n requests from one distribution the KS distance exceeds 1.63 * sqrt(2 / n) only 1% of the time,
which is 0.2 at n = 133.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from scipy.stats import ks_2samp

from polyinfer.traffic.profile import WorkloadProfile
from polyinfer.traffic.trace import Trace

DRIFT_THRESHOLD = 0.2


class DriftReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    score: float
    components: dict[str, float]
    threshold: float
    drifted: bool


def drifted(
    baseline: WorkloadProfile | Trace, current: WorkloadProfile | Trace, threshold: float = DRIFT_THRESHOLD
) -> DriftReport:
    """How far `current` traffic is from `baseline`; `drifted` when the score exceeds `threshold`."""
    a = baseline if isinstance(baseline, WorkloadProfile) else WorkloadProfile.of(baseline)
    b = current if isinstance(current, WorkloadProfile) else WorkloadProfile.of(current)
    components = {
        "input_len": float(ks_2samp(a.input_len.sketch, b.input_len.sketch).statistic),
        "output_len": float(ks_2samp(a.output_len.sketch, b.output_len.sketch).statistic),
        "prefix_reuse": abs(a.prefix_reuse - b.prefix_reuse),
        "arrival_rate": _relative_change(a.rate_rps, b.rate_rps),
        "burstiness": _relative_change(a.interarrival_cv, b.interarrival_cv),
    }
    score = max(components.values())
    return DriftReport(score=score, components=components, threshold=threshold, drifted=score > threshold)


def _relative_change(a: float, b: float) -> float:
    return abs(a - b) / max(a, b) if max(a, b) > 0 else 0.0
