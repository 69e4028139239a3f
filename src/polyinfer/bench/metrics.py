"""Serving metrics: what a trace replay measured, in the names users know from `vllm bench serve`.

- TTFT: arrival to first output token (queueing and prefill included);
- TPOT: (E2E - TTFT) / (output tokens - 1), per request with more than one output token;
- ITL: every gap between consecutive output tokens of a request, pooled over requests;
- E2E: arrival to last output token;
- goodput: requests per second that met every SLO given.

Distributions are summarised as mean, p50, p90 and p99 in milliseconds, percentiles by linear
interpolation (numpy's default, as vLLM computes them).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from polyinfer.errors import PolyinferError


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One replayed request; times in seconds from the start of the replay."""

    arrival_s: float
    input_len: int
    token_times_s: tuple[float, ...]  # when each output token was sampled

    def __post_init__(self) -> None:
        if not self.token_times_s:
            raise ValueError("a finished request has at least one output token")

    @property
    def output_len(self) -> int:
        return len(self.token_times_s)

    @property
    def ttft_s(self) -> float:
        return self.token_times_s[0] - self.arrival_s

    @property
    def e2e_s(self) -> float:
        return self.token_times_s[-1] - self.arrival_s

    @property
    def tpot_s(self) -> float | None:
        """None for a single-token reply, which has no time per output token."""
        if self.output_len < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_len - 1)

    @property
    def itl_s(self) -> tuple[float, ...]:
        return tuple(float(d) for d in np.diff(self.token_times_s))


@dataclass(frozen=True, slots=True)
class Distribution:
    """Mean and percentiles of a latency, in milliseconds; all 0 when nothing was observed."""

    mean_ms: float
    p50_ms: float
    p90_ms: float
    p99_ms: float

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Distribution:
        if not seconds:
            return cls(0.0, 0.0, 0.0, 0.0)
        ms = np.asarray(seconds, dtype=float) * 1e3
        p50, p90, p99 = np.percentile(ms, [50, 90, 99])
        return cls(float(ms.mean()), float(p50), float(p90), float(p99))


_SLO_ITEM = re.compile(r"^(ttft|tpot|e2e)=([0-9.]+)(ms|s)$")


@dataclass(frozen=True, slots=True)
class SLO:
    """Latency objectives a request must meet to count towards goodput; None leaves a metric free."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None

    @classmethod
    def parse(cls, text: str) -> SLO:
        """`"ttft=500ms,tpot=50ms"` (units ms or s; metrics ttft, tpot, e2e)."""
        limits: dict[str, float] = {}
        for item in filter(None, (part.strip() for part in text.split(","))):
            m = _SLO_ITEM.match(item)
            if m is None:
                raise PolyinferError(f"cannot read SLO {item!r}; write e.g. ttft=500ms,tpot=50ms,e2e=10s")
            name, value, unit = m.groups()
            limits[f"{name}_ms"] = float(value) * (1e3 if unit == "s" else 1.0)
        return cls(**limits)

    def met(self, record: RequestRecord) -> bool:
        # A single-token reply has no TPOT to miss, as in vLLM's goodput.
        observed = {"ttft_ms": record.ttft_s, "tpot_ms": record.tpot_s or 0.0, "e2e_ms": record.e2e_s}
        return all(
            limit is None or observed[name] * 1e3 <= limit for name, limit in dataclasses.asdict(self).items()
        )


@dataclass(frozen=True, slots=True)
class ServingMetrics:
    """The full tier's report on one replay."""

    requests: int
    duration_s: float  # replay start to the last token
    input_tokens: int
    output_tokens: int
    request_throughput: float  # completed requests / s
    output_tok_s: float
    total_tok_s: float  # prompt + output tokens / s
    ttft: Distribution
    tpot: Distribution
    itl: Distribution
    e2e: Distribution
    slo: SLO
    goodput_rps: float  # requests / s that met the SLO (all of them when no SLO is set)

    @classmethod
    def of(cls, records: Sequence[RequestRecord], slo: SLO | None = None) -> ServingMetrics:
        if not records:
            raise ValueError("no requests were replayed")
        slo = slo or SLO()
        duration = max(r.token_times_s[-1] for r in records)
        inputs = sum(r.input_len for r in records)
        outputs = sum(r.output_len for r in records)
        tpots = [t for r in records if (t := r.tpot_s) is not None]
        return cls(
            requests=len(records),
            duration_s=duration,
            input_tokens=inputs,
            output_tokens=outputs,
            request_throughput=len(records) / duration,
            output_tok_s=outputs / duration,
            total_tok_s=(inputs + outputs) / duration,
            ttft=Distribution.of([r.ttft_s for r in records]),
            tpot=Distribution.of(tpots),
            itl=Distribution.of([gap for r in records for gap in r.itl_s]),
            e2e=Distribution.of([r.e2e_s for r in records]),
            slo=slo,
            goodput_rps=sum(slo.met(r) for r in records) / duration,
        )

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
