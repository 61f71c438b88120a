"""Fetch stage: bring each search hit's bytes into the build's blob store, one IMAGES row per hit.

Backends: `local` (embedded default: fsspec paths, for the local-folder searcher; `collectors.importer`) and `http`
(production: the async downloader with its SSRF guard, classified retries and an item-level journal;
`collectors.downloader`). Both write the same rows; each config's `build()` gives a fetcher for the build's workspace.

Hits of a web search are URLs chosen by strangers: only the `http` backend may fetch them (`web_hits_problem`, checked
by the build configs), and the `local` importer refuses any URL that is not on storage (`blocked_protocol`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Protocol

import pyarrow as pa
from pydantic import Field

from collectors.downloader import HttpDownloadConfig
from collectors.importer import ImportConfig
from collectors.search import SearchConfig
from data.workspace import BlobStore

FetchConfig = Annotated[ImportConfig | HttpDownloadConfig, Field(discriminator="backend")]


def web_hits_problem(search: SearchConfig, download: FetchConfig, prefix: str = "") -> str | None:
    """Why this search/download pair is refused, or None. `prefix` locates the sections in the config."""
    if not search.web_hits or download.fetches_web_urls:
        return None
    return (
        f"{prefix}download.backend must be 'http' when {prefix}search.backend is {search.backend!r}: web search hits "
        f"are fetched only by the SSRF-guarded HTTP downloader ({prefix}download: {{backend: http}}); the "
        f"{download.backend!r} backend reads local files"
    )


class Fetcher(Protocol):
    """What `FetchConfig.build()(workspace)` gives: a backend is built from its config and the build's workspace,
    where it may keep state that outlives one stage attempt (the download journal)."""

    def fetch(self, hits: Sequence[Mapping[str, object]], blobs: BlobStore) -> pa.Table: ...
