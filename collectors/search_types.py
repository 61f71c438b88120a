"""What every image searcher shares: the query it is asked, the hits it returns, and the error it raises.

Kept apart from `collectors/search.py` (the stage and its backend union) so that a backend module such as
`collectors/search_ddgs.py` can import them at module level: `collectors.search` imports the backends for its
config union, so the backends must not import it back.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from data.image_sources import UNKNOWN_LICENSE

QueryLang = Literal["eng", "nav"]


def query_tag(query_lang: str, language: str, primary: str) -> str:
    """What names a query's images and folder: `eng`, `nav`, or `nav-<code>` for a country's second language."""
    return query_lang if query_lang == "eng" or language == primary else f"nav-{language}"


class SearchQuery(BaseModel):
    model_config = ConfigDict(frozen=True)

    concept_id: int
    concept: str
    country: str
    query: str
    query_lang: QueryLang
    language_code: str
    region: str
    not_searchable: str | None = None  # why this query is recorded as failed without asking the engine
    # The reference pack's slug (its name in lower case, spaces kept, as the authors' ids have it) and ISO code of
    # a 3XCM country; None for another place (a MixCuBe culture), slugged from its name.
    slug: str | None = None
    country_code: str | None = None
    # The query's folder name and id suffix: its `query_lang`, or `nav-<code>` for a language of the country
    # other than its first (a country of several languages: docs/reference-packs.md).
    tag: str | None = None

    @property
    def _country_slug(self) -> str:
        if self.slug:
            return self.slug
        return "-".join("".join(c if c.isalnum() else " " for c in self.country).split())

    @property
    def query_id(self) -> str:
        return f"{self._country_slug}-{self.concept_id}-q-{self.tag or self.query_lang}"

    def image_id(self, rank: int) -> str:
        """`rank` is 1-based: `saudi arabia-0-1-eng` is the top English hit for train (id 0) in Saudi Arabia."""
        if rank < 1:
            raise ValueError(f"ranks are 1-based, got {rank}")
        return f"{self._country_slug}-{self.concept_id}-{rank}-{self.tag or self.query_lang}"


class SearchHit(BaseModel):
    url: str  # what the fetcher reads: a web URL, or a file of a local corpus
    source_page: str | None = None
    title: str | None = None
    width: int | None = None
    height: int | None = None
    # Provenance (docs/release-managers.md, "Image provenance"): what the engine was asked with, and what the
    # source declares.
    region: str | None = None  # the region code the engine searched in; None when it has none (a local folder)
    license_filter: str | None = None  # the engine's licence filter (ddgs `license_image`); None when off
    license: str = UNKNOWN_LICENSE  # as the source declares it (a local manifest's `license` column)
    retrieved_at: str | None = None  # ISO 8601 UTC, as a local manifest declares it
    origin_url: str | None = None  # the image's web URL as a local manifest declares it, when `url` is a local copy


class SearchError(Exception):
    """A search that failed; `kind` is the short class recorded in the `error` column."""

    def __init__(self, kind: str, detail: str = "") -> None:
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind
        self.detail = detail
