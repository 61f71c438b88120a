"""A CSV or TSV prediction file's rows, streamed (`csv_rows`): the csv module reads the file a line at a time, a line
at most `MAX_LINE_CHARS` long and a field at most `MAX_FIELD_CHARS` (csv's own `field_size_limit`, set for the read
and put back after), so a row costs at most about an answer's cap, whatever the file holds. A row past either limit
is `OversizedRow`, with the cells its start holds, for the reader's message to name it."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from evaluation.harnesses.predictions import MAX_ANSWER_BYTES, PredictionsError
from evaluation.harnesses.predictions.text import LineTooLong, open_text, read_line

#: A field of more characters than an answer's byte cap is over that cap (a character is at least one byte); one at
#: most this long is read and left to `check_answer`, which measures its bytes.
MAX_FIELD_CHARS = MAX_ANSWER_BYTES
#: A line holds an answer at its cap and the row's other cells (the prompt, the labels: a few hundred characters).
MAX_LINE_CHARS = MAX_ANSWER_BYTES + (64 << 10)
#: How much of an oversized row's first line is parsed again to name it (its `index` and `sample_id` come first).
_START_CHARS = 4096


class OversizedRow(Exception):
    """Row `row` (1 = the header) has a field or a line longer than any answer: `start`, its first complete cells."""

    def __init__(self, row: int, start: list[str]) -> None:
        super().__init__(row)
        self.row = row
        self.start = start


class _Lines:
    """The stream's lines for csv.reader, bounded, each row's first line kept (its start) for `OversizedRow`."""

    def __init__(self, stream: io.TextIOWrapper) -> None:
        self.stream = stream
        self.first = ""
        self.row_begins = True

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> str:
        try:
            line = read_line(self.stream, MAX_LINE_CHARS, _START_CHARS)
        except LineTooLong as exc:
            if self.row_begins:
                self.first = exc.start
            raise
        if not line:
            raise StopIteration
        if self.row_begins:
            self.first, self.row_begins = line[:_START_CHARS], False
        return line


@contextmanager
def csv_rows(path: Path, delimiter: str) -> Iterator[Iterator[list[str]]]:
    """The file's rows as lists of cells, the header first; PredictionsError when it cannot be read as CSV."""
    with open_text(path, "prediction file", encoding="utf-8-sig", newline="") as stream:
        limit = csv.field_size_limit(MAX_FIELD_CHARS)
        try:
            yield _rows(path, stream, delimiter)
        finally:
            csv.field_size_limit(limit)


def _rows(path: Path, stream: io.TextIOWrapper, delimiter: str) -> Iterator[list[str]]:
    lines = _Lines(stream)
    reader = csv.reader(lines, delimiter=delimiter)
    row = 0
    while True:
        lines.row_begins = True
        try:
            values = next(reader)
        except StopIteration:
            return
        except LineTooLong:
            raise OversizedRow(row + 1, _start(lines.first, delimiter)) from None
        except csv.Error as exc:
            if "field larger than field limit" in str(exc):
                raise OversizedRow(row + 1, _start(lines.first, delimiter)) from None
            kind = "TSV" if delimiter == "\t" else "CSV"
            raise PredictionsError(f"{path}: row {row + 1}: not a readable {kind} file ({exc})") from None
        row += 1
        yield values


def _start(first: str, delimiter: str) -> list[str]:
    """The complete cells at the start of a row's first line (the last one read may be cut short)."""
    try:
        cells = next(csv.reader([first[:_START_CHARS]], delimiter=delimiter))
    except (csv.Error, StopIteration):
        return []
    return cells[:-1]
