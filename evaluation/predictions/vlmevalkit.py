"""VLMEvalKit's prediction file of the exported MixCuBe TSV (`evaluation.exports.vlmevalkit`): `<model>_MixCuBe.xlsx`
(its default), or `.tsv` / `.csv` (`PRED_FORMAT=tsv`, or converted), with the data's columns (the image dropped) and
`prediction`. `index` is the row's position in the release's `default` table; `sample_id`, when the file kept it,
is checked against the release.

The xlsx is read with the standard library (zipfile and ElementTree: the first worksheet, shared and inline strings,
`_xHHHH_` escapes): openpyxl is not among the project's locked dependencies."""

from __future__ import annotations

import csv
import io
import re
import zipfile
from pathlib import Path
from xml.etree import ElementTree

import pyarrow as pa

from evaluation.predictions import MAX_PREDICTION_BYTES, PredictionsError, check_rows, read_prediction_bytes

HARNESS = "VLMEvalKit"
DATASET = "MixCuBe"
SUFFIXES = (".xlsx", ".tsv", ".csv")
_MAIN = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
_REL = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}"
_PKG_REL = "{http://schemas.openxmlformats.org/package/2006/relationships}"
_ESCAPE = re.compile(r"_x([0-9A-Fa-f]{4})_")
_CELL = re.compile(r"([A-Z]+)(\d+)")


def model_name(path: Path) -> str | None:
    """VLMEvalKit names the file `<model>_<dataset>.<ext>`: the model, or None for another name."""
    stem = path.stem
    suffix = f"_{DATASET}"
    return stem[: -len(suffix)] or None if stem.endswith(suffix) else None


def read_predictions(path: Path, rows: pa.Table) -> dict[str, str]:
    table = read_table(path)
    if not table:
        raise PredictionsError(f"{path}: no rows")
    header = table[0]
    for column in ("index", "prediction"):
        if column not in header:
            raise PredictionsError(f"{path}: no {column!r} column (columns: {', '.join(header)})")
    at = {name: header.index(name) for name in ("index", "prediction", "sample_id") if name in header}
    predicted: dict[int, str] = {}
    sample_ids: dict[int, str] = {}
    for line, values in enumerate(table[1:], start=2):
        if not any(values):
            continue
        values = values + [""] * (len(header) - len(values))
        index = _index(path, line, values[at["index"]])
        if index in predicted:
            raise PredictionsError(f"{path}: index {index} appears twice (row {line})")
        predicted[index] = values[at["prediction"]]
        if "sample_id" in at:
            sample_ids[index] = values[at["sample_id"]]
    return check_rows(path, rows, predicted, sample_ids)


def _index(path: Path, line: int, value: str) -> int:
    try:
        number = float(value)
    except ValueError:
        raise PredictionsError(f"{path}: row {line}: index {value!r} is not a number") from None
    if not number.is_integer() or number < 0:
        raise PredictionsError(f"{path}: row {line}: index {value!r} is not a row position")
    return int(number)


def read_table(path: Path) -> list[list[str]]:
    """The file's cells as text, the header first."""
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise PredictionsError(f"{path}: a VLMEvalKit prediction file is {', '.join(SUFFIXES)}; not {suffix or 'that'}")
    data = read_prediction_bytes(path)
    if suffix == ".xlsx":
        return _xlsx(path, data)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise PredictionsError(f"{path}: not UTF-8 text") from None
    csv.field_size_limit(1 << 30)
    try:
        return [list(r) for r in csv.reader(io.StringIO(text, newline=""), delimiter="\t" if suffix == ".tsv" else ",")]
    except csv.Error as exc:
        raise PredictionsError(f"{path}: not a readable {suffix[1:].upper()} file ({exc})") from None


def _unescape(text: str) -> str:
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), text)


def _text(element: ElementTree.Element) -> str:
    """A string item's text: its `t` elements (rich-text runs included), phonetic runs left out."""
    return "".join(t.text or "" for t in element.iter(f"{_MAIN}t") if t not in _phonetic(element))


def _phonetic(element: ElementTree.Element) -> set[ElementTree.Element]:
    return {t for rph in element.iter(f"{_MAIN}rPh") for t in rph.iter(f"{_MAIN}t")}


def _column_number(letters: str) -> int:
    number = 0
    for letter in letters:
        number = number * 26 + ord(letter) - ord("A") + 1
    return number - 1


def _member(path: Path, archive: zipfile.ZipFile, name: str) -> bytes:
    """One member's bytes, refused before decompressing when it would be larger than any real prediction file."""
    if archive.getinfo(name).file_size > MAX_PREDICTION_BYTES:
        raise PredictionsError(
            f"{path}: {name} unpacks to more than {MAX_PREDICTION_BYTES >> 20} MiB; not a prediction file"
        )
    return archive.read(name)


def _xlsx(path: Path, data: bytes) -> list[list[str]]:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = set(archive.namelist())
            workbook = ElementTree.fromstring(_member(path, archive, "xl/workbook.xml"))
            first = workbook.find(f"{_MAIN}sheets/{_MAIN}sheet")
            if first is None:
                raise PredictionsError(f"{path}: the workbook has no sheet")
            rel_id = first.get(f"{_REL}id")
            rels = ElementTree.fromstring(_member(path, archive, "xl/_rels/workbook.xml.rels"))
            target = next(
                (r.get("Target", "") for r in rels.iter(f"{_PKG_REL}Relationship") if r.get("Id") == rel_id), ""
            )
            sheet_name = target.lstrip("/") if target.startswith("/") else f"xl/{target}"
            shared: list[str] = []
            if "xl/sharedStrings.xml" in names:
                strings = ElementTree.fromstring(_member(path, archive, "xl/sharedStrings.xml"))
                shared = [_unescape(_text(si)) for si in strings.iter(f"{_MAIN}si")]
            sheet = ElementTree.fromstring(_member(path, archive, sheet_name))
    except (zipfile.BadZipFile, KeyError, ElementTree.ParseError) as exc:
        raise PredictionsError(f"{path}: not a readable xlsx file ({' '.join(str(exc).split())})") from None
    table: list[list[str]] = []
    for row in sheet.iter(f"{_MAIN}row"):
        cells: dict[int, str] = {}
        for position, cell in enumerate(row.iter(f"{_MAIN}c")):
            match = _CELL.fullmatch(cell.get("r", ""))
            column = _column_number(match.group(1)) if match else position
            kind = cell.get("t", "n")
            value = cell.find(f"{_MAIN}v")
            if kind == "inlineStr":
                inline = cell.find(f"{_MAIN}is")
                cells[column] = _unescape(_text(inline)) if inline is not None else ""
            elif value is None or value.text is None:
                cells[column] = ""
            elif kind == "s":
                try:
                    cells[column] = shared[int(value.text)]
                except (ValueError, IndexError):
                    raise PredictionsError(f"{path}: a cell refers to a missing shared string") from None
            elif kind == "str":
                cells[column] = _unescape(value.text)
            else:
                cells[column] = value.text
        width = max(cells, default=-1) + 1
        table.append([cells.get(i, "") for i in range(width)])
    return table
