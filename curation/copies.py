"""Copies across concepts: images with the same bytes or the same decoded pixels, whatever concept found them.

The near-duplicate dedup is scoped per concept (3XCM paper §3.2.1), so one picture found by the "food" query and
by the "dance" query keeps a copy under each concept. Tags, though, belong to an image id: without this step the
"dance" copy would carry no "food" tag, and the assembler could offer a byte-identical food picture as a "not food"
distractor (docs/researchers.md, "The benchmark rules": no distractor carries the query concept). So every image gets
the concepts of all its exact-byte and exact-pixel copies, across concepts, before assembly (`curation/catalog.py`).

Equal bytes are grouped by sha256. Equal pixels are only possible between images of the same size whose pHashes
are within the decoder's rounding, so only those pairs are decoded in full (the same check as the dedup's
`exact_pixels` tier); every pair is looked for inside one (width, height) group. Web images crowd into a few sizes
(a 1M-image crawl has groups of 100k+), so the pairs are found with a multi-index Hamming search, not by comparing
every two hashes of a group: a pair within the window agrees on one of four 16-bit quarters of the pHash up to
window // 4 bits, so only the images in those few buckets are compared (`hamming_pairs_indexed`).
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from curation.image_dedup import (
    EXACT_PIXEL_WINDOW,
    DedupInputs,
    equal_pixels,
    exact_byte_pairs,
    forget_thumbnails,
    prepare_thumbnails,
)
from curation.pair_batches import pair_batches
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
        i, j, d = hamming_pairs_indexed(inputs.phash, sizes, valid, EXACT_PIXEL_WINDOW)
        # Within a concept the dedup has decided already; equal bytes are grouped above.
        across = inputs.concept_ids[i] != inputs.concept_ids[j]
        if inputs.sha256 is not None:
            across &= np.array([inputs.sha256[a] != inputs.sha256[b] for a, b in zip(i, j, strict=True)], bool)
        i, j, d = i[across], j[across], d[across]
        prepare_thumbnails(inputs, i, j)
        for batch in pair_batches(i, j):  # one batch's thumbnails at a time
            equal, digests = equal_pixels(inputs, i[batch], j[batch], d[batch])
            for a, b in zip(i[batch][equal].tolist(), j[batch][equal].tolist(), strict=True):
                groups.union(a, b)
            pixels.update(digests)
            forget_thumbnails(inputs)
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


QUARTERS = 4
QUARTER_BITS = 16


def _flips(radius: int) -> npt.NDArray[np.int64]:
    """Every 16-bit mask with at most `radius` bits set (the probes of one quarter)."""
    masks = [0]
    for r in range(1, radius + 1):
        masks += [sum(1 << b for b in bits) for bits in combinations(range(QUARTER_BITS), r)]
    return np.asarray(masks, np.int64)


def hamming_pairs_indexed(
    hashes: npt.NDArray[np.uint64],
    scopes: npt.NDArray[np.integer],
    valid: npt.NDArray[np.bool_],
    max_distance: int,
    block: int = 1 << 18,
) -> tuple[npt.NDArray[np.integer], npt.NDArray[np.integer], npt.NDArray[np.int16]]:
    """The pairs (i < j) within each scope with Hamming distance <= max_distance: the pairs `hamming_pairs` returns,
    found by multi-index search (pigeonhole over the four quarters of the hash) instead of every
    pair of a scope. Candidates per image are the few in its quarters' buckets: about k * 4 * probes / 65536 in a
    scope of k random hashes, against k for the all-pairs tiles. Rows are probed `block` at a time (bounded memory)."""
    n = len(hashes)
    empty = np.empty(0, np.int64)
    rows = np.flatnonzero(valid)
    if len(rows) < 2:
        return empty, empty.copy(), np.empty(0, np.int16)
    h = np.asarray(hashes, np.uint64)[rows]
    _, scope = np.unique(np.asarray(scopes)[rows], return_inverse=True)
    scope = scope.astype(np.int64)
    flips = _flips(max_distance // QUARTERS)
    found: list[npt.NDArray[np.int64]] = [empty]
    for q in range(QUARTERS):
        quarter = ((h >> np.uint64(q * QUARTER_BITS)) & np.uint64(0xFFFF)).astype(np.int64)
        keys = scope << QUARTER_BITS | quarter
        order = np.argsort(keys, kind="stable")
        sorted_keys = keys[order]
        for a in range(0, len(rows), block):
            mine = np.arange(a, min(a + block, len(rows)))
            for flip in flips:
                probe = scope[mine] << QUARTER_BITS | (quarter[mine] ^ flip)
                lo = np.searchsorted(sorted_keys, probe, "left")
                hi = np.searchsorted(sorted_keys, probe, "right")
                counts = hi - lo
                if not counts.any():
                    continue
                # Expand each probe to its bucket's members: (left row, right row) candidates.
                left = np.repeat(mine, counts)
                offsets = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
                right = order[np.repeat(lo, counts) + offsets]
                keep = right > left
                left, right = left[keep], right[keep]
                close = np.bitwise_count(h[left] ^ h[right]) <= max_distance
                found.append(rows[left[close]] * n + rows[right[close]])
    pairs = np.unique(np.concatenate(found))  # a pair close in several quarters is found in each
    i, j = pairs // n, pairs % n
    d = np.bitwise_count(np.asarray(hashes, np.uint64)[i] ^ np.asarray(hashes, np.uint64)[j]).astype(np.int16)
    # Scope by scope, then in row order: the result does not depend on the search's block size.
    by_scope = np.lexsort((j, i, np.asarray(scopes)[i]))
    return i[by_scope], j[by_scope], d[by_scope]


def images_with_copies_across_concepts(copies: pa.Table, concept_ids: npt.NDArray[np.integer]) -> int:
    """How many images have a byte or pixel copy under another concept (`concept_ids` aligned with `copies`)."""
    concepts: dict[str, set[int]] = {}
    for group, concept in zip(copies["copy_group"].to_pylist(), concept_ids.tolist(), strict=True):
        concepts.setdefault(group, set()).add(concept)
    return sum(len(concepts[group]) > 1 for group in copies["copy_group"].to_pylist())
