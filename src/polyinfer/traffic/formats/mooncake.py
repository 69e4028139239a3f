"""Mooncake traces (FAST'25): JSON lines `{"timestamp", "input_length", "output_length", "hash_ids"}`.

`timestamp` is milliseconds since the trace start; each hash id names a 512-token prefix block, and equal
ids across requests mean an identical prefix up to that block (the trace's authors hash the prefix).
"""

from __future__ import annotations

import json
from pathlib import Path

from polyinfer.traffic.formats.rows import Line, TraceBuilder, jsonl_lines
from polyinfer.traffic.trace import Trace

NAME = "mooncake"
KEYS = ("timestamp", "input_length", "output_length")
SIGNATURE = 'JSON lines with "timestamp" (ms), "input_length", "output_length", "hash_ids"'
BLOCK_SIZE = 512


def sniff(first_line: str) -> bool:
    try:
        record = json.loads(first_line)
    except json.JSONDecodeError:
        return False
    return isinstance(record, dict) and set(KEYS) <= record.keys()


def read(path: Path) -> Trace:
    trace = TraceBuilder(path, NAME, block_size=BLOCK_SIZE)
    for line in jsonl_lines(path):
        trace.add(
            line,
            line.number_field("timestamp") / 1000.0,
            line.length_field("input_length"),
            line.length_field("output_length"),
            prefix_hashes=hash_list(line, "hash_ids"),
        )
    return trace.build()


def hash_list(line: Line, key: str) -> tuple[int | str, ...]:
    """An optional JSON list of block hashes (integers or strings)."""
    value = line.record.get(key, [])
    if not isinstance(value, list) or not all(
        isinstance(h, int | str) and not isinstance(h, bool) for h in value
    ):
        raise line.error(f"field {key!r} must be a list of integers or strings")
    return tuple(value)
