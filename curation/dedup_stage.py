"""The image dedup stage's inputs and outputs around `decide`: workspace tables in, summaries and a sheet out."""

from __future__ import annotations

from collections import Counter, defaultdict
from functools import cache

import numpy as np
import pyarrow as pa

from curation.contact_sheet import write_contact_sheet
from curation.embed_images import vectors_in_order
from curation.image_dedup import DedupInputs, DedupResult
from curation.image_thumbnails import Thumbnails, pixel_sha256, thumbnails
from data.schemas import CONCEPT_DEDUP_SUMMARY
from data.workspace import BlobStore, Workspace


def dedup_inputs(
    search: pa.Table,
    images: pa.Table,
    hashes: pa.Table,
    embeddings: pa.Table | None,
    blobs: BlobStore,
    workers: int = 2,
) -> DedupInputs:
    """One row per hashed image, with the search facts the keep rule needs."""
    hits = {h["image_id"]: h for h in search.select(["image_id", "concept_id", "rank", "query_lang"]).to_pylist()}
    columns = images.select(["image_id", "width", "height", "format"]).to_pylist()
    sizes = {i["image_id"]: (i["width"], i["height"]) for i in columns}
    formats = {i["image_id"]: i["format"] for i in columns}
    rows = hashes.to_pylist()
    ids = [r["image_id"] for r in rows]
    sha = [r["sha256"] for r in rows]

    known = [r["pixel_sha256"] for r in rows]

    @cache
    def pixels(row: int) -> str:
        return known[row] or pixel_sha256(blobs.get(sha[row]))

    @cache
    def thumbs(row: int) -> Thumbnails:
        return thumbnails(blobs.get(sha[row]))

    return DedupInputs(
        image_ids=ids,
        concept_ids=np.array([hits[i]["concept_id"] for i in ids], dtype=np.int32),
        width=np.array([sizes[i][0] for i in ids], dtype=np.int32),
        height=np.array([sizes[i][1] for i in ids], dtype=np.int32),
        rank=np.array([hits[i]["rank"] for i in ids], dtype=np.int32),
        english=np.array([hits[i]["query_lang"] == "eng" for i in ids], dtype=bool),
        sha256=sha,
        phash=np.array([r["phash"] or 0 for r in rows], dtype=np.uint64),
        dhash=np.array([r["dhash"] or 0 for r in rows], dtype=np.uint64),
        hashed=np.array([r["error"] is None for r in rows], dtype=bool),
        embeddings=None if embeddings is None else vectors_in_order(embeddings, ids),
        pixel_hash=pixels,
        align_thumbnail=lambda row: thumbs(row).align_input,
        chroma_thumbnail=lambda row: thumbs(row).chroma_input,
        forget_thumbnails=thumbs.cache_clear,
        draft_decoded=np.array([formats[i] == "JPEG" for i in ids], dtype=bool),
        workers=workers,
    )


def concept_summary(result: DedupResult, concepts: pa.Table) -> pa.Table:
    """Per concept: images, kept, dropped by tier, merged clusters, the largest one, and pairs left for review."""
    names = dict(zip(concepts["concept_id"].to_pylist(), concepts["concept"].to_pylist(), strict=True))
    counts: dict[int, Counter] = defaultdict(Counter)
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
