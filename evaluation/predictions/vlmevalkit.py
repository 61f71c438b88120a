"""VLMEvalKit's prediction file of the exported MixCuBe TSV (`evaluation.exports.vlmevalkit`): `<model>_MixCuBe.xlsx`
(its default), or `.tsv` / `.csv` (`PRED_FORMAT=tsv`, or converted), with the data's columns (the image dropped) and
`prediction`. `index` is the row's position in the release's `default` table; `sample_id`, when the file kept it,
is checked against the release.

The xlsx is read with the standard library (zipfile and expat, streamed: the first worksheet, shared and inline
strings, `_xHHHH_` escapes): openpyxl is not among the project's locked dependencies. No element tree is built, and
what is built is bounded (`MAX_XLSX_CELLS`, `MAX_XLSX_ELEMENTS`, no column past XFD or the header's width), so a
small hostile file cannot take the memory; DTDs (external entities, entity expansion) are refused."""

from __future__ import annotations

import csv
import io
import re
import struct
import zipfile
import zlib
from pathlib import Path
from xml.parsers import expat

import pyarrow as pa

from evaluation.predictions import (
    MAX_PREDICTION_BYTES,
    PredictionsError,
    check_answer,
    check_rows,
    read_prediction_bytes,
)

HARNESS = "VLMEvalKit"
NO_MODEL_NAME = "the file's name names no model (VLMEvalKit writes <model>_MixCuBe.xlsx)"
DATASET = "MixCuBe"
SUFFIXES = (".xlsx", ".tsv", ".csv")
_MAIN = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
_REL = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}"
_PKG_REL = "{http://schemas.openxmlformats.org/package/2006/relationships}"
_CSV_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")
_ESCAPE = re.compile(r"_x([0-9A-Fa-f]{4})_")
_CELL = re.compile(r"([A-Z]+)(\d+)")
#: XFD, a worksheet's last column (16,384 columns: ECMA-376 and Excel).
_MAX_COLUMNS = 16384
#: What VLMEvalKit writes for a row whose model call failed (`vlmeval/constant.py` FAIL_MSG, and the API variant
#: "... via API." of `vlmeval/inference.py`); it tests `FAIL_MSG in prediction` itself. Such a row is unanswered, not
#: a wrong answer: the run is scored as a partial one, with its coverage.
FAILED_ROW = "Failed to obtain answer"
#: A prediction file of the whole MixCuBe (some 12,500 images x 8 columns) has about 100,000 cells: the cells built
#: (rows padded to their last cell) and the shared strings are each bounded far above that, the XML elements of a
#: part (2 or 3 per cell) likewise; a file past these is refused, whatever its size says.
MAX_XLSX_CELLS = 1_000_000
MAX_XLSX_ELEMENTS = 4 * MAX_XLSX_CELLS
#: A spreadsheet's zip directory names a dozen members (about 1 KiB).
MAX_CENTRAL_DIRECTORY_BYTES = 1 << 20
_END_OF_CENTRAL_DIRECTORY = b"PK\x05\x06"
_ZIP64_LOCATOR = b"PK\x06\x07"
_ZIP64_END = b"PK\x06\x06"


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
    # VLMEvalKit's own file keys a row by `index`; a plain `sample_id,prediction` file (people's own scripts) by id.
    if "prediction" not in header or not {"index", "sample_id"} & set(header):
        raise PredictionsError(
            f"{path}: needs a 'prediction' column and an 'index' or 'sample_id' column (columns: {', '.join(header)})"
        )
    at = {name: header.index(name) for name in ("index", "prediction", "sample_id") if name in header}
    positions = None if "index" in at else {sample: i for i, sample in enumerate(rows.column("sample_id").to_pylist())}
    predicted: dict[int, str] = {}
    failed: set[int] = set()  # rows VLMEvalKit marked as failed calls
    sample_ids: dict[int, str] = {}
    for line, values in enumerate(table[1:], start=2):
        if not any(values):
            continue
        values = values + [""] * (len(header) - len(values))
        sample_id = values[at["sample_id"]] if "sample_id" in at else None
        index = (
            _index(path, line, values[at["index"]])
            if positions is None
            else _position(path, line, sample_id, positions)
        )
        if index in predicted:
            twice = f"index {index}" if positions is None else f"sample {_shown(sample_id or '', 60)!r}"
            raise PredictionsError(f"{path}: {twice} appears twice (row {line})")
        named = f"row {line} (index {index}" + (f", sample {_shown(sample_id, 60)!r})" if sample_id else ")")
        answer = check_answer(path, named, values[at["prediction"]])
        if sample_id is not None:
            sample_ids[index] = sample_id
        if FAILED_ROW in answer:
            failed.add(index)
            continue
        predicted[index] = answer
    return check_rows(path, rows, predicted, sample_ids, failed)


def _position(path: Path, line: int, sample_id: str | None, positions: dict[str, int]) -> int:
    """The release row of a file keyed by `sample_id` (no `index` column)."""
    if sample_id not in positions:
        raise PredictionsError(
            f"{path}: row {line}: sample {_shown(sample_id or '', 60)!r} is no row of the release; "
            "was it made from another release?"
        )
    return positions[sample_id]


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
    del data  # the file is held once, as text, while it is parsed
    csv.field_size_limit(1 << 30)
    # The lines as io.StringIO(text, newline="") gives them (split after \r\n, \r or \n, kept), one at a time:
    # StringIO would first copy the whole text at 4 bytes a character.
    lines = (match.group() for match in _CSV_LINE.finditer(text))
    try:
        return list(csv.reader(lines, delimiter="\t" if suffix == ".tsv" else ","))
    except csv.Error as exc:
        raise PredictionsError(f"{path}: not a readable {suffix[1:].upper()} file ({exc})") from None


def _unescape(text: str) -> str:
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), text)


def _column_number(letters: str) -> int:
    number = 0
    for letter in letters:
        number = number * 26 + ord(letter) - ord("A") + 1
    return number - 1


def _shown(text: str, limit: int = 24) -> str:
    """A value from the file as a message shows it: short, whatever its length."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_central_directory(path: Path, data: bytes) -> None:
    """Refuse a zip whose central directory is larger than any spreadsheet's, before `zipfile` reads it: it keeps a
    ZipInfo (some 400 bytes) per 46-byte entry, so a 256 MiB file of entries would take gigabytes. Anything this cannot
    read is left to `zipfile`, which refuses it."""
    end = data.rfind(_END_OF_CENTRAL_DIRECTORY, max(0, len(data) - (0xFFFF + 22)))
    if end < 0 or end + 22 > len(data):
        return
    size = struct.unpack_from("<L", data, end + 12)[0]
    locator = end - 20
    if size == 0xFFFFFFFF and locator >= 0 and data[locator : locator + 4] == _ZIP64_LOCATOR:  # a zip64 archive
        record = struct.unpack_from("<Q", data, locator + 8)[0]
        if record + 56 <= len(data) and data[record : record + 4] == _ZIP64_END:
            size = struct.unpack_from("<Q", data, record + 40)[0]
    if size > MAX_CENTRAL_DIRECTORY_BYTES:
        raise PredictionsError(
            f"{path}: its zip directory takes {size} bytes, more than any spreadsheet's "
            f"({MAX_CENTRAL_DIRECTORY_BYTES >> 10} KiB); not a prediction file"
        )


class _Part:
    """One part (XML member) of an xlsx, streamed through expat: no element tree is built, so a part of millions of
    tiny elements costs only what the subclass keeps; at most `MAX_XLSX_ELEMENTS` elements are read; a DTD is
    refused (no spreadsheet part has one, and it is how external entities and entity expansion get in).

    Subclasses see `start(tag, attrs)` (tags and attributes as ElementTree names them, `{namespace}local`) and
    `end(tag)`; `collect(into)` in `start` gathers the element's own character data into the list `into`."""

    def __init__(self, path: Path, name: str) -> None:
        self.path = path
        self.name = name
        self.stack: list[str] = []  # the open elements, the root first
        self._text: list[str] | None = None
        self._text_depth = 0
        self._elements = 0

    def read(self, archive: zipfile.ZipFile) -> None:
        if archive.getinfo(self.name).file_size > MAX_PREDICTION_BYTES:  # refused before decompressing
            raise PredictionsError(
                f"{self.path}: {self.name} unpacks to more than {MAX_PREDICTION_BYTES >> 20} MiB; not a prediction file"
            )
        parser = expat.ParserCreate(namespace_separator="}")
        parser.buffer_text = True
        parser.StartDoctypeDeclHandler = self._doctype
        parser.EntityDeclHandler = self._doctype
        parser.StartElementHandler = self._start
        parser.EndElementHandler = self._end
        parser.CharacterDataHandler = self._characters
        with archive.open(self.name) as member:
            while chunk := member.read(1 << 20):
                parser.Parse(chunk, False)
        parser.Parse(b"", True)

    def start(self, tag: str, attrs: dict[str, str]) -> None:
        pass

    def end(self, tag: str) -> None:
        pass

    def collect(self, into: list[str]) -> None:
        self._text, self._text_depth = into, len(self.stack) + 1

    def _doctype(self, *args: object) -> None:
        raise PredictionsError(f"{self.path}: {self.name} declares a DTD, which no spreadsheet part has; refused")

    def _start(self, name: str, attrs: dict[str, str]) -> None:
        self._elements += 1
        if self._elements > MAX_XLSX_ELEMENTS:
            raise PredictionsError(
                f"{self.path}: {self.name} holds more than {MAX_XLSX_ELEMENTS:,} XML elements; not a prediction file"
            )
        self.start(_qualified(name), {_qualified(k): v for k, v in attrs.items()})
        self.stack.append(_qualified(name))

    def _end(self, name: str) -> None:
        tag = self.stack.pop()
        if self._text is not None and len(self.stack) < self._text_depth:
            self._text = None
        self.end(tag)

    def _characters(self, data: str) -> None:
        if self._text is not None and len(self.stack) == self._text_depth:
            self._text.append(data)


def _qualified(name: str) -> str:
    """expat's `namespace}local` as ElementTree's `{namespace}local`."""
    return "{" + name if "}" in name else name


class _Workbook(_Part):
    """xl/workbook.xml: the relationship id of the first sheet (`sheets/sheet`)."""

    def __init__(self, path: Path, name: str) -> None:
        super().__init__(path, name)
        self.found = False
        self.rel_id: str | None = None

    def start(self, tag: str, attrs: dict[str, str]) -> None:
        if not self.found and tag == f"{_MAIN}sheet" and len(self.stack) == 2 and self.stack[1] == f"{_MAIN}sheets":
            self.found, self.rel_id = True, attrs.get(f"{_REL}id")


class _Relationships(_Part):
    """xl/_rels/workbook.xml.rels: the target of one relationship id."""

    def __init__(self, path: Path, name: str, rel_id: str | None) -> None:
        super().__init__(path, name)
        self.rel_id = rel_id
        self.target: str | None = None

    def start(self, tag: str, attrs: dict[str, str]) -> None:
        if self.target is None and tag == f"{_PKG_REL}Relationship" and attrs.get("Id") == self.rel_id:
            self.target = attrs.get("Target", "")


class _SharedStrings(_Part):
    """xl/sharedStrings.xml: each `si`'s text (its `t` elements, rich-text runs included, phonetic runs left out)."""

    def __init__(self, path: Path, name: str) -> None:
        super().__init__(path, name)
        self.strings: list[str] = []
        self._item: list[str] | None = None
        self._open = 0  # open `si` elements (counted, not searched for: a part may nest deep)
        self._phonetic = 0

    def start(self, tag: str, attrs: dict[str, str]) -> None:
        if tag == f"{_MAIN}si":
            self._open += 1
            if self._open == 1:
                self._item = []
        elif tag == f"{_MAIN}rPh":
            self._phonetic += 1
        elif tag == f"{_MAIN}t" and self._item is not None and not self._phonetic:
            self.collect(self._item)

    def end(self, tag: str) -> None:
        if tag == f"{_MAIN}rPh":
            self._phonetic -= 1
        elif tag == f"{_MAIN}si":
            self._open -= 1
            if self._open or self._item is None:
                return
            self.strings.append(_unescape("".join(self._item)))
            self._item = None
            if len(self.strings) > MAX_XLSX_CELLS:  # a real file has at most one per cell
                raise PredictionsError(
                    f"{self.path}: {self.name} holds more than {MAX_XLSX_CELLS:,} strings; not a prediction file"
                )


class _Sheet(_Part):
    """The first worksheet: its rows as lists of cell texts. A cell is placed by its reference (`r`, e.g. "C7"), or
    after the row's previous cell without one; a reference past XFD (the last column a worksheet has) or, below the
    header, past the header's last cell is refused, and the cells built (rows padded to their last cell) are at most
    `MAX_XLSX_CELLS`: what the table holds is bounded by the file's size, whatever its references say."""

    def __init__(self, path: Path, name: str, shared: list[str]) -> None:
        super().__init__(path, name)
        self.shared = shared
        self.rows: list[list[str]] = []
        self._built = 0
        self._cells: dict[int, str] | None = None
        self._last = -1
        self._cell: tuple[str, int, str] | None = None  # reference (as messages show it), column, type
        self._value: list[str] | None = None
        self._inline: list[str] | None = None
        self._in_inline = False
        self._phonetic = 0

    def start(self, tag: str, attrs: dict[str, str]) -> None:
        parent = self.stack[-1] if self.stack else None
        if tag == f"{_MAIN}row":
            self._cells, self._last = {}, -1
        elif tag == f"{_MAIN}c" and parent == f"{_MAIN}row" and self._cells is not None:
            reference, column = self._place(attrs.get("r", ""))
            self._cell, self._last = (reference, column, attrs.get("t", "n")), column
            self._value = self._inline = None
        elif self._cell is None or parent is None:
            return
        elif tag == f"{_MAIN}v" and parent == f"{_MAIN}c" and self._value is None:
            self._value = []
            self.collect(self._value)
        elif tag == f"{_MAIN}is" and parent == f"{_MAIN}c" and self._inline is None:
            self._inline, self._in_inline = [], True
        elif tag == f"{_MAIN}rPh":
            self._phonetic += 1
        elif tag == f"{_MAIN}t" and self._in_inline and self._inline is not None and not self._phonetic:
            self.collect(self._inline)

    def end(self, tag: str) -> None:
        if tag == f"{_MAIN}rPh" and self._cell is not None:
            self._phonetic -= 1
        elif tag == f"{_MAIN}is":
            self._in_inline = False
        elif tag == f"{_MAIN}c" and self._cell is not None and self._cells is not None:
            self._cells[self._cell[1]] = self._cell_text()
            self._cell = None
        elif tag == f"{_MAIN}row" and self._cells is not None:
            width = max(self._cells, default=-1) + 1
            self._built += max(width, 1)
            if self._built > MAX_XLSX_CELLS:
                raise PredictionsError(
                    f"{self.path}: the sheet holds more than {MAX_XLSX_CELLS:,} cells; not a prediction file"
                )
            self.rows.append([self._cells.get(i, "") for i in range(width)])
            self._cells = None

    def _place(self, reference: str) -> tuple[str, int]:
        """The cell's reference as messages show it, and its column (0 = A)."""
        match = _CELL.fullmatch(reference)
        column = self._last + 1
        if match:
            # more than three letters is past XFD: not even computed (the number of "ZZZZ...Z" grows with its length)
            column = _column_number(match.group(1)) if len(match.group(1)) <= 3 else _MAX_COLUMNS
            shown = _shown(reference)
        else:
            shown = (
                f"{_shown(reference)!r} (row {len(self.rows) + 1}, column {column + 1})"
                if reference
                else (f"at row {len(self.rows) + 1}, column {column + 1}")
            )
        if column >= _MAX_COLUMNS:
            raise PredictionsError(f"{self.path}: cell {shown} lies past XFD, the last column of a worksheet")
        if self.rows and column >= len(self.rows[0]):
            raise PredictionsError(
                f"{self.path}: cell {shown} lies past the header, whose last column is "
                f"{_column_letters(len(self.rows[0]) - 1) if self.rows[0] else 'none'}"
            )
        return shown, column

    def _cell_text(self) -> str:
        assert self._cell is not None
        reference, _, kind = self._cell
        if kind == "inlineStr":
            return _unescape("".join(self._inline)) if self._inline is not None else ""
        if self._value is None:
            return ""
        text = "".join(self._value)
        if kind == "s":
            number = text.strip()
            # digits only: int() would take "-1" (the last string), "+1", "1_0" or other scripts' digits
            if not (number.isascii() and number.isdigit() and len(number) <= 10 and int(number) < len(self.shared)):
                raise PredictionsError(
                    f"{self.path}: cell {reference} refers to shared string {_shown(text)!r}, which the file does not "
                    f"have ({len(self.shared)} shared strings)"
                )
            return self.shared[int(number)]
        if kind == "str":
            return _unescape(text)
        return text


def _column_letters(column: int) -> str:
    letters = ""
    column += 1
    while column:
        column, rest = divmod(column - 1, 26)
        letters = chr(ord("A") + rest) + letters
    return letters


def _xlsx(path: Path, data: bytes) -> list[list[str]]:
    _check_central_directory(path, data)
    name = "xl/workbook.xml"
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = set(archive.namelist())
            workbook = _Workbook(path, name)
            workbook.read(archive)
            if not workbook.found:
                raise PredictionsError(f"{path}: the workbook has no sheet")
            name = "xl/_rels/workbook.xml.rels"
            rels = _Relationships(path, name, workbook.rel_id)
            rels.read(archive)
            target = rels.target or ""
            shared: list[str] = []
            if "xl/sharedStrings.xml" in names:
                name = "xl/sharedStrings.xml"
                strings = _SharedStrings(path, name)
                strings.read(archive)
                shared = strings.strings
            name = target.lstrip("/") if target.startswith("/") else f"xl/{target}"
            sheet = _Sheet(path, name, shared)
            sheet.read(archive)
    except (zipfile.BadZipFile, KeyError, EOFError, zlib.error, expat.ExpatError) as exc:
        detail = " ".join(str(exc).split())
        raise PredictionsError(f"{path}: not a readable xlsx file ({_shown(name, 60)}: {detail})") from None
    except (NotImplementedError, RuntimeError) as exc:  # a compression zipfile lacks; an encrypted member
        raise PredictionsError(f"{path}: not a readable xlsx file ({' '.join(str(exc).split())})") from None
    return sheet.rows
