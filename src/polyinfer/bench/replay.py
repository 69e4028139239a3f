"""The full tier: replay a trace through the engine's scheduler and measure serving metrics.

Two clocks are possible. As fast as possible (`time_scale=None`), every request arrives at the start,
in trace order, and the engine works through them at its batch limits: this measures capacity. Time
scaled, a request arrives at `arrival_s * time_scale` seconds after the start (0.5 replays the trace at
twice its rate); the engine steps while it has work and sleeps until the next arrival when it has none.
A request's TTFT counts from its arrival, so time spent waiting behind a busy step is included.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from polyinfer.bench.metrics import SLO, RequestRecord, ServingMetrics
from polyinfer.engine.engine import Engine
from polyinfer.engine.sequence import SamplingParams, Sequence
from polyinfer.traffic.trace import Request, Trace, TraceError

Progress = Callable[[int, int], None]  # (requests finished, requests in the replay)


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    time_scale: float | None = None  # None: as fast as possible
    warmup_requests: int = 2  # replayed untimed first, so one-time costs (compiles, graphs) stay out
    slo: SLO = dataclasses.field(default_factory=SLO)

    def __post_init__(self) -> None:
        if self.time_scale is not None and self.time_scale <= 0:
            raise TraceError(f"time_scale must be > 0, got {self.time_scale}")
        if self.warmup_requests < 0:
            raise TraceError(f"warmup_requests must be >= 0, got {self.warmup_requests}")


def cap_trace(trace: Trace, max_requests: int | None = None, max_len: int | None = None) -> Trace:
    """The first `max_requests` requests, each longer than `max_len` prompt + output tokens shrunk to it.

    A request is scaled down in proportion, so the workload keeps its mix of prefill and decode tokens
    (each side keeps at least one token); recorded ids and prefix hashes are cut to the shorter prompt.
    """
    if max_requests is not None and max_requests < 1:
        raise TraceError(f"max_requests must be >= 1, got {max_requests}")
    if max_len is not None and max_len < 2:
        raise TraceError(f"max_len must be >= 2 (one prompt and one output token), got {max_len}")
    requests = trace.requests[:max_requests]
    if max_len is not None:
        requests = tuple(_cap(r, max_len, trace.block_size) for r in requests)
    return dataclasses.replace(trace, requests=requests)


def _cap(r: Request, max_len: int, block_size: int | None) -> Request:
    if r.input_len + r.output_len <= max_len:
        return r
    prompt = min(max(1, r.input_len * max_len // (r.input_len + r.output_len)), max_len - 1)
    output = max_len - prompt
    blocks = -(-prompt // block_size) if block_size else 0
    ids = r.prompt_ids[:prompt] if r.prompt_ids is not None else None
    return dataclasses.replace(
        r, input_len=prompt, output_len=output, prefix_hashes=r.prefix_hashes[:blocks], prompt_ids=ids
    )


def replay(
    engine: Engine, trace: Trace, options: ReplayOptions | None = None, progress: Progress | None = None
) -> ServingMetrics:
    """Replay `trace` through `engine` (its current candidate) to completion and measure it.

    Module-level so that an EngineProcess can run it.
    """
    options = options or ReplayOptions()
    return ServingMetrics.of(replay_records(engine, trace, options, progress), options.slo)


def replay_records(
    engine: Engine, trace: Trace, options: ReplayOptions, progress: Progress | None = None
) -> list[RequestRecord]:
    """Each request's arrival and token times, in the order they finished.

    Requests longer than the engine's context or KV pool are capped to fit first (see `cap_trace`);
    the engine must be idle on entry.
    """
    capacity = min(engine.max_model_len, engine.kv.num_blocks * engine.kv.block_size)
    trace = cap_trace(trace, max_len=capacity)
    vocab = engine.spec.vocab_size
    prompts = [trace.prompt_tokens(r, vocab) for r in trace.requests]
    warm = min(options.warmup_requests, len(prompts))
    if warm:
        engine.generate(prompts[:warm], [_params(r) for r in trace.requests[:warm]])
    scale = options.time_scale
    pending = deque(zip(trace.requests, prompts, strict=True))
    first = trace.requests[0].arrival_s
    running: dict[int, tuple[Request, Sequence]] = {}
    records: list[RequestRecord] = []
    start = time.perf_counter()

    def due(request: Request) -> float:
        return start if scale is None else start + (request.arrival_s - first) * scale

    while pending or running:
        now = time.perf_counter()
        while pending and due(pending[0][0]) <= now:
            request, ids = pending.popleft()
            seq = engine.add_request(ids, _params(request), arrival=due(request))
            running[seq.id] = (request, seq)
        if not engine.has_work():
            time.sleep(max(0.0, due(pending[0][0]) - now))
            continue
        for finished in engine.step():
            request, seq = running.pop(finished.id)
            records.append(
                RequestRecord(
                    seq.arrival - start, request.input_len, tuple(t - start for t in seq.token_times)
                )
            )
            if progress is not None:
                progress(len(records), len(trace))
    return records


def _params(request: Request) -> SamplingParams:
    return SamplingParams(max_tokens=request.output_len, ignore_eos=True)
