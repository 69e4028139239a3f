"""Timer: repeated timing of a device function with warm-up; CUDA events on GPU, perf_counter on CPU.

A sample spans at least `min_sample_s`: short calls (a graphed decode step of a few layers takes
~0.2 ms on an H200) are run back to back several times per sample, and the sample reports the time per
call. Single sub-millisecond calls carry the jitter of the timer and of the launch queue, which would
otherwise dominate the spread the statistics see.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable

import torch

# Long enough that event resolution (~0.5 us) and per-launch jitter stay well under 1% of a sample.
CUDA_MIN_SAMPLE_S = 2e-3


def calls_per_sample(fn: Callable[[], object], device: torch.device, min_sample_s: float) -> int:
    """How many back-to-back calls of `fn` make one sample of at least `min_sample_s` (one call timed)."""
    if min_sample_s <= 0:
        return 1
    t = _time_group(fn, device, 1)
    return max(1, min(1000, math.ceil(min_sample_s / max(t, 1e-7))))


def time_calls(
    fn: Callable[[], object], device: torch.device, reps: int, warmup: int, min_sample_s: float | None = None
) -> list[float]:
    """Seconds per call of `fn` in each of `reps` samples, after `warmup` untimed calls. A sample is
    `calls_per_sample` calls in a row; `min_sample_s` defaults to CUDA_MIN_SAMPLE_S on CUDA, 0 on CPU
    (whose calls run long enough for perf_counter, and one at a time keeps CPU benchmarks short)."""
    for _ in range(warmup):
        fn()
    if min_sample_s is None:
        min_sample_s = CUDA_MIN_SAMPLE_S if device.type == "cuda" else 0.0
    k = calls_per_sample(fn, device, min_sample_s)
    collecting = gc.isenabled()
    gc.disable()  # as timeit does: a collection's pause belongs to no candidate
    try:
        if device.type == "cuda":
            return _time_groups_cuda(fn, device, k, reps)
        return [_time_group(fn, device, k) / k for _ in range(reps)]
    finally:
        if collecting:
            gc.enable()


def _time_group(fn: Callable[[], object], device: torch.device, k: int) -> float:
    if device.type == "cuda":
        return _time_groups_cuda(fn, device, k, 1)[0] * k
    t0 = time.perf_counter()
    for _ in range(k):
        fn()
    return time.perf_counter() - t0


def _time_groups_cuda(fn: Callable[[], object], device: torch.device, k: int, reps: int) -> list[float]:
    """All samples are queued before one synchronize, so the host never stalls the device between them."""
    torch.cuda.synchronize(device)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in events:
        start.record()
        for _ in range(k):
            fn()
        end.record()
    torch.cuda.synchronize(device)
    return [start.elapsed_time(end) / 1e3 / k for start, end in events]
