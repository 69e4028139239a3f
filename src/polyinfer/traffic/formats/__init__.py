"""Trace file formats, recognised by content (header row or JSON keys), never by file name.

A format is a module with `NAME`, `SIGNATURE` (how a person recognises it, for error messages),
`sniff(first_line) -> bool` and `read(path) -> Trace`. No two formats accept the same first line, so
detection is unambiguous; a file no format accepts is rejected with the list of what was expected.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from polyinfer.traffic.formats import azure, burstgpt, mooncake, native
from polyinfer.traffic.formats.rows import first_line
from polyinfer.traffic.trace import Trace, TraceError


@dataclass(frozen=True, slots=True)
class TraceFormat:
    name: str
    signature: str
    sniff: Callable[[str], bool]
    read: Callable[[Path], Trace]


FORMATS = {
    m.NAME: TraceFormat(m.NAME, m.SIGNATURE, m.sniff, m.read) for m in (azure, burstgpt, mooncake, native)
}


def detect_format(path: Path) -> TraceFormat:
    """The one format whose signature the file's first line matches, or a TraceError saying what was seen."""
    line = first_line(path)
    matches = [f for f in FORMATS.values() if f.sniff(line)]
    if len(matches) != 1:
        expected = "\n".join(f"  {f.name}: {f.signature}" for f in FORMATS.values())
        raise TraceError(
            f"{path}: unknown trace format (first line {line[:100]!r}); expected one of:\n{expected}"
        )
    return matches[0]


def load_trace(path: Path | str, format: str | None = None, model: str | None = None) -> Trace:
    """Read a trace file; `format` (a FORMATS key) is checked against the content, not trusted.

    `model` keeps only that model's rows and applies to BurstGPT, the one format that names models.
    """
    path = Path(path)
    detected = detect_format(path)
    if format is not None and format != detected.name:
        if format not in FORMATS:
            raise TraceError(f"unknown trace format {format!r}; known: {', '.join(FORMATS)}")
        raise TraceError(
            f"{path} is not a {format} trace ({FORMATS[format].signature}); it reads as {detected.name}"
        )
    if model is not None:
        if detected.name != burstgpt.NAME:
            raise TraceError(
                f"a model filter applies to BurstGPT traces only; {path} is a {detected.name} trace"
            )
        return burstgpt.read(path, model)
    return detected.read(path)
