"""The full tier: replaying a trace completes every request at its length, and time-scaled replay
admits no request before it arrives."""

from __future__ import annotations

import pytest

from bench.workloads import small_trace
from polyinfer.bench.metrics import SLO
from polyinfer.bench.replay import ReplayOptions, replay, replay_records
from polyinfer.engine.config import EngineConfig
from polyinfer.engine.engine import Engine
from polyinfer.traffic.trace import Request, Trace, TraceError
from polyinfer.traffic.workload import cap_trace


def test_replay_as_fast_as_possible_completes_every_request(engine):
    trace = small_trace(7)
    seen = []
    m = replay(
        engine, trace, ReplayOptions(warmup_requests=2), progress=lambda done, n: seen.append((done, n))
    )
    assert m.requests == 7
    assert m.output_tokens == sum(r.output_len for r in trace.requests)
    assert m.input_tokens == sum(r.input_len for r in trace.requests)
    assert seen == [(i, 7) for i in range(1, 8)]
    assert not engine.has_work() and engine.blocks.num_free == engine.kv.num_blocks
    # All seven arrive at the start and four slots make the last three wait, so TTFTs spread.
    assert m.ttft.p99_ms > m.ttft.p50_ms > 0 and m.tpot.mean_ms > 0 and m.itl.mean_ms > 0


def test_replay_with_asynchronous_steps_completes_every_request(tiny):
    engine = Engine(tiny, EngineConfig(kv_cache_tokens=2048, max_num_seqs=4, async_steps=True))
    trace = small_trace(7)
    m = replay(engine, trace, ReplayOptions(warmup_requests=0))
    assert m.requests == 7 and m.output_tokens == sum(r.output_len for r in trace.requests)
    assert not engine.has_work() and engine.blocks.num_free == engine.kv.num_blocks
    assert m.ttft.p50_ms > 0 and m.itl.mean_ms > 0


def test_every_request_gets_its_output_length(engine):
    trace = small_trace(6)
    records = replay_records(engine, trace, ReplayOptions(warmup_requests=0))
    wanted = {r.input_len: r.output_len for r in trace.requests}  # input lengths are distinct
    assert {r.input_len: r.output_len for r in records} == wanted
    assert all(r.arrival_s == 0.0 for r in records)


def test_time_scaled_replay_respects_arrivals(engine):
    trace = small_trace(4, gap_s=0.2, output_len=2)
    records = replay_records(engine, trace, ReplayOptions(time_scale=0.5, warmup_requests=0))
    by_input = {r.input_len: r for r in records}
    arrivals = [by_input[r.input_len].arrival_s for r in trace.requests]
    assert arrivals == pytest.approx([0.0, 0.1, 0.2, 0.3])  # gaps of 0.2 s at time scale 0.5
    assert all(r.token_times_s[0] >= r.arrival_s for r in records)  # nothing runs before it arrives
    assert max(r.token_times_s[-1] for r in records) >= 0.3


def test_replay_fits_requests_to_the_engine(engine):
    long = Trace("long", "test", (Request(0.0, 3000, 50),))  # beyond tiny-llama's 2048-token context
    m = replay(engine, long, ReplayOptions(warmup_requests=0, slo=SLO(ttft_ms=1e9)))
    assert m.requests == 1 and m.input_tokens + m.output_tokens <= engine.max_model_len
    assert m.goodput_rps == m.request_throughput


def test_cap_trace_keeps_the_prefill_decode_mix():
    trace = Trace(
        "t", "test", (Request(0.0, 300, 100, prefix_hashes=tuple(range(19))), Request(1.0, 10, 5)), 16
    )
    first, second = cap_trace(trace, max_len=100).requests
    assert (first.input_len, first.output_len) == (75, 25)
    assert len(first.prefix_hashes) == 5  # ceil(75 / 16) blocks remain
    assert second == trace.requests[1]
    assert len(cap_trace(trace, max_requests=1)) == 1
    tiny = cap_trace(Trace("t", "test", (Request(0.0, 1, 500),)), max_len=2).requests[0]
    assert (tiny.input_len, tiny.output_len) == (1, 1)


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda t: cap_trace(t, max_len=1), "max_len"),
        (lambda t: cap_trace(t, max_requests=0), "max_requests"),
        (lambda t: ReplayOptions(time_scale=0), "time_scale"),
    ],
)
def test_bad_replay_settings_are_refused(make, needle):
    with pytest.raises(TraceError, match=needle):
        make(small_trace(2))
