"""The CHANGELOG that ends a patch's card: every takedown so far, the latest first.

Every string in it came from a takedown request or a release (the earlier takedowns from the parent's manifest), so
each is escaped: plain text by `markdown_text`, ids, sha256 and URLs as one-line code spans (`code_span`), and our
own summaries, which hold code spans, by `markdown_prose`. None can open a tag, a link, a line or a table cell.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from data.publish.card import markdown_table
from data.publish.manifest import TakedownRecord
from data.text_safety import code_span as code_span  # re-exported: the patch cards import it from here
from data.text_safety import markdown_text


def _cell(value: Any) -> str:
    return "-" if value in (None, "") else code_span(value)


def _prose_text(part: str) -> str:
    escaped = html.escape(part.replace("\\", "\\\\"), quote=False)
    return escaped.replace("[", "\\[").replace("]", "\\]")


def markdown_prose(value: Any) -> str:
    """Text we wrote that holds code spans (a takedown's row summary, read back from a parent's manifest for the
    earlier takedowns, so possibly anything): on one line, with HTML escaped and no link or image syntax outside
    the code spans, and each code span made safe as `code_span` makes it. Our own summaries come out unchanged."""
    parts = " ".join(str(value).split()).split("`")
    tail = ""
    if len(parts) % 2 == 0:  # an unmatched backtick: what follows it is text, the backtick shown as one
        tail = "\\`" + _prose_text(parts.pop())
    return "".join(code_span(p) if i % 2 else _prose_text(p) for i, p in enumerate(parts)) + tail


def render_changelog(takedowns: Sequence[TakedownRecord]) -> str:
    """The card's CHANGELOG: every takedown so far, the latest first. Every string in it came from a takedown
    request or a release (the earlier takedowns from the parent's manifest): each is escaped (`markdown_text`,
    `code_span`, `markdown_prose`), so none can open a tag, a link, a line or a table cell."""
    parts = ["\n## CHANGELOG\n"]
    for record in reversed(takedowns):
        removed = [
            {
                "image id": _cell(image.image_id),
                "sha256": _cell(image.sha256),
                "URL": _cell(image.url)
                + (f" (final: {_cell(image.final_url)})" if image.final_url not in (None, image.url) else ""),
                "why": markdown_text(image.why),
            }
            for image in record.removed
        ]
        parts.append(
            f"\n### {markdown_text(record.version)} ({markdown_text(record.date)}, UTC)\n\n"
            f"Taken down from {markdown_text(record.parent)}. Reason: {markdown_text(record.reason)}\n\n"
            f"{markdown_table(removed)}\n{markdown_prose(record.rows.summary)}\n"
        )
    parts.append(
        "\nThe sha256 and URLs of every removed image are on the denylist of the release root "
        "(`denylist.json` next to the version folders); later builds drop those images before they can reach a "
        "release.\n"
    )
    return "".join(parts)
