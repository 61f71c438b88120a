"""A pack's missing and draft translations as a sheet people fill offline (`culturebench reference sheet`), and a
filled sheet merged back (`culturebench reference fill`).

The sheet has one row per entry (`data/pack_entries.py`) and the columns `SHEET_COLUMNS`: the entry's file, key and
language, the English it translates, its current draft and status (both for reading), then `translation` and
`reviewer` to fill. A row with a translation is merged; one without is left alone. A row whose `reviewer` names
the native speaker who wrote or checked the translation is recorded as native-reviewed by one reviewer; without it,
the translation is a draft awaiting review. Every merged value has the origin `sheet`.

A filled sheet is hostile input, read whole before anything is written: text that is not UTF-8, a header that is
not the sheet's, a cell that starts like a spreadsheet formula, an entry the pack does not have, a language that is
not its file's, a row given twice, and a row whose English is not this pack's (a sheet of another pack, or of an
older version of this one) are each refused in one line naming the row, and nothing is written. The translations
themselves are checked as the pack checks any value (`data/reference_values.py`) when the merged pack is.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from data.pack_entries import EntryChange, PackEntry, pack_entries
from data.reference_models import ReferencePack
from data.text_safety import FORMULA_PREFIXES, csv_bytes
from data.xlsx import XlsxError, XlsxLimits, sheet_rows

SHEET_COLUMNS = (
    "file",
    "key",
    "language",
    "english_source",
    "current_draft",
    "status",
    "translation",
    "reviewer",
)
#: What a sheet may hold: a pack has a few thousand entries; a cell is a phrase.
MAX_SHEET_BYTES = 64 * 2**20
MAX_ROWS = 1_000_000
MAX_CELL_CHARS = 10_000


class SheetError(ValueError):
    """A filled sheet that cannot be merged: `<sheet>: row N, <column>: <why>`, one line."""


def sheet_entries(pack: ReferencePack, languages: Iterable[str] | None = None) -> list[PackEntry]:
    """The entries a sheet lists: every missing or draft one of `languages` (default: the pack's)."""
    return [e for e in pack_entries(pack, languages) if e.status != "native_reviewed"]


def sheet_bytes(entries: Sequence[PackEntry]) -> bytes:
    """The sheet as CSV (UTF-8, every formula-like cell quoted with `'`, `data/text_safety.csv_bytes`)."""
    rows = [[e.file, e.key, e.language, e.source, e.draft, e.status, "", ""] for e in entries]
    return csv_bytes(list(SHEET_COLUMNS), rows)


def read_sheet(path: Path) -> Iterator[list[str]]:
    """The rows of a sheet file (header first): CSV, or an .xlsx as a spreadsheet program saves it."""
    if path.suffix.lower() == ".xlsx":
        limits = XlsxLimits(MAX_SHEET_BYTES, MAX_ROWS * len(SHEET_COLUMNS), "sheet of a pack", refuse_formulas=True)
        try:
            rows = sheet_rows(path, limits)
        except XlsxError as exc:
            raise SheetError(str(exc)) from None
        # An xlsx holds no element for an empty cell, so a row ends at its last filled cell (a row left without a
        # translation or a reviewer): its missing cells are empty ones. None lies past the header (`data/xlsx.py`).
        width = len(rows[0]) if rows else 0
        for row in rows:
            yield row + [""] * (width - len(row))
        return
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            data = handle.read(MAX_SHEET_BYTES + 1)
    except OSError as exc:
        raise SheetError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if len(data) > MAX_SHEET_BYTES or size > MAX_SHEET_BYTES:
        raise SheetError(f"{path}: over {MAX_SHEET_BYTES >> 20} MiB; not a sheet of a pack")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        # the codec counts from after a byte-order mark (Excel's "CSV UTF-8" writes one); the offset is the file's
        offset = exc.start + (len(data) - len(exc.object))
        raise SheetError(
            f"{path}: {_undecodable_cell(data)}not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset "
            f"{offset}); save it as UTF-8 CSV"
        ) from None
    csv.field_size_limit(MAX_CELL_CHARS + 1)
    try:
        yield from csv.reader(io.StringIO(text, newline=""))
    except csv.Error as exc:
        raise SheetError(f"{path}: not a CSV file ({exc})") from None


def _undecodable_cell(data: bytes) -> str:
    """`row N, <column>: ` of a CSV's first byte that is not UTF-8 (rows counted as `sheet_changes` counts them,
    the header row 1), or "" where the text cannot be read as CSV rows even so."""
    text = data.decode("utf-8-sig", errors="surrogateescape")  # each undecodable byte as a lone surrogate
    try:
        for number, cells in enumerate(csv.reader(io.StringIO(text, newline="")), start=1):
            for index, cell in enumerate(cells):
                if any("\udc80" <= c <= "\udcff" for c in cell):
                    column = SHEET_COLUMNS[index] if index < len(SHEET_COLUMNS) else f"cell {index + 1}"
                    return f"row {number}, {column}: "
    except csv.Error:
        pass
    return ""


def sheet_changes(pack: ReferencePack, path: Path) -> list[EntryChange]:
    """The changes a filled sheet makes to `pack`; `SheetError` for the first row that cannot be merged."""
    all_rows = list(read_sheet(path))  # bounded by the caps; read whole before anything is written
    rows = iter(all_rows)
    header = next(rows, None)
    if header is None or [h.strip().lower() for h in header] != list(SHEET_COLUMNS):
        raise SheetError(f"{path}: row 1: the header is not the sheet's ({', '.join(SHEET_COLUMNS)})")
    entries = {e.ref: e for e in pack_entries(pack, _sheet_languages(pack, all_rows[1:]))}
    changes: list[EntryChange] = []
    seen: dict[tuple[str, str], int] = {}
    for number, cells in enumerate(rows, start=2):
        if number > MAX_ROWS + 1:
            raise SheetError(f"{path}: more than {MAX_ROWS:,} rows; not a sheet of a pack")
        if not any(c.strip() for c in cells):
            continue
        where = f"{path}: row {number}"
        if len(cells) != len(SHEET_COLUMNS):
            raise SheetError(f"{where}: {len(cells)} cells for the sheet's {len(SHEET_COLUMNS)} columns")
        row = dict(zip(SHEET_COLUMNS, cells, strict=True))
        for column, value in row.items():
            if len(value) > MAX_CELL_CHARS:
                raise SheetError(f"{where}, {column}: longer than {MAX_CELL_CHARS:,} characters")
            # what is merged is the value without its outer whitespace: " =HYPERLINK(...)" is a formula there
            formula = value.startswith(FORMULA_PREFIXES) or value.lstrip().startswith(FORMULA_PREFIXES)
            if column in ("translation", "reviewer", "file", "key", "language") and formula:
                raise SheetError(f"{where}, {column}: {value[:40]!r} starts like a spreadsheet formula; refused")
        ref = (row["file"].strip(), row["key"].strip())
        entry = entries.get(ref)
        if entry is None:
            raise SheetError(
                f"{where}, key: {ref[1][:40]!r} of {ref[0][:60]!r} is no entry of the pack {pack.info.name}"
            )
        if row["language"].strip() != entry.language:
            raise SheetError(
                f"{where}, language: {row['language'][:20]!r}, but {entry.file} is of the language {entry.language!r}"
            )
        if row["english_source"] != entry.source:
            raise SheetError(
                f"{where}, english_source: {row['english_source'][:40]!r} is not this pack's English for {ref[1]} "
                f"({entry.source[:40]!r}): a sheet of another pack, or of another version of {pack.info.name}"
            )
        if ref in seen:
            raise SheetError(f"{where}: {ref[0]} {ref[1]} is also row {seen[ref]}; a sheet lists each entry once")
        seen[ref] = number
        translation = " ".join(row["translation"].split())
        if not translation:
            continue
        reviewer = row["reviewer"].strip()
        changes.append(
            EntryChange(
                file=entry.file,
                key=entry.key,
                value=translation,
                status="native_reviewed" if reviewer else "awaiting_native_review",
                origin="sheet",
                reviewers=1 if reviewer else None,
            )
        )
    return changes


def _sheet_languages(pack: ReferencePack, rows: Sequence[list[str]]) -> list[str]:
    """The languages whose entries a sheet may hold: the pack's countries' and folders' (English too), and any
    language CLDR knows that the sheet's rows name (a sheet may add a language)."""
    from data.reference_parse import known_language

    named = {r[2].strip() for r in rows if len(r) == len(SHEET_COLUMNS)}
    return list(
        dict.fromkeys([*pack.language_codes, *sorted(pack.languages), *sorted(c for c in named if known_language(c))])
    )
