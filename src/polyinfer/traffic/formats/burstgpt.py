"""BurstGPT traces: CSV `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`.

Timestamp is seconds (float) from the start of the collection; arrivals become seconds since the first
kept row. Rows with 0 response tokens are the failures the BurstGPT authors mark that way; like every
zero-length row they are skipped and counted in `Trace.skipped`, so a file with failures and its
`_without_fails` twin yield the same requests. `model` keeps only rows of that Model (e.g. "ChatGPT").
"""

from __future__ import annotations

import csv
from pathlib import Path

from polyinfer.traffic.formats.rows import TraceBuilder, csv_lines
from polyinfer.traffic.trace import Trace, TraceError

NAME = "burstgpt"
COLUMNS = ("Timestamp", "Model", "Request tokens", "Response tokens")
SIGNATURE = "CSV with header Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"


def sniff(first_line: str) -> bool:
    return set(COLUMNS) <= {c.strip() for c in next(csv.reader([first_line]), [])}


def read(path: Path, model: str | None = None) -> Trace:
    trace = TraceBuilder(path, NAME)
    models: set[str] = set()
    for line in csv_lines(path):
        timestamp = line.number_field("Timestamp")
        row_model = str(line.field("Model"))
        models.add(row_model)
        if model is not None and row_model != model:
            trace.tick(line, timestamp)
            continue
        trace.add(line, timestamp, line.length_field("Request tokens"), line.length_field("Response tokens"))
    if model is not None and model not in models:
        raise TraceError(f"{path} has no rows of model {model!r}; its models: {', '.join(sorted(models))}")
    return trace.build(f"{path.stem}-{model}" if model else None)
