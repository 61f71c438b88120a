"""Copies across concepts: images with the same bytes or the same decoded pixels, whatever concept found them.

The near-duplicate dedup is scoped per concept (3XCM paper §3.2.1), so one picture found by the "food" query and
by the "dance" query keeps a copy under each concept. Tags, though, belong to an image id: without this step the
"dance" copy would carry no "food" tag, and the assembler could offer a byte-identical food picture as a "not food"
distractor (docs/researchers.md, "The benchmark rules": no distractor carries the query concept). So every image gets
the concepts of all its exact-byte and exact-pixel copies, across concepts, before assembly (`curation/catalog.py`).

Equal bytes are grouped by sha256. Equal pixels are only possible between images of the same size whose pHashes
are within the decoder's rounding, so only those pairs are decoded in full (the same check as the dedup's
`exact_pixels` tier); every pair is looked for inside one (width, height) group.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from curation.image_dedup import EXACT_PIXEL_WINDOW, DedupInputs, equal_pixels, exact_byte_pairs, hamming_pairs
from data.schemas import COPIES
from data.unionfind import UnionFind


def copy_groups(inputs: DedupInputs, known_pixels: list[str | None]) -> pa.Table:
    """One COPIES row per image: its copy group (the smallest image id of the group) and its pixel hash, where it
    was known (formats decoded in full when hashing) or computed here."""
    n = len(inputs)
    groups = UnionFind(n)
    if inputs.sha256 is not None:
        for a, b in zip(*exact_byte_pairs(inputs.sha256, np.zeros(n, dtype=np.int64)), strict=True):
            groups.union(int(a), int(b))
    pixels = dict(enumerate(known_pixels))
    if inputs.phash is not None and n:
        sizes = inputs.width.astype(np.int64) << 32 | inputs.height.astype(np.int64)
        valid = inputs.hashed if inputs.hashed is not None else np.ones(n, bool)
        i, j, d = hamming_pairs(inputs.phash, sizes, valid, EXACT_PIXEL_WINDOW)
        # Within a concept the dedup has decided already; equal bytes are grouped above.
        across = inputs.concept_ids[i] != inputs.concept_ids[j]
        if inputs.sha256 is not None:
            across &= np.array([inputs.sha256[a] != inputs.sha256[b] for a, b in zip(i, j, strict=True)], bool)
        i, j, d = i[across], j[across], d[across]
        equal, digests = equal_pixels(inputs, i, j, d)
        for a, b in zip(i[equal].tolist(), j[equal].tolist(), strict=True):
            groups.union(a, b)
        pixels.update(digests)
    ids = inputs.image_ids
    first: dict[int, str] = {}
    for row in range(n):
        root = groups.find(row)
        first[root] = min(first.get(root, ids[row]), ids[row])
    return pa.table(
        {
            "image_id": pa.array(ids, pa.string()),
            "copy_group": pa.array([first[groups.find(row)] for row in range(n)], pa.string()),
            "pixel_sha256": pa.array([pixels.get(row) for row in range(n)], pa.string()),
        },
        schema=COPIES,
    )


def images_with_copies_across_concepts(copies: pa.Table, concept_ids: np.ndarray) -> int:
    """How many images have a byte or pixel copy under another concept (`concept_ids` aligned with `copies`)."""
    concepts: dict[str, set[int]] = {}
    for group, concept in zip(copies["copy_group"].to_pylist(), concept_ids.tolist(), strict=True):
        concepts.setdefault(group, set()).add(concept)
    return sum(len(concepts[group]) > 1 for group in copies["copy_group"].to_pylist())
