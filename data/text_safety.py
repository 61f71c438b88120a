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
