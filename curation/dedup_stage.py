"""The image dedup stage's inputs and outputs around `decide`: workspace tables in, summaries and a sheet out."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import TypeVar

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from curation.contact_sheet import write_contact_sheet
from curation.embed_images import vectors_in_order
from curation.image_dedup import DedupInputs, DedupResult
from curation.image_thumbnails import Thumbnails, pixel_sha256, thumbnails
from data.schemas import CONCEPT_DEDUP_SUMMARY
from data.workspace import BlobStore, Workspace

_Scalar = TypeVar("_Scalar", bound=np.generic)


def dedup_inputs(
    search: pa.Table,
    images: pa.Table,
    hashes: pa.Table,
    embeddings: pa.Table | None,
    blobs: BlobStore,
    workers: int = 2,
    processes: int = 1,
) -> DedupInputs:
    """One row per hashed image, with the search facts the keep rule needs. Columnar: a million images' rows as
    Python dicts would cost gigabytes."""
    ids_column = hashes["image_id"]
    ids = ids_column.to_pylist()
    hit = _rows_of(search, ids_column, "search")
    facts = _rows_of(images, ids_column, "images")
    stored = StoredThumbnails(blobs, hashes["sha256"].combine_chunks(), hashes["pixel_sha256"].combine_chunks())

    def column(table: pa.Table, name: str, rows: pa.Array, dtype: type[_Scalar]) -> npt.NDArray[_Scalar]:
        return np.asarray(table[name].take(rows).fill_null(0).to_numpy(zero_copy_only=False), dtype=dtype)

    return DedupInputs(
        image_ids=ids,
        concept_ids=column(search, "concept_id", hit, np.int32),
        width=column(images, "width", facts, np.int32),
        height=column(images, "height", facts, np.int32),
        rank=column(search, "rank", hit, np.int32),
        english=np.asarray(pc.equal(search["query_lang"].take(hit), "eng").to_numpy(zero_copy_only=False), bool),
        sha256=hashes["sha256"].to_pylist(),
        phash=np.asarray(hashes["phash"].fill_null(0).to_numpy(zero_copy_only=False), dtype=np.uint64),
        dhash=np.asarray(hashes["dhash"].fill_null(0).to_numpy(zero_copy_only=False), dtype=np.uint64),
        hashed=np.asarray(pc.is_null(hashes["error"]).to_numpy(zero_copy_only=False), dtype=bool),
        embeddings=None if embeddings is None else vectors_in_order(embeddings, ids),
        pixel_hash=stored.pixel_hash,
        align_thumbnail=stored.align,
        chroma_thumbnail=stored.chroma,
        forget_thumbnails=stored.forget,
        draft_decoded=np.asarray(pc.equal(images["format"].take(facts), "JPEG").to_numpy(zero_copy_only=False), bool),
        workers=workers,
        processes=processes,
    )


class StoredThumbnails:
    """Row -> the thumbnails and pixel hash of a stored image, decoded on first use; thumbnails are kept until
    `forget` (after each batch of pairs), pixel hashes for the run. Picklable (the blob store and two Arrow
    columns), so that a worker process of the dedup (`curation/image_dedup.py`) gets one of its own."""

    def __init__(self, blobs: BlobStore, sha256: pa.Array, pixel_sha256: pa.Array) -> None:
        self.blobs = blobs
        self.sha256 = sha256
        self.known = pixel_sha256  # the pixel hashes the hashing stage already computed (null: not yet)
        self._thumbnails: dict[int, Thumbnails] = {}
        self._pixels: dict[int, str] = {}

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "_thumbnails": {}, "_pixels": {}}

    def _thumbs(self, row: int) -> Thumbnails:
        if row not in self._thumbnails:
            self._thumbnails[row] = thumbnails(self.blobs.get(self.sha256[row].as_py()))
        return self._thumbnails[row]

    def align(self, row: int) -> npt.NDArray[np.uint8]:
        return self._thumbs(row).align_input

    def chroma(self, row: int) -> npt.NDArray[np.int8]:
        return self._thumbs(row).chroma_input

    def pixel_hash(self, row: int) -> str:
        if row not in self._pixels:
            known = self.known[row].as_py()
            self._pixels[row] = known or pixel_sha256(self.blobs.get(self.sha256[row].as_py()))
        return self._pixels[row]

    def forget(self) -> None:
        self._thumbnails.clear()


def _rows_of(table: pa.Table, image_ids: pa.ChunkedArray, name: str) -> pa.Array:
    """The row of `table` holding each of `image_ids` (its first), every one present."""
    rows = pc.index_in(image_ids, value_set=table["image_id"])
    if rows.null_count:
        missing = image_ids.filter(pc.is_null(rows))[0]
        raise KeyError(f"{name} has no row for hashed image {missing}")
    return rows


def concept_summary(result: DedupResult, concepts: pa.Table) -> pa.Table:
    """Per concept: images, kept, dropped by tier, merged clusters, the largest one, and pairs left for review."""
    names = dict(zip(concepts["concept_id"].to_pylist(), concepts["concept"].to_pylist(), strict=True))
    counts: dict[int, Counter[str]] = defaultdict(Counter)
    largest: dict[int, int] = defaultdict(int)
    for row in result.decisions.to_pylist():
        c = counts[row["concept_id"]]
        c["images"] += 1
        c["kept" if row["keep"] else f"dropped:{row['method']}"] += 1
        if row["keep"] and row["cluster_size"] > 1:
            c["clusters"] += 1
        largest[row["concept_id"]] = max(largest[row["concept_id"]], row["cluster_size"])
    for concept_id in result.review_queue["concept_id"].to_pylist():
        counts[concept_id]["review_pairs"] += 1
    rows = []
    for concept_id in sorted(counts):
        c = counts[concept_id]
        dropped = {k.split(":", 1)[1]: v for k, v in c.items() if k.startswith("dropped:")}
        rows.append(
            {
                "concept_id": concept_id,
                "concept": names.get(concept_id, str(concept_id)),
                "images": c["images"],
                "kept": c["kept"],
                "dropped": sum(dropped.values()),
                "dropped_by_tier": ", ".join(f"{k}: {v}" for k, v in sorted(dropped.items())) or "-",
                "clusters": c["clusters"],
                "largest_cluster": largest[concept_id],
                "review_pairs": c["review_pairs"],
            }
        )
    return pa.Table.from_pylist(rows, schema=CONCEPT_DEDUP_SUMMARY)


CONTACT_SHEET = "files/contact_sheets/image_dedup.png"


def write_dedup_contact_sheet(decisions: pa.Table, images: pa.Table, ws: Workspace) -> str | None:
    """The largest merged clusters as one PNG; returns its path relative to the workspace (no machine paths)."""
    sha = dict(zip(images["image_id"].to_pylist(), images["sha256"].to_pylist(), strict=True))
    written = write_contact_sheet(
        decisions, lambda image_id: ws.blobs.get(sha[image_id]), ws.storage.path(CONTACT_SHEET)
    )
    return None if written is None else CONTACT_SHEET
