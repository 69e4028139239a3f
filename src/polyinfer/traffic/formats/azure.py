"""Azure LLM inference traces (2023 Splitwise, 2024 DynamoLLM): CSV `TIMESTAMP,ContextTokens,GeneratedTokens`.

TIMESTAMP is a wall-clock datetime such as `2023-11-16 18:15:46.6805900` (seven fractional digits,
optionally a UTC offset); arrivals become seconds since the first kept row. Python keeps microseconds,
so the seventh digit (100 ns) is dropped, far below any arrival gap that matters to a server.
"""

from __future__ import annotations

import csv
from datetime import UTC, datetime
from pathlib import Path

from polyinfer.traffic.formats.rows import Line, TraceBuilder, csv_lines
from polyinfer.traffic.trace import Trace

NAME = "azure"
COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
SIGNATURE = f"CSV with header {','.join(COLUMNS)}"


def sniff(first_line: str) -> bool:
    return set(COLUMNS) <= {c.strip() for c in next(csv.reader([first_line]), [])}


def read(path: Path) -> Trace:
    trace = TraceBuilder(path, NAME)
    for line in csv_lines(path):
        trace.add(
            line, _seconds(line), line.length_field("ContextTokens"), line.length_field("GeneratedTokens")
        )
    return trace.build()


def _seconds(line: Line) -> float:
    text = str(line.field("TIMESTAMP")).strip()
    try:
        # fromisoformat in 3.11 accepts the seven fractional digits (it truncates to microseconds).
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise line.error(f"TIMESTAMP {text!r} is not a datetime like 2023-11-16 18:15:46.6805900") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()
