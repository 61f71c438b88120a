"""MixCuBe originals from an image search and the downloader (MixCuBe §2: web scraping plus manual search).

One query per culture x category from a configurable template, the top `per_cell` hits through the same searcher
and fetcher the 3XCM stages use (DuckDuckGo via ddgs, the SSRF-checked HTTP downloader), each hit a row of
MIXCUBE_ORIGINALS: the image, or why there is none (the search failed, the download failed with its class, the
image is too small). The templates are ours, not the paper's (which gives none); App. A.3's criteria (a visible
person, a clear cultural marker) are not judged by a search engine, so the face stage checks the first and
reviewers the second. Food names cannot come from a search: `food_label` stays empty for these rows.

Every row records its provenance (docs/release-managers.md, "Image provenance"): the engine, query, its language,
region, 1-based rank, source page, image URL, licence filter and declared licence (`unknown` for a web hit) from the
search, and the final URL, HTTP status, content type and retrieval time from the fetch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Literal, NoReturn

import pyarrow as pa
from pydantic import Field

from collectors.downloader import HttpDownloadConfig
from collectors.fetch import Fetcher
from collectors.importer import ImportConfig
from collectors.mixcube_originals import MIN_SIDE, cells, original_row
from collectors.search import SearchConfig, Searcher
from collectors.search_ddgs import DdgsSearchConfig
from collectors.search_types import SearchError, SearchHit, SearchQuery
from data import schemas
from data.reference import MixCubeCulture, MixCubeReference
from data.schemas import STATUS_FAILED, STATUS_OK, ImagesRow
from data.stage import BackendConfig
from data.workspace import BlobStore

DEFAULT_QUERIES = {
    "Food": "{adjective} people eating traditional food",
    "Festival": "{adjective} people at a traditional festival",
    "Clothes": "{adjective} people wearing traditional clothes",
}


class SearchOriginalsConfig(BackendConfig[NoReturn]):  # read by search_originals
    backend: Literal["search"] = "search"
    search: SearchConfig = Field(default_factory=DdgsSearchConfig, description="The image search engine.")
    download: HttpDownloadConfig | ImportConfig = Field(
        default_factory=HttpDownloadConfig, description="How hits are fetched (the HTTP downloader)."
    )
    queries: dict[str, str] = Field(
        default_factory=lambda: dict(DEFAULT_QUERIES),
        description="Query template per category; {culture} and {adjective} are filled in.",
    )
    per_cell: int = Field(default=33, ge=1, description="Hits kept per culture x category (MixCuBe §2: 33).")
    cultures: list[str] | None = Field(default=None, description="Culture names; default all five.")
    categories: list[str] | None = Field(default=None, description="Categories; default Food, Festival, Clothes.")
    region: str = Field(default="wt-wt", description="Search region (DuckDuckGo's `kl`).")

    @property
    def demo_seed(self) -> int | None:
        """The seed of generated originals, for provenance: None, these are search hits."""
        return None

    def wanted_cells(self, mix: MixCubeReference) -> list[tuple[MixCubeCulture, str]]:
        """The culture x category cells the build aims to fill: the ones searched."""
        return cells(mix, self.cultures, self.categories)


def _queries(config: SearchOriginalsConfig, mix: MixCubeReference) -> list[tuple[MixCubeCulture, str, SearchQuery]]:
    out = []
    for culture, category in cells(mix, config.cultures, config.categories):
        template = config.queries.get(category)
        if template is None:
            raise ValueError(f"originals.queries has no template for {category!r}")
        query = SearchQuery(
            concept_id=mix.categories.index(category),
            concept=category,
            country=culture.name,
            query=template.format(culture=culture.name, adjective=culture.adjective),
            query_lang="eng",
            language_code="en",
            region=config.region,
        )
        out.append((culture, category, query))
    return out


def search_originals(
    config: SearchOriginalsConfig, searcher: Searcher, fetcher: Fetcher, blobs: BlobStore, mix: MixCubeReference
) -> pa.Table:
    """MIXCUBE_ORIGINALS rows for every hit and every failed query, for the cultures and categories of `mix`."""
    rows: list[dict[str, object]] = []
    hits: list[dict[str, str]] = []
    meta: dict[str, dict[str, str | int | None]] = {}
    publish = config.search.url_publisher()  # a local corpus's files are published relative to its folder
    for culture, category, query in _queries(config, mix):
        asked = {"engine": searcher.name, "query": query.query, "query_language": query.language_code}
        base: dict[str, str | int | None] = {
            "culture": culture.name,
            "country": culture.adjective,
            "category": category,
        }
        cell = f"search-{culture.iso2.lower()}-{category.lower()}"
        try:
            found = searcher.search(query, config.per_cell)[: config.per_cell]
            if not found:
                raise SearchError("no_results", "the engine returned no images")
        except SearchError as exc:
            rows.append(_failed(cell, {**base, **asked}, f"search:{exc.kind}", query.query))
            continue
        for rank, hit in enumerate(found):
            image_id = f"{cell}-{rank:03d}"
            hits.append({"image_id": image_id, "url": hit.url})
            meta[image_id] = {**base, **asked, **_hit_source(hit, rank + 1, publish)}
    fetched = fetcher.fetch(hits, blobs).to_pylist() if hits else []
    for image in fetched:
        base = {**meta[image["image_id"]], **_fetch_source(image, meta[image["image_id"]])}
        if image["status"] != STATUS_OK:
            rows.append(_failed(image["image_id"], base, image["error"], image["url"]))
        elif min(image["width"], image["height"]) < MIN_SIDE:
            rows.append(_failed(image["image_id"], base, "too_small", image["url"]))
        else:
            rows.append(
                original_row(
                    original_id=image["image_id"],
                    source=image["url"],
                    status=STATUS_OK,
                    sha256=image["sha256"],
                    width=image["width"],
                    height=image["height"],
                    format=image["format"],
                    **base,
                )
            )
    return schemas.from_rows(rows, schemas.MIXCUBE_ORIGINALS)


def _hit_source(hit: SearchHit, rank: int, publish: Callable[[str], str]) -> dict[str, str | int | None]:
    """What the search says of a hit: where it was found, and under which licence and filter."""
    return {
        "region": hit.region,
        "rank": rank,  # 1-based, as 3XCM's ranks
        "source_page": hit.source_page,
        "url": hit.origin_url or publish(hit.url),
        "license": hit.license,
        "license_filter": hit.license_filter,
        "retrieved_at": hit.retrieved_at,  # a local manifest's declaration; else the fetch's, below
    }


def _fetch_source(image: ImagesRow, hit: Mapping[str, str | int | None]) -> dict[str, str | int | None]:
    """What the fetch says of a hit (IMAGES columns): the HTTP downloader's final URL, status, content type and time."""
    return {
        "final_url": image["final_url"],
        "http_status": image["http_status"],
        "content_type": image["content_type"],
        "retrieved_at": hit["retrieved_at"] or image.get("retrieved_at"),
    }


def _failed(original_id: str, base: Mapping[str, object], error: str, source: str) -> dict[str, object]:
    return original_row(original_id=original_id, source=source, status=STATUS_FAILED, error=error, **base)
