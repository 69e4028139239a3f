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
from polyinfer.traffic.workload import cap_trace

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
    engine.drain()  # with asynchronous steps, the step launched after the last token holds no live row
    return records


def _params(request: Request) -> SamplingParams:
    return SamplingParams(max_tokens=request.output_len, ignore_eos=True)
