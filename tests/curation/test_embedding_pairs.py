"""Blocked, scoped cosine pairs must equal a brute-force search, whatever the block size."""

from __future__ import annotations

import numpy as np
import pytest

from curation.embedding_pairs import similar_pairs, unit_rows


def brute_force(vectors: np.ndarray, groups: np.ndarray, min_score: float) -> dict[tuple[int, int], float]:
    out = {}
    for i in range(len(vectors)):
        for j in range(i + 1, len(vectors)):
            score = float(vectors[i].astype(np.float32) @ vectors[j].astype(np.float32))
            if groups[i] == groups[j] and score >= min_score:
                out[(i, j)] = score
    return out


@pytest.mark.parametrize("block", [1, 7, 64, 10_000])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_pairs_equal_brute_force(block: int, dtype: type) -> None:
    rng = np.random.default_rng(block)
    base = unit_rows(rng.standard_normal((60, 16)))
    near = unit_rows(base[:20] + 0.05 * rng.standard_normal((20, 16)))  # planted near-copies
    vectors = np.concatenate([base, near]).astype(dtype)
    groups = np.concatenate([rng.integers(0, 3, 60), np.zeros(20, dtype=np.int64)])
    groups[:20] = 0  # copies share their source's group
    i, j, scores = similar_pairs(vectors, groups, 0.5, block=block)
    expected = brute_force(vectors, groups, 0.5)
    assert dict(zip(zip(i.tolist(), j.tolist(), strict=True), scores.tolist(), strict=True)).keys() == expected.keys()
    for (a, b), score in zip(zip(i.tolist(), j.tolist(), strict=True), scores.tolist(), strict=True):
        assert a < b and score == pytest.approx(expected[(a, b)], abs=1e-5)
    assert {(k, 60 + k) for k in range(20)} <= expected.keys()  # the planted copies are among them


def test_no_pairs_across_groups_and_empty_inputs() -> None:
    vectors = unit_rows(np.ones((4, 8)))  # all identical
    i, j, _ = similar_pairs(vectors, np.array([0, 1, 2, 3]), 0.9)
    assert len(i) == len(j) == 0
    i, _, _ = similar_pairs(vectors, np.array([0, 0, 1, 1]), 0.9)
    assert len(i) == 2
    i, _, _ = similar_pairs(np.empty((0, 8), np.float32), np.empty(0, np.int64), 0.9)
    assert len(i) == 0
    with pytest.raises(ValueError):
        similar_pairs(vectors, np.array([0, 1]), 0.9)
