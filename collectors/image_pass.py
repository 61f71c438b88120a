"""The image pass: the images stage reads each file once and decodes it once, and from those bytes in memory makes
the integrity check, the perceptual hashes and the thumbnails the near-duplicate dedup scores pairs with.

A shard's fetcher stores its images through a `PassBlobs`. The local importer decodes each image once, for its
check (`collectors.image_check.examine_image`), and hands the thumbnails over (`PassBlobs.put_decoded`); for a
fetcher that checks by itself (the HTTP downloader) the thumbnails are cut as it stores the bytes, from the bytes
in memory, never read back. The shard's rows gain the hash columns of IMAGES_PASSED, and the shard's thumbnails are
stored as one blob (an uncompressed .npz of `align` and `chroma`, content-addressed and checked on every read like
any blob), which each row names by `thumbnails` and `thumbnail_row`: the dedup reads them and decodes nothing
(curation/dedup_stage.py).

Why one stage and not a hashing stage after the import: the stage boundary is what made each image be read twice
(once to store it, once from the store to hash it, a third of the hashing's time at 1M once the store outgrew the
page cache) and decoded twice (the check, the thumbnails). docs/contributors.md, "The image pass", says more.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from curation.image_hashing import hash_thumbnails
from curation.image_thumbnails import Thumbnails, thumbnails
from curation.thumbnail_packs import store_thumbnails
from data.row_errors import error_text
from data.schemas import IMAGES_PASSED, STATUS_OK
from data.workspace import BlobStore

if TYPE_CHECKING:
    from collectors.fetch import Fetcher

#: What a stored image's one decode gave: its thumbnails, or the decoder's error (a row, never a crash).
Decoded = Thumbnails | str


def decode_for_pass(data: bytes) -> Thumbnails:
    """The pass's one reduced decode (also the check's, `examine_image`); formats decoded in full give their
    pixel sha256 too."""
    return thumbnails(data, pixel_hash=True)


def try_decode(data: bytes) -> Decoded:
    try:
        return decode_for_pass(data)
    except Exception as exc:  # any decoder failure is a row
        return error_text(exc)


class PassBlobs(BlobStore):
    """The build's blob store, for one shard: what the fetcher stores is decoded once, here or by the fetcher's
    own check, and only the thumbnails are kept (a shard's bytes could be gigabytes). Thread-safe: the downloader
    stores from its check threads."""

    def __init__(self, store: BlobStore) -> None:
        super().__init__(store.storage, store.prefix)
        self._decoded: dict[str, Decoded] = {}
        self._lock = threading.Lock()

    def put(self, data: bytes, digest: str | None = None) -> str:
        sha = super().put(data, digest)
        with self._lock:
            known = sha in self._decoded
        if not known:
            self._keep(sha, try_decode(data))
        return sha

    def put_decoded(self, data: bytes, decoded: Decoded, digest: str | None = None) -> str:
        """Store bytes a fetcher has decoded already (its check was the pass's decode)."""
        sha = super().put(data, digest)
        self._keep(sha, decoded)
        return sha

    def _keep(self, sha: str, decoded: Decoded) -> None:
        with self._lock:
            self._decoded.setdefault(sha, decoded)

    def decoded(self, sha: str) -> Decoded:
        """The decode of a stored image: made in this shard, or (a blob a fetcher found stored already and did not
        store again, say a download resumed from its journal) decoded from the store now."""
        with self._lock:
            found = self._decoded.get(sha)
        if found is None:
            try:
                found = try_decode(self.get(sha))
            except OSError as exc:
                found = error_text(exc)
            self._keep(sha, found)
        return found


def passed_table(images: pa.Table, shard: PassBlobs, store: BlobStore) -> pa.Table:
    """`images` (IMAGES rows, as a fetcher returns them) with the pass's columns; the shard's thumbnails are stored
    in `store` as one blob."""
    stored = pc.equal(images["status"], STATUS_OK).to_pylist()
    shas = images["sha256"].to_pylist()
    rows = [i for i, ok in enumerate(stored) if ok and shas[i] is not None]
    results = [shard.decoded(shas[i]) for i in rows]
    batch = hash_thumbnails([shas[i] for i in rows], results, keep_align=True)
    n = images.num_rows
    phash: list[int | None] = [None] * n
    dhash: list[int | None] = [None] * n
    pixels: list[str | None] = [None] * n
    errors: list[str | None] = [None] * n
    pack_row: list[int | None] = [None] * n
    packed: list[int] = []  # positions in `rows` of the images whose thumbnails are packed
    for k, i in enumerate(rows):
        if batch.errors[k] is not None:
            errors[i] = batch.errors[k]
            continue
        phash[i], dhash[i], pixels[i] = int(batch.phash[k]), int(batch.dhash[k]), batch.pixel_sha256[k]
        pack_row[i] = len(packed)
        packed.append(k)
    key = store_thumbnails(store, batch.align, batch.chroma, packed) if packed else None
    columns = {
        "phash": pa.array(phash, pa.uint64()),
        "dhash": pa.array(dhash, pa.uint64()),
        "pixel_sha256": pa.array(pixels, pa.string()),
        "hash_error": pa.array(errors, pa.string()),
        "thumbnails": pa.array([key if r is not None else None for r in pack_row], pa.string()),
        "thumbnail_row": pa.array(pack_row, pa.int32()),
    }
    table = images
    for name, column in columns.items():
        table = table.append_column(IMAGES_PASSED.field(name), column)
    return table.select(IMAGES_PASSED.names)


class ImagePass:
    """What the images stage runs per shard: the build's fetcher, through a `PassBlobs`."""

    def __init__(self, fetcher: Fetcher, store: BlobStore) -> None:
        self.fetcher = fetcher
        self.store = store

    def __call__(self, hits: Sequence[Mapping[str, object]]) -> pa.Table:
        shard = PassBlobs(self.store)
        return passed_table(self.fetcher.fetch(hits, shard), shard, self.store)
