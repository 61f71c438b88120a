"""VLMEvalKit's prediction file of the exported MixCuBe TSV (`evaluation.harnesses.exports.vlmevalkit`):
`<model>_MixCuBe.xlsx`
(its default), or `.tsv` / `.csv` (`PRED_FORMAT=tsv`, or converted), with the data's columns (the image dropped) and
`prediction`. `index` is the row's position in the release's `default` table; `sample_id`, when the file kept it,
is checked against the release. A `.tsv` or `.csv` is streamed (`evaluation.harnesses.predictions.delimited`) and
refused at its first bad row; a header that names `index`, `prediction` or `sample_id` twice is refused (which to
score?).

The xlsx is read by `data.xlsx` (the standard library, streamed and bounded: `MAX_XLSX_CELLS`, no column past XFD
or the header's width; DTDs refused).

The same reader takes a plain table of predictions (people's own scripts): `sample_id` and `prediction`, as CSV or
TSV. The result names the file by what it is (`source_label`): VLMEvalKit's own file only for what VLMEvalKit
writes (an xlsx or tsv keyed by `index`; it never writes CSV), otherwise a CSV, TSV or xlsx table."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa

from data.xlsx import XlsxError, XlsxLimits, sheet_rows
from evaluation.harnesses.predictions import (
    MAX_ANSWER_BYTES,
    MAX_PREDICTION_BYTES,
    PredictionsError,
    check_answer,
    read_prediction_bytes,
)
from evaluation.harnesses.predictions import shown as _shown
from evaluation.harnesses.predictions.delimited import OversizedRow, csv_rows
from evaluation.harnesses.predictions.rows import AnswerRows

HARNESS = "VLMEvalKit"
NO_MODEL_NAME = "the file's name names no model (VLMEvalKit writes <model>_MixCuBe.xlsx; a plain table names none)"
DATASET = "MixCuBe"
SUFFIXES = (".xlsx", ".tsv", ".csv")
#: What VLMEvalKit writes: xlsx (its default) or tsv (`PRED_FORMAT=tsv`), each keyed by `index` (its
#: `get_pred_file_format` offers xlsx, tsv and json; never csv).
HARNESS_SUFFIXES = (".xlsx", ".tsv")
#: A file that is not VLMEvalKit's own, by its format, as results name its source (`source_label`).
PLAIN_LABELS = {".csv": "CSV", ".tsv": "TSV", ".xlsx": "xlsx"}
#: What VLMEvalKit writes for a row whose model call failed (`vlmeval/constant.py` FAIL_MSG, and the API variant
#: "... via API." of `vlmeval/inference.py`); it tests `FAIL_MSG in prediction` itself. Such a row is unanswered, not
#: a wrong answer: the run is scored as a partial one, with its coverage.
FAILED_ROW = "Failed to obtain answer"
#: A prediction file of the whole MixCuBe (some 12,500 images x 8 columns) has about 100,000 cells: the cells built
#: (rows padded to their last cell) and the shared strings are each bounded far above that, the XML elements of a
#: part (2 or 3 per cell) likewise; a file past these is refused, whatever its size says.
MAX_XLSX_CELLS = 1_000_000


def model_name(path: Path) -> str | None:
    """VLMEvalKit names the file `<model>_<dataset>.<ext>`: the model, or None for another name (or one that is not
    UTF-8: the file system's decoding keeps its bytes as lone surrogates, which no text can hold)."""
    stem = path.stem
    suffix = f"_{DATASET}"
    if not stem.endswith(suffix) or _shown(stem, len(stem)) != stem:
        return None
    return stem[: -len(suffix)] or None


#: The columns read; a header naming one twice is refused.
_KEY_COLUMNS = ("index", "prediction", "sample_id")


def source_label(path: Path, header: list[str]) -> str:
    """What the file is, as the result's source names it: VLMEvalKit for VLMEvalKit's own file (an xlsx or tsv
    keyed by `index`), else its format (CSV, TSV, xlsx): a plain table of predictions."""
    suffix = path.suffix.lower()
    if suffix in HARNESS_SUFFIXES and "index" in header:
        return HARNESS
    return PLAIN_LABELS.get(suffix, suffix.lstrip(".") or "plain")


def read_predictions(path: Path, rows: pa.Table) -> dict[str, str]:
    return read_labelled(path, rows)[0]


def read_labelled(path: Path, rows: pa.Table) -> tuple[dict[str, str], str]:
    """(`read_predictions`'s answers, the file's `source_label`), read once."""
    with table_rows(path) as table:
        header = next(table, None)
        if header is None:
            raise PredictionsError(f"{path}: no rows")
        at = _columns(path, header)
        answers = AnswerRows(path, rows)
        try:
            for line, values in enumerate(table, start=2):
                if not any(values):
                    answers.blank()
                    continue
                _add(path, answers, line, values, at)
        except OversizedRow as exc:
            cells = {name: exc.start[i] for name, i in at.items() if i < len(exc.start)}
            named = _named(exc.row, cells.get("index") or None, cells.get("sample_id") or None)
            raise PredictionsError(
                f"{path}: {named}: longer than {MAX_ANSWER_BYTES >> 20} MiB, the cap on a "
                "model's answer (max_response_bytes); not an answer a model run would keep"
            ) from None
    return answers.result(), source_label(path, header)


def _columns(path: Path, header: list[str]) -> dict[str, int]:
    """Where `index`, `prediction` and `sample_id` are; PredictionsError when one the file needs is missing, or one
    is named twice (which one would be the answer?)."""
    # VLMEvalKit's own file keys a row by `index`; a plain `sample_id,prediction` file (people's own scripts) by id.
    if "prediction" not in header or not {"index", "sample_id"} & set(header):
        shown = ", ".join(_shown(name, 40) for name in header[:40]) + (", ..." if len(header) > 40 else "")
        raise PredictionsError(
            f"{path}: needs a 'prediction' column and an 'index' or 'sample_id' column (columns: {shown})"
        )
    for name in _KEY_COLUMNS:
        numbers = [str(i + 1) for i, column in enumerate(header) if column == name]
        if len(numbers) > 1:
            raise PredictionsError(
                f"{path}: the header names the column {name!r} {len(numbers)} times (columns "
                f"{', '.join(numbers[:-1])} and {numbers[-1]}); which one to read is not clear"
            )
    return {name: header.index(name) for name in _KEY_COLUMNS if name in header}


def _add(path: Path, answers: AnswerRows, line: int, values: list[str], at: dict[str, int]) -> None:
    """One row of the file, checked against the release (`AnswerRows.add`)."""
    values = values + [""] * (max(at.values()) + 1 - len(values))
    sample_id = values[at["sample_id"]] if "sample_id" in at else None
    if "index" in at:
        index = _index(path, line, values[at["index"]])
        label = f"index {index}"
    else:
        index = answers.position(f"row {line}", sample_id or "")
        label = f"sample {_shown(sample_id or '', 60)!r}"
    answer = check_answer(path, _named(line, str(index), sample_id), values[at["prediction"]], "prediction")
    answers.add(f"row {line}", label, index, None if FAILED_ROW in answer else answer, sample_id)


def _named(line: int, index: str | None, sample_id: str | None) -> str:
    """Row `line` as messages name it, with its index and sample when known."""
    parts = [f"index {_shown(index)}"] if index is not None else []
    parts += [f"sample {_shown(sample_id, 60)!r}"] if sample_id is not None else []
    return f"row {line}" + (f" ({', '.join(parts)})" if parts else "")


def _index(path: Path, line: int, value: str) -> int:
    try:
        number = float(value)
    except ValueError:
        raise PredictionsError(f"{path}: row {line}: index {_shown(value)!r} is not a number") from None
    if not number.is_integer() or number < 0:
        raise PredictionsError(f"{path}: row {line}: index {_shown(value)!r} is not a row position")
    return int(number)


def read_table(path: Path) -> list[list[str]]:
    """The file's cells as text, the header first (all of them: `table_rows` streams them)."""
    with table_rows(path) as table:
        return list(table)


@contextmanager
def table_rows(path: Path) -> Iterator[Iterator[list[str]]]:
    """The file's rows as lists of cell texts, the header first: a CSV or TSV streamed a row at a time, an xlsx's
    first sheet (read whole, within its bounds)."""
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise PredictionsError(
            f"{path}: a prediction file read as vlmevalkit (VLMEvalKit's own, or a plain table of sample_id and "
            f"prediction) is {', '.join(SUFFIXES)}; not {suffix or 'that'}"
        )
    if suffix == ".xlsx":
        try:
            yield iter(
                sheet_rows(
                    path,
                    XlsxLimits(MAX_PREDICTION_BYTES, MAX_XLSX_CELLS, "prediction file"),
                    read_prediction_bytes(path),
                )
            )
        except XlsxError as exc:
            raise PredictionsError(str(exc)) from None
        return
    with csv_rows(path, "\t" if suffix == ".tsv" else ",") as table:
        yield table
