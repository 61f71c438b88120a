"""Import stage: fetch each search hit's bytes from an fsspec path, check them, store them by sha256.

This is the embedded counterpart of the HTTP downloader: same output rows, same failure classes for the image
checks, plus `not_found` and `read_error` for paths that cannot be read, and `blocked_protocol` for a URL that is
not on storage (http, ftp, a chained fsspec URL, ...): fsspec would fetch it with none of the downloader's SSRF
checks, so it is refused as a row and never opened.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar, Literal

import fsspec
import pyarrow as pa
from fsspec.core import split_protocol
from pydantic import Field

from collectors.image_check import DecodeFailed, ImageLimits, ImageRejected, examine_image, inspect_image
from collectors.image_pass import Decoded, PassBlobs, decode_for_pass
from collectors.ssrf import storage_refusal
from data.row_errors import error_text
from data.schemas import IMAGES, STATUS_FAILED, STATUS_OK, ImagesRow, fetched_url, from_rows, images_row, str_cell
from data.stage import BackendConfig
from data.workspace import BlobStore, Workspace


# A fetcher is built for the build's workspace (`collectors.fetch.Fetcher`).
class ImportConfig(BackendConfig["Callable[[Workspace], LocalImporter]"]):
    #: Reads storage only: web search hits must go to the SSRF-guarded HTTP downloader (`web_hits_problem`).
    fetches_web_urls: ClassVar[bool] = False
    cpu_bound: ClassVar[bool] = True  # reads and decodes files: no host to be polite to

    backend: Literal["local"] = "local"
    limits: ImageLimits = Field(default_factory=ImageLimits)
    shard_size: int = Field(default=256, ge=1, description="Hits per resumable part.")

    def build(self) -> Callable[[Workspace], LocalImporter]:
        return lambda ws: LocalImporter(self)


class ProtocolRefused(Exception):
    """A URL fsspec would fetch from a network host (see `collectors.ssrf.storage_refusal`)."""


def read_limited(url: str, max_bytes: int) -> bytes:
    """Read at most max_bytes + 1 bytes, so an oversized body is detected without reading all of it.

    Only storage URLs are opened: the check sits here, next to the only `fsspec.open` of a hit's URL.
    """
    refusal = storage_refusal(url)
    if refusal is not None:
        raise ProtocolRefused(
            f"{refusal}; web URLs are fetched only by the SSRF-guarded HTTP downloader (download.backend: http)"
        )
    if split_protocol(url)[0] is None:  # a plain path: the os's open, not fsspec's wrappers (per image)
        with open(url, "rb") as local:
            return local.read(max_bytes + 1)
    with fsspec.open(url, "rb") as handle:
        data: bytes = handle.read(max_bytes + 1)
        return data


def import_hits(hits: Sequence[Mapping[str, object]], blobs: BlobStore, limits: ImageLimits) -> pa.Table:
    # The shard's blobs are flushed to disk once, together, before its part records them.
    with blobs.storage.deferred_sync():
        return _import_hits(hits, blobs, limits)


def _import_hits(hits: Sequence[Mapping[str, object]], blobs: BlobStore, limits: ImageLimits) -> pa.Table:
    rows: list[ImagesRow] = []
    passing = blobs if isinstance(blobs, PassBlobs) else None
    for hit in hits:
        decoded: Decoded | None = None
        image_id, url = str_cell(hit, "image_id"), str_cell(hit, "url")
        row = images_row(image_id, fetched_url(url, STATUS_OK, attempts=1))
        try:
            data = read_limited(url, limits.max_bytes)
            row["num_bytes"] = len(data)
            if passing is not None:  # the image pass: the check's decode is the one the hashes come from
                try:
                    info, decoded = examine_image(data, limits, decode_for_pass)
                except DecodeFailed as failed:
                    info, decoded = failed.info, error_text(failed.error)
            else:
                info = inspect_image(data, limits)
        except ProtocolRefused as exc:
            # Nothing was opened: attempts 0, as the downloader records a URL it refused.
            row.update({"status": STATUS_FAILED, "error": "blocked_protocol", "detail": str(exc), "attempts": 0})
        except FileNotFoundError as exc:
            row.update({"status": STATUS_FAILED, "error": "not_found", "detail": str(exc)})
        except ImageRejected as exc:
            row.update({"status": STATUS_FAILED, "error": exc.error, "detail": exc.detail})
        except OSError as exc:
            row.update({"status": STATUS_FAILED, "error": "read_error", "detail": f"{type(exc).__name__}: {exc}"})
        else:
            sha = blobs.put(data) if passing is None or decoded is None else passing.put_decoded(data, decoded)
            row.update({"sha256": sha, "width": info.width, "height": info.height, "format": info.format})
        rows.append(row)
    return from_rows(rows, IMAGES)


class LocalImporter:
    """The `local` fetcher: hits on storage, read through fsspec."""

    def __init__(self, config: ImportConfig) -> None:
        self.config = config

    def fetch(self, hits: Sequence[Mapping[str, object]], blobs: BlobStore) -> pa.Table:
        return import_hits(hits, blobs, self.config.limits)
