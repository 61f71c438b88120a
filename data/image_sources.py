"""Where each released image came from: the shared vocabulary of the provenance columns, and the card's summary.

Every image row of a release records its source (README "Releases", "Image provenance"): the search engine, query,
region, language and rank; the source page and the image URL; the final URL after redirects; the retrieval time in
UTC; the HTTP status and declared content type; the licence the source declares (`unknown` when it declares none)
and the licence filter the search used. This module holds what the collectors, the curation and both release
writers share: the `unknown` licence, how a declared retrieval time is normalised, and the cards' licence and
domain tables and their bar chart.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime
from urllib.parse import urlsplit

from data.card import markdown_table

#: The licence of an image whose source declares none (a web search hit, a corpus without a `license` column).
UNKNOWN_LICENSE = "unknown"
#: The domain of an image URL that names no web host (a file of a local corpus), and of an image without a URL.
LOCAL_FILE = "(local file)"
NO_URL = "(no URL)"
TOP_DOMAINS = 10
DOMAINS_FIGURE = "figures/source_domains.png"


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


def license_rows(licenses: Iterable[str | None], unit: str = "images") -> list[dict]:
    """One row per licence with its count, the most frequent first (ties by name)."""
    counts = Counter(declared_license(value) for value in licenses)
    return [{"license": name, unit: n} for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def domain_counts(urls: Iterable[str | None], top: int = TOP_DOMAINS) -> dict[str, int]:
    """The `top` most frequent image URL hosts with their counts, the most frequent first (ties by name); the rest
    are summed under `(other domains)`."""
    ranked = sorted(Counter(domain(url) for url in urls).items(), key=lambda kv: (-kv[1], kv[0]))
    counts = dict(ranked[:top])
    rest = sum(n for _, n in ranked[top:])
    if rest:
        counts["(other domains)"] = rest
    return counts


def domains_png(urls: Iterable[str | None], unit: str = "images", top: int = TOP_DOMAINS) -> bytes:
    """A bar chart of the top image URL hosts (byte-stable for the same URLs)."""
    from data.figures import bars_png  # matplotlib: only the release writers draw, not the collectors

    return bars_png(domain_counts(urls, top), f"{unit.capitalize()} by source domain (top {top})")


def sources_section(licenses: list[str | None], urls: list[str | None], unit: str = "images", note: str = "") -> str:
    """The card's provenance summary: the licences with their counts and the top source domains, with the bar chart
    at `DOMAINS_FIGURE` (written by the release)."""
    domains = [{"domain": name, unit: n} for name, n in domain_counts(urls).items()]
    return f"""## Sources and licences

Every image row records where it came from: `engine`, `query`, `region`, the query language, `rank`, `source_page`,
`url`, `final_url` (after redirects), `retrieved_at` (UTC), `http_status`, `content_type`, `license` (as the source
declares it, `{UNKNOWN_LICENSE}` when it declares none) and `license_filter` (the search engine's licence filter).
A licence filter is a search setting, not a licence: check each image's terms before reuse.
{note}

### Licences

{markdown_table(license_rows(licenses, unit))}
### Top {TOP_DOMAINS} source domains (by image URL host)

{markdown_table(domains)}
![{unit.capitalize()} by source domain]({DOMAINS_FIGURE})
"""
