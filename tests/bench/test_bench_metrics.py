"""Serving metrics on hand-made timings: TTFT/TPOT/ITL/E2E, percentiles, throughput and goodput."""

from __future__ import annotations

import pytest

from polyinfer.bench.metrics import SLO, Distribution, RequestRecord, ServingMetrics
from polyinfer.errors import PolyinferError

# Arrivals and token times in seconds from the start of the replay.
RECORDS = [
    RequestRecord(0.0, 10, (0.1, 0.15, 0.25)),  # TTFT 100, TPOT 75, ITL 50 100, E2E 250
    RequestRecord(0.0, 20, (0.3, 0.32)),  # TTFT 300, TPOT 20, ITL 20, E2E 320
    RequestRecord(0.5, 30, (0.6,)),  # TTFT 100, no TPOT, E2E 100
    RequestRecord(0.5, 40, (0.9, 1.0, 1.1, 1.2, 2.0)),  # TTFT 400, TPOT 275, ITL 100 100 100 800, E2E 1500
]


def test_per_request_latencies():
    r = RECORDS[0]
    assert r.output_len == 3
    assert r.ttft_s == pytest.approx(0.1)
    assert r.e2e_s == pytest.approx(0.25)
    assert r.tpot_s == pytest.approx(0.075)
    assert r.itl_s == pytest.approx((0.05, 0.1))
    assert RECORDS[2].tpot_s is None and RECORDS[2].itl_s == ()


def test_distribution_uses_linear_interpolation():
    d = Distribution.of([0.1, 0.3, 0.1, 0.4])  # sorted ms: 100 100 300 400
    assert d.mean_ms == pytest.approx(225)
    assert d.p50_ms == pytest.approx(200)  # halfway between 100 and 300
    assert d.p90_ms == pytest.approx(370)  # rank 2.7: 300 + 0.7 * 100
    assert d.p99_ms == pytest.approx(397)
    assert Distribution.of([]) == Distribution(0.0, 0.0, 0.0, 0.0)


def test_serving_metrics_on_hand_made_timings():
    m = ServingMetrics.of(RECORDS)
    assert m.requests == 4
    assert m.duration_s == pytest.approx(2.0)  # the last token of the last request
    assert (m.input_tokens, m.output_tokens) == (100, 11)
    assert m.request_throughput == pytest.approx(2.0)
    assert m.output_tok_s == pytest.approx(5.5)
    assert m.total_tok_s == pytest.approx(55.5)
    assert m.ttft.mean_ms == pytest.approx(225) and m.ttft.p50_ms == pytest.approx(200)
    # TPOT over the three multi-token requests: 20, 75, 275 ms.
    assert m.tpot.mean_ms == pytest.approx(370 / 3)
    assert m.tpot.p50_ms == pytest.approx(75)
    assert m.tpot.p90_ms == pytest.approx(75 + 0.8 * 200)
    # ITL pools all gaps: 20 50 100 100 100 100 800 ms.
    assert m.itl.mean_ms == pytest.approx(1270 / 7)
    assert m.itl.p50_ms == pytest.approx(100)
    assert m.itl.p99_ms == pytest.approx(100 + 0.94 * 700)
    assert m.e2e.p50_ms == pytest.approx((250 + 320) / 2)
    assert m.goodput_rps == m.request_throughput  # no SLO: every request counts


def test_goodput_counts_requests_meeting_every_slo():
    m = ServingMetrics.of(RECORDS, SLO.parse("ttft=300ms, tpot=100ms"))
    # Request 1 (TTFT 100, TPOT 75), 2 (300, 20) and 3 (100, single token) qualify; 4 misses both.
    assert m.goodput_rps == pytest.approx(3 / 2.0)
    assert ServingMetrics.of(RECORDS, SLO(e2e_ms=260)).goodput_rps == pytest.approx(2 / 2.0)


def test_slo_parsing():
    assert SLO.parse("ttft=0.5s,tpot=50ms,e2e=10s") == SLO(500.0, 50.0, 10_000.0)
    assert SLO.parse("") == SLO()
    for bad in ("ttft=fast", "latency=5ms", "ttft=5"):
        with pytest.raises(PolyinferError, match="cannot read SLO"):
            SLO.parse(bad)


def test_json_is_plain_data():
    data = ServingMetrics.of(RECORDS).to_json()
    assert data["ttft"]["p50_ms"] == pytest.approx(200) and data["slo"]["ttft_ms"] is None
