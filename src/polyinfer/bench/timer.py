"""Timer: repeated timing of a device function with warm-up; CUDA events on GPU, perf_counter on CPU."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def time_calls(fn: Callable[[], object], device: torch.device, reps: int, warmup: int) -> list[float]:
    """Seconds for each of `reps` calls of `fn`, after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)
        ]
        for start, end in events:
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize(device)
        return [start.elapsed_time(end) / 1e3 for start, end in events]
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out
