"""Workloads by reference: a trace file or a synthetic preset's name, optionally cut down to a size a
small machine replays in seconds."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from polyinfer.traffic.formats import load_trace
from polyinfer.traffic.synth import PRESETS, synthesize
from polyinfer.traffic.trace import Request, Trace, TraceError


def load_workload(ref: str, max_requests: int | None = None, max_len: int | None = None) -> Trace:
    """A trace file (any format `load_trace` detects) or a synthetic preset's name, capped."""
    if Path(ref).exists():
        trace = load_trace(ref)
    elif ref in PRESETS:
        trace = synthesize(PRESETS[ref])
    else:
        raise TraceError(f"traffic {ref!r} is neither a trace file nor a preset ({', '.join(PRESETS)})")
    return cap_trace(trace, max_requests, max_len)


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


