"""polyinfer's own trace format, the one the server records: JSON lines after a versioned header.

    {"polyinfer_trace": 1, "name": "prod-2026-11-30", "block_size": 16}
    {"arrival_s": 0.0, "input_len": 612, "output_len": 180, "prefix_hashes": [...], "session": "c41"}
    {"arrival_s": 0.37, "input_len": 20, "output_len": 9, "prompt_ids": [...]}

`arrival_s` is seconds since the recording started, written in arrival order and read back unchanged.
`prefix_hashes`, `prompt_ids` and `session` are optional; a row with `prompt_ids` but no hashes gets
its hashes computed from the ids (with the header's block_size), so recordings may store either.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any

from polyinfer.traffic.formats.mooncake import hash_list
from polyinfer.traffic.formats.rows import Line, TraceBuilder, jsonl_lines
from polyinfer.traffic.trace import Request, Trace, TraceError, block_hashes

NAME = "polyinfer"
VERSION = 1
SIGNATURE = f'JSON lines after a header {{"polyinfer_trace": {VERSION}, ...}}'


def sniff(first_line: str) -> bool:
    try:
        header = json.loads(first_line)
    except json.JSONDecodeError:
        return False
    return isinstance(header, dict) and "polyinfer_trace" in header


def read(path: Path) -> Trace:
    lines = jsonl_lines(path)
    header = next(lines)  # the caller sniffed a header, so there is one
    if header.record.get("polyinfer_trace") != VERSION:
        raise header.error(
            f"trace version {header.record.get('polyinfer_trace')!r} is not {VERSION}; "
            "was it written by a newer polyinfer?"
        )
    block_size = header.length_field("block_size") if header.record.get("block_size") is not None else None
    trace = TraceBuilder(path, NAME, block_size=block_size, rebase=False)
    for line in lines:
        prompt_ids = _prompt_ids(line)
        hashes = hash_list(line, "prefix_hashes")
        if prompt_ids and not hashes and block_size:
            hashes = block_hashes(prompt_ids, block_size)
        session = line.record.get("session")
        if session is not None and not isinstance(session, str):
            raise line.error(f"field 'session' must be a string, got {session!r}")
        trace.add(
            line,
            line.number_field("arrival_s"),
            line.length_field("input_len"),
            line.length_field("output_len"),
            hashes,
            prompt_ids,
            session,
        )
    return trace.build(str(header.record.get("name") or path.stem))


def _prompt_ids(line: Line) -> tuple[int, ...] | None:
    ids = line.record.get("prompt_ids")
    if ids is None:
        return None
    if not isinstance(ids, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids
    ):
        raise line.error("field 'prompt_ids' must be a list of non-negative integers")
    return tuple(ids)


class TraceWriter:
    """Appends requests to a new polyinfer trace file, one flushed line each, in arrival order.

    A server records through this while it serves; a crash loses at most the line being written, and
    the reader reports that truncated line by number.
    """

    def __init__(self, path: Path, name: str, block_size: int | None = None) -> None:
        self.path = path
        self.last = 0.0
        self._file: IO[str] = path.open("w", encoding="utf-8")
        self._emit({"polyinfer_trace": VERSION, "name": name, "block_size": block_size})

    def write(self, request: Request) -> None:
        if request.arrival_s < self.last:
            raise TraceError(
                f"{self.path}: request at {request.arrival_s}s recorded after one at {self.last}s"
            )
        self.last = request.arrival_s
        row: dict[str, Any] = {
            "arrival_s": request.arrival_s,
            "input_len": request.input_len,
            "output_len": request.output_len,
        }
        if request.prefix_hashes:
            row["prefix_hashes"] = list(request.prefix_hashes)
        if request.prompt_ids is not None:
            row["prompt_ids"] = list(request.prompt_ids)
        if request.session is not None:
            row["session"] = request.session
        self._emit(row)

    def _emit(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_trace(trace: Trace, path: Path) -> None:
    """Write `trace` as a polyinfer trace that `load_trace` reads back equal (format aside)."""
    with TraceWriter(path, trace.name, trace.block_size) as writer:
        for request in trace.requests:
            writer.write(request)
