"""A spreadsheet's first worksheet as rows of cell texts, read with the standard library (zipfile and expat,
streamed: shared and inline strings, `_xHHHH_` escapes): openpyxl is not among the project's locked dependencies.
No element tree is built, and what is built is bounded (`XlsxLimits`: unpacked bytes, cells, XML elements; no column
past XFD or the header's width), so a small hostile file cannot take the memory; DTDs (external entities, entity
expansion) are refused, and so, where the reader asks, are formula cells. It serves VLMEvalKit's prediction files
(`evaluation.harnesses.predictions.vlmevalkit`) and a pack's translation sheet (`data.pack_sheet`)."""

from __future__ import annotations

import io
import re
import struct
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from xml.parsers import expat

_MAIN = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
_REL = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}"
_PKG_REL = "{http://schemas.openxmlformats.org/package/2006/relationships}"
_ESCAPE = re.compile(r"_x([0-9A-Fa-f]{4})_")
_CELL = re.compile(r"([A-Z]+)(\d+)")
_SURROGATE = re.compile("[\ud800-\udfff]")
#: XFD, a worksheet's last column (16,384 columns: ECMA-376 and Excel).
_MAX_COLUMNS = 16384
#: A spreadsheet's zip directory names a dozen members (about 1 KiB).
MAX_CENTRAL_DIRECTORY_BYTES = 1 << 20
_END_OF_CENTRAL_DIRECTORY = b"PK\x05\x06"
_ZIP64_LOCATOR = b"PK\x06\x07"
_ZIP64_END = b"PK\x06\x06"


class XlsxError(ValueError):
    """One line naming the file (and the part or cell) that cannot be read."""


@dataclass(frozen=True)
class XlsxLimits:
    """What one reader accepts: `max_bytes` read or unpacked per part, `max_cells` built (rows padded to their last
    cell; the XML elements of a part, 2 or 3 per cell, at most four times that), and whether a formula cell is refused
    (a sheet a person filled in: its cached value is not what they typed). `kind` names the file in refusals."""

    max_bytes: int
    max_cells: int
    kind: str
    refuse_formulas: bool = False

    @property
    def max_elements(self) -> int:
        return 4 * self.max_cells


def shown(text: str, limit: int = 24) -> str:
    """A value from the file as a message shows it: short, and printable (a lone surrogate as its escape)."""
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return text.encode("utf-8", "backslashreplace").decode("utf-8") if _SURROGATE.search(text) else text


def read_bounded(path: Path, limits: XlsxLimits) -> bytes:
    """The file's bytes, refused past `limits.max_bytes` before more is read."""
    try:
        with path.open("rb") as handle:
            data = handle.read(limits.max_bytes + 1)
    except OSError as exc:
        raise XlsxError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if len(data) > limits.max_bytes:
        raise XlsxError(f"{path}: over {limits.max_bytes >> 20} MiB; not a {limits.kind}")
    return data


def sheet_rows(path: Path, limits: XlsxLimits, data: bytes | None = None) -> list[list[str]]:
    """The first worksheet's rows (the header first) as lists of cell texts; `data` is the file's bytes when the
    caller has read them already (bounded)."""
    return _xlsx(path, read_bounded(path, limits) if data is None else data, limits)


def _unescape(text: str) -> str:
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), text)


def _column_number(letters: str) -> int:
    number = 0
    for letter in letters:
        number = number * 26 + ord(letter) - ord("A") + 1
    return number - 1


def _check_central_directory(path: Path, data: bytes, limits: XlsxLimits) -> None:
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
        raise XlsxError(
            f"{path}: its zip directory takes {size} bytes, more than any spreadsheet's "
            f"({MAX_CENTRAL_DIRECTORY_BYTES >> 10} KiB); not a {limits.kind}"
        )


class _Part:
    """One part (XML member) of an xlsx, streamed through expat: no element tree is built, so a part of millions of
    tiny elements costs only what the subclass keeps; at most `self.limits.max_elements` elements are read; a DTD is
    refused (no spreadsheet part has one, and it is how external entities and entity expansion get in).

    Subclasses see `start(tag, attrs)` (tags and attributes as ElementTree names them, `{namespace}local`) and
    `end(tag)`; `collect(into)` in `start` gathers the element's own character data into the list `into`."""

    def __init__(self, path: Path, name: str, limits: XlsxLimits) -> None:
        self.path = path
        self.name = name
        self.limits = limits
        self.stack: list[str] = []  # the open elements, the root first
        self._text: list[str] | None = None
        self._text_depth = 0
        self._elements = 0

    def read(self, archive: zipfile.ZipFile) -> None:
        if archive.getinfo(self.name).file_size > self.limits.max_bytes:  # refused before decompressing
            raise XlsxError(
                f"{self.path}: {self.name} unpacks to more than {self.limits.max_bytes >> 20} MiB; "
                f"not a {self.limits.kind}"
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
        raise XlsxError(f"{self.path}: {self.name} declares a DTD, which no spreadsheet part has; refused")

    def _start(self, name: str, attrs: dict[str, str]) -> None:
        self._elements += 1
        if self._elements > self.limits.max_elements:
            raise XlsxError(
                f"{self.path}: {self.name} holds more than {self.limits.max_elements:,} XML elements; "
                f"not a {self.limits.kind}"
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

    def __init__(self, path: Path, name: str, limits: XlsxLimits) -> None:
        super().__init__(path, name, limits)
        self.found = False
        self.rel_id: str | None = None

    def start(self, tag: str, attrs: dict[str, str]) -> None:
        if not self.found and tag == f"{_MAIN}sheet" and len(self.stack) == 2 and self.stack[1] == f"{_MAIN}sheets":
            self.found, self.rel_id = True, attrs.get(f"{_REL}id")


class _Relationships(_Part):
    """xl/_rels/workbook.xml.rels: the target of one relationship id."""

    def __init__(self, path: Path, name: str, limits: XlsxLimits, rel_id: str | None) -> None:
        super().__init__(path, name, limits)
        self.rel_id = rel_id
        self.target: str | None = None

    def start(self, tag: str, attrs: dict[str, str]) -> None:
        if self.target is None and tag == f"{_PKG_REL}Relationship" and attrs.get("Id") == self.rel_id:
            self.target = attrs.get("Target", "")


class _SharedStrings(_Part):
    """xl/sharedStrings.xml: each `si`'s text (its `t` elements, rich-text runs included, phonetic runs left out)."""

    def __init__(self, path: Path, name: str, limits: XlsxLimits) -> None:
        super().__init__(path, name, limits)
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
            if len(self.strings) > self.limits.max_cells:  # a real file has at most one per cell
                raise XlsxError(
                    f"{self.path}: {self.name} holds more than {self.limits.max_cells:,} strings; "
                    f"not a {self.limits.kind}"
                )


class _Sheet(_Part):
    """The first worksheet: its rows as lists of cell texts. A cell is placed by its reference (`r`, e.g. "C7"), or
    after the row's previous cell without one; a reference past XFD (the last column a worksheet has) or, below the
    header, past the header's last cell is refused, and the cells built (rows padded to their last cell) are at most
    `self.limits.max_cells`: what the table holds is bounded by the file's size, whatever its references say."""

    def __init__(self, path: Path, name: str, limits: XlsxLimits, shared: list[str]) -> None:
        super().__init__(path, name, limits)
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
        elif tag == f"{_MAIN}f" and parent == f"{_MAIN}c" and self.limits.refuse_formulas:
            raise XlsxError(
                f"{self.path}: cell {self._cell[0]} holds a formula; type the value itself (a {self.limits.kind} "
                "takes no formulas)"
            )
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
            if self._built > self.limits.max_cells:
                raise XlsxError(
                    f"{self.path}: the sheet holds more than {self.limits.max_cells:,} cells; not a {self.limits.kind}"
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
            named = shown(reference)
        else:
            named = (
                f"{shown(reference)!r} (row {len(self.rows) + 1}, column {column + 1})"
                if reference
                else (f"at row {len(self.rows) + 1}, column {column + 1}")
            )
        if column >= _MAX_COLUMNS:
            raise XlsxError(f"{self.path}: cell {named} lies past XFD, the last column of a worksheet")
        if self.rows and column >= len(self.rows[0]):
            raise XlsxError(
                f"{self.path}: cell {named} lies past the header, whose last column is "
                f"{_column_letters(len(self.rows[0]) - 1) if self.rows[0] else 'none'}"
            )
        return named, column

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
                raise XlsxError(
                    f"{self.path}: cell {reference} refers to shared string {shown(text)!r}, which the file does not "
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


def _xlsx(path: Path, data: bytes, limits: XlsxLimits) -> list[list[str]]:
    _check_central_directory(path, data, limits)
    name = "xl/workbook.xml"
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = set(archive.namelist())
            workbook = _Workbook(path, name, limits)
            workbook.read(archive)
            if not workbook.found:
                raise XlsxError(f"{path}: the workbook has no sheet")
            name = "xl/_rels/workbook.xml.rels"
            rels = _Relationships(path, name, limits, workbook.rel_id)
            rels.read(archive)
            target = rels.target or ""
            shared: list[str] = []
            if "xl/sharedStrings.xml" in names:
                name = "xl/sharedStrings.xml"
                strings = _SharedStrings(path, name, limits)
                strings.read(archive)
                shared = strings.strings
            name = target.lstrip("/") if target.startswith("/") else f"xl/{target}"
            sheet = _Sheet(path, name, limits, shared)
            sheet.read(archive)
    except (zipfile.BadZipFile, KeyError, EOFError, zlib.error, expat.ExpatError) as exc:
        detail = " ".join(str(exc).split())
        raise XlsxError(f"{path}: not a readable xlsx file ({shown(name, 60)}: {detail})") from None
    except (NotImplementedError, RuntimeError) as exc:  # a compression zipfile lacks; an encrypted member
        raise XlsxError(f"{path}: not a readable xlsx file ({' '.join(str(exc).split())})") from None
    return sheet.rows
