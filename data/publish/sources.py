"""The card's sources section: the licences the images' sources declare and the hosts their URLs name, with a bar
chart of the top hosts (the provenance columns' vocabulary is `data/image_sources.py`, which the collectors share)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from data.image_sources import UNKNOWN_LICENSE, declared_license, domain
from data.publish.card import markdown_table

TOP_DOMAINS = 10
DOMAINS_FIGURE = "figures/source_domains.png"


def license_rows(licenses: Iterable[str | None], unit: str = "images") -> list[dict[str, str | int]]:
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
    from data.figures import bars_png  # matplotlib: imported when a card is drawn

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
