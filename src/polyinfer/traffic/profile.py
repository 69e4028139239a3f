"""WorkloadProfile: the numbers about a trace that tuning depends on, small enough to store in an artifact.

It keeps 32 quantiles of each length distribution, so drift between two workloads can be computed
from their profiles alone, long after the traces are gone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from polyinfer.traffic.formats import load_trace
from polyinfer.traffic.formats.rows import first_line
from polyinfer.traffic.trace import Trace, TraceError

SKETCH_SIZE = 32
# Midpoint probabilities: quantile i stands for the 1/32 of requests around it, so the sketch is an
# equal-weight sample of the distribution that a two-sample KS test can compare directly.
SKETCH_PROBS = (np.arange(SKETCH_SIZE) + 0.5) / SKETCH_SIZE


class LengthStats(BaseModel):
    """Summary of a token-length distribution; `sketch` holds its quantiles at SKETCH_PROBS."""

    model_config = ConfigDict(frozen=True)

    mean: float
    p50: float
    p90: float
    p99: float
    max: int
    sketch: tuple[float, ...]

    @classmethod
    def of(cls, values: np.ndarray) -> LengthStats:
        p50, p90, p99 = np.percentile(values, [50, 90, 99])
        return cls(
            mean=float(values.mean()),
            p50=float(p50),
            p90=float(p90),
            p99=float(p99),
            max=int(values.max()),
            sketch=tuple(float(q) for q in np.quantile(values, SKETCH_PROBS)),
        )


class WorkloadProfile(BaseModel):
    """What a workload looks like to a server. Rates are 0 for a trace that spans no time.

    - `rate_rps`: arrivals per second, (requests - 1) / duration (gaps over the time they span);
    - `interarrival_cv`: standard deviation / mean of the gaps between arrivals (1 for Poisson
      traffic, above 1 bursty, 0 evenly spaced);
    - `prefix_reuse`: fraction of all prompt tokens lying in prefix blocks that an earlier request
      already sent, i.e. what a prefix cache of unlimited size could skip;
    - `offered_*_tok_s`: prompt and output tokens per second the traffic asks for, the load a server
      must sustain to keep up (a Little's-law concurrency follows once a per-token time is known).
    """

    model_config = ConfigDict(frozen=True)

    polyinfer_profile: Literal[1] = 1
    name: str
    source_format: str
    requests: int
    sessions: int
    duration_s: float
    rate_rps: float
    interarrival_cv: float
    input_len: LengthStats
    output_len: LengthStats
    prefix_reuse: float
    offered_input_tok_s: float
    offered_output_tok_s: float

    @classmethod
    def of(cls, trace: Trace) -> WorkloadProfile:
        arrivals = np.array([r.arrival_s for r in trace.requests])
        inputs = np.array([r.input_len for r in trace.requests])
        outputs = np.array([r.output_len for r in trace.requests])
        gaps = np.diff(arrivals)
        duration = trace.duration_s
        per_second = 1.0 / duration if duration > 0 else 0.0
        return cls(
            name=trace.name,
            source_format=trace.format,
            requests=len(trace),
            sessions=len({r.session for r in trace.requests if r.session is not None}),
            duration_s=duration,
            rate_rps=(len(trace) - 1) * per_second,
            interarrival_cv=float(gaps.std() / gaps.mean()) if gaps.size and gaps.mean() > 0 else 0.0,
            input_len=LengthStats.of(inputs),
            output_len=LengthStats.of(outputs),
            prefix_reuse=_prefix_reuse(trace),
            offered_input_tok_s=float(inputs.sum()) * per_second,
            offered_output_tok_s=float(outputs.sum()) * per_second,
        )

    def to_json(self) -> str:
        """One line of JSON; `from_json` and `load_profile` read it back."""
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> WorkloadProfile:
        try:
            return cls.model_validate_json(text)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "top level"
            raise TraceError(f"not a valid workload profile: {first['msg']} ({where})") from None


def _prefix_reuse(trace: Trace) -> float:
    if trace.block_size is None:
        return 0.0
    seen: set[int | str] = set()
    reused = 0
    for r in trace.requests:
        for i, h in enumerate(r.prefix_hashes):
            if h in seen:
                reused += min(trace.block_size, r.input_len - i * trace.block_size)
        seen.update(r.prefix_hashes)
    return reused / sum(r.input_len for r in trace.requests)


def load_profile(path: Path | str) -> WorkloadProfile:
    """The profile saved at `path` (by `to_json`), or the profile of the trace file at `path`."""
    path = Path(path)
    head = first_line(path)
    try:
        saved = json.loads(head)
    except json.JSONDecodeError:
        saved = None
    if isinstance(saved, dict) and "polyinfer_profile" in saved:
        try:
            return WorkloadProfile.from_json(head)
        except TraceError as e:
            raise TraceError(f"{path}: {e}") from None
    return WorkloadProfile.of(load_trace(path))
