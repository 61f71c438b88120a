"""A prediction file's answers gathered against the release's rows as the file is read (`AnswerRows`): each row is
checked when it comes, so a file is refused at its first bad row whatever follows it, and what is kept is bounded by
the release, not by the file: one answer per image row at most (a row past them, or given twice, is refused at
once) and at most `blank_cap` blank rows."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from evaluation.harnesses.predictions import PredictionsError, shown

#: Blank rows a file may have beyond one per release row (a converted file can have one after each row: "\r\r\n").
BLANK_SLACK = 16


class AnswerRows:
    """The answers of one file by row position (`index` = the row's position in `rows`, the release's `default`
    table). `unit` is how the file's messages name a row ("row", "line")."""

    def __init__(self, path: Path, rows: pa.Table, unit: str = "row") -> None:
        self.path = path
        self.unit = unit
        self._ids: list[str] = rows.column("sample_id").to_pylist()
        self._images = [digest is not None for digest in rows.column("image_sha256").to_pylist()]
        self.image_rows = sum(self._images)
        self._positions: dict[str, int] | None = None
        self.answers: dict[int, str] = {}
        #: rows the file marks as failed calls: unanswered, but checked like the others
        self.failed: set[int] = set()
        self.blanks = 0
        self.blank_cap = len(self._ids) + BLANK_SLACK

    def blank(self) -> None:
        """A blank row: skipped, but only so many (a file of blank lines is not read to its end)."""
        self.blanks += 1
        if self.blanks > self.blank_cap:
            raise PredictionsError(
                f"{self.path}: more than {self.blank_cap:,} blank {self.unit}s, more than the release has rows "
                f"({len(self._ids):,}); not a prediction file"
            )

    def position(self, where: str, sample_id: str) -> int:
        """The release row of `sample_id`, for a file keyed by it (no `index`)."""
        if self._positions is None:
            self._positions = {sample: i for i, sample in enumerate(self._ids)}
        if sample_id not in self._positions:
            raise PredictionsError(
                f"{self.path}: {where}: sample {shown(sample_id, 60)!r} is no row of the release; "
                "was it made from another release?"
            )
        return self._positions[sample_id]

    def add(self, where: str, label: str, index: int, answer: str | None, sample_id: str | None = None) -> None:
        """Row `index` (named `label` in messages, e.g. "index 3", with `where` the file's row or line) answered
        `answer`, or marked as a failed call (None); `sample_id`, when the file names one, must be the release's."""
        if index >= len(self._ids) or not self._images[index]:
            raise PredictionsError(
                f"{self.path}: {where}: {label} is no image row of the release ({self.image_rows:,} image rows of "
                f"{len(self._ids):,}); was it made from another export?"
            )
        if index in self.answers or index in self.failed:
            raise PredictionsError(f"{self.path}: {label} appears twice ({where})")
        if sample_id is not None and sample_id != self._ids[index]:
            raise PredictionsError(
                f"{self.path}: {where}: {label} is sample {shown(sample_id, 60)!r} in the file but "
                f"{self._ids[index]!r} in the release; was it made from another export?"
            )
        if answer is None:
            self.failed.add(index)
        else:
            self.answers[index] = answer

    def result(self) -> dict[str, str]:
        """`sample_id` -> answer; at least one image row answered (a partial run answers only some: scored on
        those, with its coverage)."""
        if self.image_rows and not self.answers:
            why = f" ({len(self.failed)} row(s) marked as failed calls)" if self.failed else ""
            raise PredictionsError(
                f"{self.path}: no prediction for any of the release's {self.image_rows} image rows{why}"
            )
        return {self._ids[index]: text for index, text in self.answers.items()}
