"""Near-duplicate detection over a folder of image files, with the build's own tiers and rules.

The same `decide` as the image dedup stage, fed from file paths instead of the workspace; used by the quality
benchmark against imagededup (perf/dedup_vs_imagededup) and by anyone who wants to check a folder.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path

import numpy as np
import pyarrow.compute as pc

from curation.image_dedup import DedupInputs, ImageDedupConfig, decide
from curation.image_hashing import hash_batch
from curation.image_thumbnails import pixel_sha256


@dataclass(frozen=True)
class FileDedupResult:
    clusters: list[list[str]]  # merged groups of two or more paths, the kept one first
    review_pairs: list[tuple[str, str]]  # ambiguous pairs, not merged
    unreadable: dict[str, str]  # path -> decode error
    merge_pairs: list[tuple[str, str]]  # the pairs a tier decided to merge, before union-find closes them


def _read(path: str) -> bytes:
    return Path(path).read_bytes()


def dedup_files(paths: Sequence[str], config: ImageDedupConfig | None = None, workers: int = 2) -> FileDedupResult:
    """Cluster `paths` (one scope: everything is compared with everything)."""
    config = config or ImageDedupConfig()
    paths = [str(p) for p in paths]
    batch = hash_batch([partial(_read, path) for path in paths], workers, keep_align=True)
    align, chroma = batch.align, batch.chroma
    assert align is not None and chroma is not None  # keep_align
    hashed = np.array([e is None for e in batch.errors], dtype=bool)
    n = len(paths)

    @cache
    def pixels(row: int) -> str:
        return batch.pixel_sha256[row] or pixel_sha256(_read(paths[row]))

    embeddings = None
    if config.embedding is not None:
        from curation.embed_images import embed_images

        embedder = config.embedding.embedder.build()
        loaders = [partial(_read, path) for path in paths]
        embeddings, _ = embed_images(embedder, loaders, config.embedding.embedder.batch_size)
    inputs = DedupInputs(
        image_ids=paths,
        concept_ids=np.zeros(n, dtype=np.int32),
        width=batch.width,
        height=batch.height,
        rank=np.zeros(n, dtype=np.int32),
        english=np.ones(n, dtype=bool),
        sha256=[digest or f"unreadable:{path}" for digest, path in zip(batch.sha256, paths, strict=True)],
        phash=batch.phash,
        dhash=batch.dhash,
        hashed=hashed,
        embeddings=embeddings,
        pixel_hash=pixels,
        align_thumbnail=lambda row: align[row],
        chroma_thumbnail=lambda row: chroma[row],
        draft_decoded=batch.draft_decoded,
        workers=workers,
    )
    result = decide(inputs, config.model_copy(update={"scope": "global"}))
    decisions = result.decisions.to_pylist()
    members: dict[str, list[str]] = {}
    for row in decisions:
        if row["cluster_size"] > 1:
            members.setdefault(row["cluster_id"], []).append(row["image_id"])
    clusters = [[kept, *sorted(m for m in group if m != kept)] for kept, group in sorted(members.items())]
    queue = result.review_queue
    review = list(zip(queue["image_a"].to_pylist(), queue["image_b"].to_pylist(), strict=True))
    unreadable = {p: e for p, e in zip(paths, batch.errors, strict=True) if e is not None}
    merging = result.pairs.filter(pc.equal(result.pairs["decision"], "merge"))
    merge_pairs = sorted(set(zip(merging["image_a"].to_pylist(), merging["image_b"].to_pylist(), strict=True)))
    return FileDedupResult(clusters, review, unreadable, merge_pairs)
