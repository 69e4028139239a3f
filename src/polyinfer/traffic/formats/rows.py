"""Reading a trace file row by row so that every complaint names the file and the line.

Policies shared by all formats, so that no format reads a row differently from another:
- a length that is missing, not an integer or negative is an error; a zero length is a request that was
  never served (BurstGPT marks failures with 0 response tokens) and is skipped and counted;
- timestamps must not go backwards: every supported format is written in arrival order, so a step back
  means a corrupted or concatenated file, and sorting it silently would hide that.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from polyinfer.traffic.trace import Request, Trace, TraceError


def first_line(path: Path) -> str:
    """The first non-blank line of a text file (stripped), or a TraceError if there is none."""
    try:
        with path.open(encoding="utf-8-sig") as f:
            for line in f:
                if line.strip():
                    return line.strip()
    except OSError as e:
        raise TraceError(f"cannot read trace {path}: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise TraceError(f"{path} is not a text trace file (not UTF-8)") from e
    raise TraceError(f"trace {path} is empty")


@dataclass(frozen=True, slots=True)
class Line:
    """One record of a trace file, parsed into a mapping, with its position for error messages."""

    path: Path
    number: int
    record: Mapping[str, object]

    def error(self, what: str) -> TraceError:
        return TraceError(f"{self.path}:{self.number}: {what}")

    def field(self, key: str) -> object:
        value = self.record.get(key)
        if value is None or value == "":
            raise self.error(f"missing field {key!r}")
        return value

    def number_field(self, key: str) -> float:
        value = self.field(key)
        number = _as_float(value)
        if number is None:
            raise self.error(f"field {key!r} is not a number: {value!r}")
        return number

    def length_field(self, key: str) -> int:
        value = self.field(key)
        number = _as_float(value)
        if number is None or not number.is_integer():
            raise self.error(f"field {key!r} is not a whole number of tokens: {value!r}")
        if number < 0:
            raise self.error(f"field {key!r} is negative: {value!r}")
        return int(number)


def _as_float(value: object) -> float | None:
    """The finite number a JSON number or CSV cell spells, else None (JSON booleans are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def csv_lines(path: Path) -> Iterator[Line]:
    """Data rows of a CSV file with a header row; a row with the wrong number of cells is an error."""
    with path.open(encoding="utf-8-sig", newline="") as f:
        reader = csv.DictReader(f, skipinitialspace=True)
        width = len(reader.fieldnames or ())
        for row in reader:
            line = Line(path, reader.line_num, row)
            if None in row or len(row) != width or any(v is None for v in row.values()):
                raise line.error(f"expected {width} comma-separated columns as in the header")
            yield line


def jsonl_lines(path: Path) -> Iterator[Line]:
    """The JSON objects of a JSON-lines file; blank lines are allowed."""
    with path.open(encoding="utf-8-sig") as f:
        for number, text in enumerate(f, 1):
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as e:
                raise TraceError(
                    f"{path}:{number}: not valid JSON ({e.msg}); is the line truncated?"
                ) from None
            if not isinstance(record, dict):
                raise TraceError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
            yield Line(path, number, record)


class TraceBuilder:
    """Collects rows into a Trace, enforcing the shared policies above.

    With `rebase`, arrival times are made relative to the first kept row (for formats whose timestamps
    are wall-clock or start anywhere); otherwise they are kept as written.
    """

    def __init__(self, path: Path, format: str, block_size: int | None = None, rebase: bool = True) -> None:
        self.path, self.format, self.block_size = path, format, block_size
        self.requests: list[Request] = []
        self.skipped = 0
        self.origin: float | None = None if rebase else 0.0
        self.last = -math.inf

    def tick(self, line: Line, timestamp: float) -> None:
        """Advance the clock to a row's timestamp (also for rows that are filtered out)."""
        if timestamp < self.last:
            raise line.error(f"timestamp goes back {self.last - timestamp:.6g} s from the previous row's")
        self.last = timestamp

    def add(
        self,
        line: Line,
        timestamp: float,
        input_len: int,
        output_len: int,
        prefix_hashes: tuple[int | str, ...] = (),
        prompt_ids: tuple[int, ...] | None = None,
        session: str | None = None,
    ) -> None:
        self.tick(line, timestamp)
        if input_len == 0 or output_len == 0:
            self.skipped += 1
            return
        if self.block_size is not None and len(prefix_hashes) > math.ceil(input_len / self.block_size):
            raise line.error(
                f"{len(prefix_hashes)} prefix blocks of {self.block_size} tokens exceed input length {input_len}"
            )
        if self.origin is None:
            self.origin = timestamp
        try:
            request = Request(
                timestamp - self.origin, input_len, output_len, prefix_hashes, prompt_ids, session
            )
        except TraceError as e:
            raise line.error(str(e)) from None
        self.requests.append(request)

    def build(self, name: str | None = None) -> Trace:
        if not self.requests:
            raise TraceError(f"trace {self.path} holds no servable requests ({self.skipped} rows skipped)")
        return Trace(name or self.path.stem, self.format, tuple(self.requests), self.block_size, self.skipped)
