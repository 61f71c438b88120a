"""Strings from outside (concept names, takedown reasons, model answers) made safe where we write them.

- CSV: a cell that starts with `=`, `+`, `-`, `@`, a tab or a carriage return is a formula to a spreadsheet. Following
  OWASP's "CSV Injection" guidance, such a cell is written with a leading `'`, which spreadsheets show as text.
- Markdown cards: HTML and Markdown syntax in a user-supplied string is escaped, so a takedown reason such as
  `<script>` or `[x](javascript:...)` is shown as the characters it is, never rendered as a tag or a link.
"""

from __future__ import annotations

import html
import re
from typing import Any

FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#!|~])")


def csv_cell(value: Any) -> Any:
    """`value`, with a leading `'` when it is a string a spreadsheet would run as a formula."""
    if isinstance(value, str) and value.startswith(FORMULA_PREFIXES):
        return "'" + value
    return value


def markdown_text(value: Any) -> str:
    """`value` as literal text in Markdown (and in the HTML it renders to), on one line."""
    text = " ".join(str(value).split())
    return _MARKDOWN.sub(r"\\\1", html.escape(text, quote=True))


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
