"""Near-duplicate candidate pairs from image embeddings, in bounded memory (3XCM paper §3.2.1).

Cosine similarity of unit vectors is computed block by block inside each scope group (a concept, by default), so
memory stays O(block x group) and no N x N matrix is ever held. Only pairs at or above `min_score` are kept.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import numpy.typing as npt


def unit_rows(vectors: npt.ArrayLike) -> npt.NDArray[np.float32]:
    """Rows scaled to unit length (zero rows stay zero), as float32."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    unit: npt.NDArray[np.float32] = vectors / np.where(norms == 0, 1.0, norms)
    return unit


def group_slices(groups: npt.NDArray[np.integer]) -> tuple[npt.NDArray[np.intp], list[tuple[int, int]]]:
    """A stable order that puts each group's rows together, and each group's [start, stop) in that order."""
    order = np.argsort(groups, kind="stable")
    sorted_groups = groups[order]
    bounds = np.flatnonzero(np.diff(sorted_groups)) + 1
    starts = np.concatenate([[0], bounds])
    stops = np.concatenate([bounds, [len(groups)]])
    return order, [(int(a), int(b)) for a, b in zip(starts, stops, strict=True) if b > a]


def similar_pairs(
    vectors: npt.NDArray[np.floating], groups: npt.NDArray[np.integer], min_score: float, block: int = 2048
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp], npt.NDArray[np.float32]]:
    """All pairs (i < j) of rows in the same group with cosine >= min_score, as (i, j, score) arrays.

    `vectors` must be unit rows (float16 or float32; float16 halves the memory of a large set and each block is
    upcast). Work is a block of rows against the rest of its group, upper triangle only.
    """
    if len(vectors) != len(groups):
        raise ValueError("vectors and groups differ in length")
    if block < 1:
        raise ValueError("block must be >= 1")
    found_i: list[npt.NDArray[np.intp]] = []
    found_j: list[npt.NDArray[np.intp]] = []
    found_s: list[npt.NDArray[np.float32]] = []
    order, slices = group_slices(np.asarray(groups))
    for start, stop in slices:
        members = order[start:stop]
        for rows, cols, scores in _group_pairs(vectors, members, min_score, block):
            found_i.append(rows)
            found_j.append(cols)
            found_s.append(scores)
    if not found_i:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty.copy(), np.empty(0, dtype=np.float32)
    return np.concatenate(found_i), np.concatenate(found_j), np.concatenate(found_s)


def _group_pairs(
    vectors: npt.NDArray[np.floating], members: npt.NDArray[np.intp], min_score: float, block: int
) -> Iterator[tuple[npt.NDArray[np.intp], npt.NDArray[np.intp], npt.NDArray[np.float32]]]:
    n = len(members)
    if n < 2:
        return
    group = np.asarray(vectors[members], dtype=np.float32)  # one group at a time: bounded by the largest group
    for a in range(0, n, block):
        left = group[a : a + block]
        right = group[a:]  # only columns from this block onwards: the upper triangle
        sims = left @ right.T
        # Within the diagonal block, keep j > i only.
        local = np.triu(np.ones((len(left), min(len(left), len(right))), dtype=bool), k=1)
        sims[:, : local.shape[1]][~local] = -np.inf
        rows, cols = np.nonzero(sims >= min_score)
        if len(rows):
            i = members[a + rows]
            j = members[a + cols]
            yield np.minimum(i, j), np.maximum(i, j), sims[rows, cols].astype(np.float32)
