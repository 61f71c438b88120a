"""The image dedup stage's inputs and outputs around `decide`: workspace tables in, summaries and a sheet out."""

from __future__ import annotations

import os
import tempfile
from collections import Counter, defaultdict
from typing import TypeVar

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from curation.contact_sheet import write_contact_sheet
from curation.embed_images import vectors_in_order
from curation.image_dedup import DedupInputs, DedupResult
from curation.image_thumbnails import ALIGN_SIDE, CHROMA_SIDE, pixel_sha256
from curation.thumbnail_packs import read_thumbnails
from data.schemas import CONCEPT_DEDUP_SUMMARY
from data.workspace import BlobStore, Workspace

_Scalar = TypeVar("_Scalar", bound=np.generic)


def dedup_inputs(
    search: pa.Table,
    stored: pa.Table,
    embeddings: pa.Table | None,
    blobs: BlobStore,
    workers: int = 2,
    processes: int = 1,
) -> DedupInputs:
    """One row per stored image (`stored`: the images stage's ok rows, with the image pass's hashes), with the
    search facts the keep rule needs. Columnar: a million images' rows as Python dicts would cost gigabytes."""
    ids_column = stored["image_id"]
    ids = ids_column.to_pylist()
    hit = _rows_of(search, ids_column, "search")
    thumbs = StoredThumbnails(
        blobs,
        stored["thumbnails"].combine_chunks(),
        stored["thumbnail_row"].combine_chunks(),
        stored["sha256"].combine_chunks(),
        stored["pixel_sha256"].combine_chunks(),
    )

    def column(table: pa.Table, name: str, rows: pa.Array | None, dtype: type[_Scalar]) -> npt.NDArray[_Scalar]:
        values = table[name] if rows is None else table[name].take(rows)
        return np.asarray(values.fill_null(0).to_numpy(zero_copy_only=False), dtype=dtype)

    return DedupInputs(
        image_ids=ids,
        concept_ids=column(search, "concept_id", hit, np.int32),
        width=column(stored, "width", None, np.int32),
        height=column(stored, "height", None, np.int32),
        rank=column(search, "rank", hit, np.int32),
        english=np.asarray(pc.equal(search["query_lang"].take(hit), "eng").to_numpy(zero_copy_only=False), bool),
        sha256=stored["sha256"].to_pylist(),
        phash=column(stored, "phash", None, np.uint64),
        dhash=column(stored, "dhash", None, np.uint64),
        hashed=np.asarray(pc.is_null(stored["hash_error"]).to_numpy(zero_copy_only=False), dtype=bool),
        embeddings=None if embeddings is None else vectors_in_order(embeddings, ids),
        pixel_hash=thumbs.pixel_hash,
        align_thumbnail=thumbs.align,
        chroma_thumbnail=thumbs.chroma,
        forget_thumbnails=thumbs.forget,
        prepare_thumbnails=thumbs.prepare,
        draft_decoded=np.asarray(pc.equal(stored["format"], "JPEG").to_numpy(zero_copy_only=False), bool),
        workers=workers,
        processes=processes,
    )


class StoredThumbnails:
    """Row -> the thumbnails the image pass stored for it (collectors/image_pass.py); nothing is decoded here but
    the full decode of the exact-pixel tier (`pixel_hash`), for the few pairs whose thumbnails are equal.

    The pass stored one blob per shard of the search's order (country by country), while pairs are within a concept,
    spread over every country: reading a shard's blob for each pair would read each blob many times. So `prepare`
    gathers the rows the pairs need in one sweep over their blobs, each read (and checked) once, into a scratch
    file of fixed-size slots, which the batches read by row (a `pread` each; no blob, and no more than one slot,
    is held in memory). Picklable (the blob store, Arrow columns and the scratch file's name), so that a worker
    process of the dedup (`curation/image_dedup.py`) reads the same slots."""

    SLOT = ALIGN_SIDE * ALIGN_SIDE + 2 * CHROMA_SIDE * CHROMA_SIDE  # bytes: align, then chroma

    def __init__(
        self, blobs: BlobStore, packs: pa.Array, pack_rows: pa.Array, sha256: pa.Array, pixel_sha256: pa.Array
    ) -> None:
        self.blobs = blobs
        self.packs = packs
        self.pack_rows = pack_rows
        self.sha256 = sha256
        self.known = pixel_sha256  # the pixel hashes the pass already computed (null: not yet)
        self.slots = np.full(len(packs), -1, dtype=np.int64)  # row -> its slot in the scratch file; -1: none
        self._scratch: tempfile._TemporaryFileWrapper[bytes] | None = None
        self._path: str | None = None
        self._fd: int | None = None
        self._pixels: dict[int, str] = {}

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "_scratch": None, "_fd": None, "_pixels": {}}

    def prepare(self, rows: npt.NDArray[np.int64]) -> None:
        """Gather the thumbnails of `rows` not gathered yet: each blob that holds some is read once."""
        rows = rows[self.slots[rows] < 0]
        if not len(rows):
            return
        if self._scratch is None:
            self._scratch = tempfile.NamedTemporaryFile(prefix="culturebench-thumbnails-", suffix=".bin")  # noqa: SIM115
            self._path = self._scratch.name
        keys = self.packs.take(pa.array(rows)).to_pylist()
        missing = [int(r) for r, key in zip(rows.tolist(), keys, strict=True) if key is None]
        if missing:
            raise KeyError(f"image row {missing[0]} has no stored thumbnails (its decode failed)")
        by_pack: dict[str, list[int]] = defaultdict(list)
        for row, key in zip(rows.tolist(), keys, strict=True):
            by_pack[key].append(row)
        handle = self._scratch.file
        next_slot = int(self.slots.max()) + 1
        handle.seek(next_slot * self.SLOT)
        for key, members in by_pack.items():
            pack = read_thumbnails(self.blobs.get(key), key)
            at = self.pack_rows.take(pa.array(members)).to_numpy()
            align, chroma = pack["align"][at], pack["chroma"][at]
            slots = np.concatenate([align.reshape(len(at), -1), chroma.reshape(len(at), -1).view(np.uint8)], axis=1)
            handle.write(np.ascontiguousarray(slots).tobytes())
            self.slots[members] = np.arange(next_slot, next_slot + len(members))
            next_slot += len(members)
        handle.flush()

    def _slot(self, row: int) -> bytes:
        slot = int(self.slots[row])
        if slot < 0:
            raise KeyError(f"image row {row}: thumbnails read before they were prepared")
        if self._fd is None:
            assert self._path is not None
            self._fd = os.open(self._path, os.O_RDONLY)
        return os.pread(self._fd, self.SLOT, slot * self.SLOT)

    def align(self, row: int) -> npt.NDArray[np.uint8]:
        data = self._slot(row)
        return np.frombuffer(data, np.uint8, ALIGN_SIDE * ALIGN_SIDE).reshape(ALIGN_SIDE, ALIGN_SIDE)

    def chroma(self, row: int) -> npt.NDArray[np.int8]:
        data = self._slot(row)
        return np.frombuffer(data, np.int8, offset=ALIGN_SIDE * ALIGN_SIDE).reshape(2, CHROMA_SIDE, CHROMA_SIDE)

    def pixel_hash(self, row: int) -> str:
        if row not in self._pixels:
            known = self.known[row].as_py()
            self._pixels[row] = known or pixel_sha256(self.blobs.get(self.sha256[row].as_py()))
        return self._pixels[row]

    def forget(self) -> None:
        """Nothing is cached (a slot is read per call; the scorer keeps what it prepared until its batch ends): only
        the scratch file's reader is closed, and opened again at the next read."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


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
