"""Near-duplicate detection over a folder of image files, with the build's own tiers and rules.

The same decision as the image dedup stage (`decide_columns`, the core of its `decide`), fed from file paths
instead of the workspace; used by the quality benchmark against imagededup (perf/dedup_vs_imagededup) and by anyone
who wants to check a folder. It reads the decision's columns, not the stage's Arrow tables, so a fresh process's
first call does not import pandas (which pyarrow does on its first array).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, partial

import numpy as np

from curation.file_hashing import hash_files, read_file
from curation.image_align import load_opencv
from curation.image_dedup import DedupInputs, ImageDedupConfig, decide_columns
from curation.image_thumbnails import pixel_sha256


@dataclass(frozen=True)
class FileDedupResult:
    clusters: list[list[str]]  # merged groups of two or more paths, the kept one first
    review_pairs: list[tuple[str, str]]  # ambiguous pairs, not merged
    unreadable: dict[str, str]  # path -> decode error
    merge_pairs: list[tuple[str, str]]  # the pairs a tier decided to merge, before union-find closes them


def dedup_files(paths: Sequence[str], config: ImageDedupConfig | None = None, workers: int = 2) -> FileDedupResult:
    """Cluster `paths` (one scope: everything is compared with everything)."""
    config = config or ImageDedupConfig()
    paths = [str(p) for p in paths]
    # The aligned tier's OpenCV is imported while the workers decode: a fresh process would wait for it after.
    batch = hash_files(paths, workers, keep_align=True, meanwhile=load_opencv)
    align, chroma = batch.align, batch.chroma
    assert align is not None and chroma is not None  # keep_align
    hashed = np.array([e is None for e in batch.errors], dtype=bool)
    n = len(paths)

    @cache
    def pixels(row: int) -> str:
        return batch.pixel_sha256[row] or pixel_sha256(read_file(paths[row]))

    embeddings = None
    if config.embedding is not None:
        from curation.embed_images import embed_images

        embedder = config.embedding.embedder.build()
        loaders = [partial(read_file, path) for path in paths]
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
    # The columns, not the stage's Arrow tables: building those would import pandas (pyarrow does on its first
    # array), a quarter of a second that only a fresh process's first call pays (perf/dedup_vs_imagededup).
    found = decide_columns(inputs, config.model_copy(update={"scope": "global"}))
    members: dict[int, list[int]] = {}
    for row, (kept, size) in enumerate(zip(found.kept.tolist(), found.sizes.tolist(), strict=True)):
        if size > 1:
            members.setdefault(kept, []).append(row)
    clusters = sorted([paths[kept], *sorted(paths[m] for m in group if m != kept)] for kept, group in members.items())
    review = sorted((paths[a], paths[b]) for a, b in found.queued())
    unreadable = {p: e for p, e in zip(paths, batch.errors, strict=True) if e is not None}
    merging = zip(found.i[found.merge].tolist(), found.j[found.merge].tolist(), strict=True)
    merge_pairs = sorted({(paths[a], paths[b]) for a, b in merging})
    return FileDedupResult(clusters, review, unreadable, merge_pairs)
