"""Candidate pairs split into batches that never split a connected component of the pair graph (bounded memory).

The perceptual tier and the copy search need thumbnails of both images of every candidate pair. Holding them for
every image at once costs about 31 KB per image (3 GB at 100k, 31 GB at 1M); scoring the pairs batch by batch and
dropping the thumbnails after each batch keeps the memory to one batch's worth. A component is never split, so
every decision that chains through pairs (a merge that makes a later fit unnecessary) sees all of its pairs, and a
batch's answer does not depend on which other components share the batch.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from data.unionfind import UnionFind

#: The rows whose thumbnails one batch may hold (about 31 KB each: two thumbnails and the prepared 64x64 float
#: image), so about 130 MB; a component bigger than this is a batch of its own.
BATCH_ROWS = 4096


def component_of_pairs(i: npt.NDArray[np.integer], j: npt.NDArray[np.integer]) -> npt.NDArray[np.int64]:
    """Per pair, a label shared by exactly the pairs of its connected component (the smallest pair index in it)."""
    if len(i) == 0:
        return np.empty(0, dtype=np.int64)
    rows, local = np.unique(np.concatenate([i, j]), return_inverse=True)
    groups = UnionFind(len(rows))
    a, b = local[: len(i)].tolist(), local[len(i) :].tolist()
    for x, y in zip(a, b, strict=True):
        groups.union(x, y)
    root = np.array([groups.find(x) for x in a], dtype=np.int64)
    first = np.full(len(rows), len(i), dtype=np.int64)
    np.minimum.at(first, root, np.arange(len(i), dtype=np.int64))
    return first[root]


def pair_batches(
    i: npt.NDArray[np.integer], j: npt.NDArray[np.integer], rows: int | None = None
) -> list[npt.NDArray[np.intp]]:
    """Indices into the pairs (i, j), in batches of whole components taken in order of their first pair, each
    batch touching at most `rows` rows (a bigger component alone); every pair is in exactly one batch, and a
    batch keeps the pairs' order. `rows` defaults to BATCH_ROWS."""
    rows = BATCH_ROWS if rows is None else rows
    if len(i) == 0:
        return []
    component = component_of_pairs(i, j)
    labels = np.unique(component)  # a component's label is its first pair: sorted labels are in first-pair order
    # Rows per component: each row belongs to one component, so count the distinct rows once.
    row_ids = np.concatenate([i, j])
    row_component = np.concatenate([component, component])
    distinct_rows = np.unique(row_ids, return_index=True)[1]
    rows_in = dict(zip(*np.unique(row_component[distinct_rows], return_counts=True), strict=True))
    batch_of_label: dict[int, int] = {}
    batch, held = 0, 0
    for label in labels.tolist():
        if held and held + rows_in[label] > rows:
            batch, held = batch + 1, 0
        batch_of_label[label] = batch
        held += int(rows_in[label])
    batch_of_pair = np.array([batch_of_label[c] for c in component.tolist()], dtype=np.int64)
    order_pairs = np.argsort(batch_of_pair, kind="stable")
    cuts = np.flatnonzero(np.diff(batch_of_pair[order_pairs])) + 1
    return np.split(order_pairs, cuts)
