"""Test workloads for the measurement tests: slowed candidates and small traces."""

from __future__ import annotations

from polyinfer.engine.candidate import Candidate
from polyinfer.traffic.trace import Request, Trace


def sleepy(ms: float) -> Candidate:
    """The reference forward pass, slowed by `ms` milliseconds per call."""
    source = Candidate.reference().source + (
        "\n\nimport time\n\n_reference_build = build\n\n\ndef build(ctx):\n"
        "    forward = _reference_build(ctx)\n\n    def slow(batch):\n"
        f"        time.sleep({ms} / 1e3)\n        return forward(batch)\n\n    return slow\n"
    )
    return Candidate(source, name=f"sleep{ms:g}ms")


def slow_start(ms: float) -> Candidate:
    """The reference forward pass, whose first call at each batch size takes `ms` milliseconds longer
    (as a CUDA graph captured per batch bucket on first use would)."""
    source = Candidate.reference().source + (
        "\n\nimport time\n\n_reference_build = build\n\n\ndef build(ctx):\n"
        "    forward, seen = _reference_build(ctx), set()\n\n    def slow_first(batch):\n"
        f"        if batch.num_seqs not in seen:\n            seen.add(batch.num_seqs)\n"
        f"            time.sleep({ms} / 1e3)\n"
        "        return forward(batch)\n\n    return slow_first\n"
    )
    return Candidate(source, name=f"slowstart{ms:g}ms")


def small_trace(n: int = 6, gap_s: float = 0.0, input_len: int = 24, output_len: int = 6) -> Trace:
    """`n` requests `gap_s` apart; lengths vary a little so the replay has mixed batches."""
    requests = tuple(Request(i * gap_s, input_len + i, output_len + i % 3) for i in range(n))
    return Trace("small", "test", requests)
