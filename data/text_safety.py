"""Strings from outside (concept names, takedown reasons, model answers, release values) made safe where we write them.

- CSV and TSV: a cell that starts with `=`, `+`, `-`, `@`, a tab or a carriage return is a formula to a spreadsheet.
  Following OWASP's "CSV Injection" guidance, such a cell is written with a leading `'`, which spreadsheets show as
  text. Every CSV or TSV file we write goes through `csv_bytes` (or `csv_safe_table` for pyarrow's writer).
- Markdown cards: HTML and Markdown syntax in a user-supplied string is escaped, so a takedown reason such as
  `<script>` or `[x](javascript:...)` is shown as the characters it is, never rendered as a tag or a link; control
  and format characters (ESC, the bidi overrides such as U+202E, zero-width marks) are shown as `\\uXXXX`, so no
  terminal sequence or reordering reaches a reader.
"""

from __future__ import annotations

import csv
import html
import io
import re
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#!|~])")
#: Inside a code span Markdown and HTML are not interpreted; these would end the span, the table cell or the line,
#: or be taken for a tag by a renderer that does not honour code spans: percent-encoded, as in a URL.
_CODE_SPAN_ENCODED = {"|": "%7C", "`": "%60", "<": "%3C", ">": "%3E"}
#: Format characters that words of some scripts need (ZWNJ in Persian, ZWJ in Indic scripts and emoji): kept.
_JOINERS = frozenset("\u200c\u200d")


def csv_cell(value: Any) -> Any:
    """`value`, with a leading `'` when it is a string a spreadsheet would run as a formula."""
    if isinstance(value, str) and value.startswith(FORMULA_PREFIXES):
        return "'" + value
    return value


def csv_bytes(header: Sequence[str], rows: Iterable[Sequence[Any]], delimiter: str = ",") -> bytes:
    """A CSV (or, with a tab, TSV) file as UTF-8 bytes, every cell through `csv_cell`: the one writer of the CSV and
    TSV files we publish (release tables, harness exports, the concept review file)."""
    text = io.StringIO()
    writer = csv.writer(text, delimiter=delimiter, lineterminator="\n")
    writer.writerow([csv_cell(name) for name in header])
    writer.writerows([csv_cell(value) for value in row] for row in rows)
    return text.getvalue().encode("utf-8")


def _hidden(c: str) -> bool:
    """A control or format character (a line break, ESC, DEL, a bidi override, a zero-width mark, half of a byte
    that was not UTF-8): it changes how the text around it reads, or ends a line in another format."""
    return unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp", "Cs") and c not in _JOINERS


def hidden_character(text: str) -> str | None:
    """The first control or format character of `text` as `U+XXXX`, or None."""
    return next((f"U+{ord(c):04X}" for c in text if _hidden(c)), None)


def visible(text: str) -> str:
    """`text` with each control or format character written as the escape `\\uXXXX`."""
    return "".join(f"\\u{ord(c):04x}" if _hidden(c) else c for c in text)


def markdown_text(value: Any) -> str:
    """`value` as literal text in Markdown (and in the HTML it renders to), on one line, control and format
    characters shown as escapes."""
    text = visible(" ".join(str(value).split()))
    return _MARKDOWN.sub(r"\\\1", html.escape(text, quote=True))


def code_span(value: Any) -> str:
    """`value` as inline code on one line that nothing can leave: an id, a sha256, a path or a URL shown as it is (a
    plain value unchanged), with `|`, a backtick, `<` and `>` percent-encoded and control and format characters
    shown as escapes."""
    text = visible(" ".join(str(value).split()))
    return "`" + "".join(_CODE_SPAN_ENCODED.get(c, c) for c in text) + "`"


def csv_safe_table(table: Any) -> Any:
    """A pyarrow table whose string cells that a spreadsheet would run as formulas start with `'` (see `csv_cell`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    pattern = "^[" + "".join("\\" + p if p in "-" else p for p in FORMULA_PREFIXES) + "]"
    for at, field in enumerate(table.schema):
        if pa.types.is_string(field.type) or pa.types.is_large_string(field.type):
            column = table.column(at)
            formula = pc.fill_null(pc.match_substring_regex(column, pattern), False)
            if pc.any(formula).as_py():
                quoted = pc.binary_join_element_wise("'", column, "")
                table = table.set_column(at, field, pc.if_else(formula, quoted, column))
    return table
