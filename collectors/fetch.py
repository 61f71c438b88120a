"""Fetch stage: bring each search hit's bytes into the build's blob store, one IMAGES row per hit.

Backends: `local` (embedded default: fsspec paths, for the local-folder searcher) and `http` (production: the async
downloader with its SSRF guard, classified retries and an item-level journal). Both write the same rows.

Hits of a web search are URLs chosen by strangers: only the `http` backend may fetch them (`web_hits_problem`, checked
by the build configs), and the `local` importer refuses any URL that is not on storage (`blocked_protocol`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Protocol

import pyarrow as pa
from pydantic import Field

from collectors.downloader import DownloadJournal, HttpDownloadConfig, download_hits
from collectors.importer import ImportConfig, import_hits
from data.stage import Registry
from data.workspace import BlobStore, Workspace

FetchConfig = Annotated[ImportConfig | HttpDownloadConfig, Field(discriminator="backend")]
# Searchers whose hits are local files; every other searcher returns web URLs.
LOCAL_SEARCH_BACKENDS = frozenset({"local"})


def web_hits_problem(search_backend: str, download_backend: str, prefix: str = "") -> str | None:
    """Why this search/download pair is refused, or None. `prefix` locates the sections in the config."""
    if search_backend in LOCAL_SEARCH_BACKENDS or download_backend == "http":
        return None
    return (
        f"{prefix}download.backend must be 'http' when {prefix}search.backend is {search_backend!r}: web search hits "
        f"are fetched only by the SSRF-guarded HTTP downloader ({prefix}download: {{backend: http}}); the "
        f"{download_backend!r} backend reads local files"
    )


class Fetcher(Protocol):
    def fetch(self, hits: Sequence[dict], blobs: BlobStore) -> pa.Table: ...


# A backend is built from its config and the build's workspace, where it may keep state that outlives one
# stage attempt (the download journal).
fetchers: Registry[Callable[[Workspace], Fetcher]] = Registry("download")


class LocalImporter:
    def __init__(self, config: ImportConfig) -> None:
        self.config = config

    def fetch(self, hits: Sequence[dict], blobs: BlobStore) -> pa.Table:
        return import_hits(hits, blobs, self.config.limits)


class HttpFetcher:
    def __init__(self, config: HttpDownloadConfig, ws: Workspace) -> None:
        self.config = config
        # Outside the stage folder: a new attempt (say `retry_failed`) still knows every URL already fetched.
        self.journal = DownloadJournal(ws.storage, "files/download_journal")

    def fetch(self, hits: Sequence[dict], blobs: BlobStore) -> pa.Table:
        return download_hits(hits, blobs, self.config, journal=self.journal)


@fetchers.register("local")
def _local(config: ImportConfig) -> Callable[[Workspace], Fetcher]:
    return lambda ws: LocalImporter(config)


@fetchers.register("http")
def _http(config: HttpDownloadConfig) -> Callable[[Workspace], Fetcher]:
    return lambda ws: HttpFetcher(config, ws)
