"""Where each released image came from: the shared vocabulary of the provenance columns.

Every image row of a release records its source (docs/release-managers.md, "Image provenance"): the search engine,
query, region, language and rank; the source page and the image URL; the final URL after redirects; the retrieval time
in UTC; the HTTP status and declared content type; the licence the source declares (`unknown` when it declares none)
and the licence filter the search used. This module holds what the collectors, the curation and the release cards
share: the `unknown` licence, how a declared retrieval time is normalised, and the host an image URL names. The
cards' licence and domain tables and their bar chart are `data/publish/sources.py`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import urlsplit

#: The licence of an image whose source declares none (a web search hit, a corpus without a `license` column).
UNKNOWN_LICENSE = "unknown"
#: The domain of an image URL that names no web host (a file of a local corpus), and of an image without a URL.
LOCAL_FILE = "(local file)"
NO_URL = "(no URL)"


def declared_license(value: str | None) -> str:
    """A licence as a manifest or labels CSV declares it (trimmed), or `unknown` when it is empty or missing."""
    text = (value or "").strip()
    return text or UNKNOWN_LICENSE


def utc_timestamp(value: str | None) -> str | None:
    """A declared retrieval time as ISO 8601 in UTC (`2024-05-01T10:00:00Z`); None when empty. A time without a UTC
    offset is read as UTC. ValueError when it is not an ISO 8601 date or time."""
    text = (value or "").strip()
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"retrieved_at {text!r} is not an ISO 8601 time (e.g. 2024-05-01T10:00:00Z)") from None
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return moment.isoformat().replace("+00:00", "Z")


def domain(url: str | None) -> str:
    """The host of an image URL, in lower case: `(local file)` for a path or storage URL, `(no URL)` for none."""
    if not url:
        return NO_URL
    parts = urlsplit(url)
    if parts.scheme.lower() in {"http", "https"} and parts.hostname:
        return parts.hostname.lower()
    return LOCAL_FILE
