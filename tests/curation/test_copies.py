"""The copy search's multi-index Hamming search finds exactly the pairs the all-pairs search finds."""

from __future__ import annotations

import numpy as np
import pytest

from curation.copies import hamming_pairs_indexed
from curation.image_dedup import EXACT_PIXEL_WINDOW, hamming_pairs


def _near_hashes(n: int, seed: int) -> np.ndarray:
    """Random pHashes, a tenth of them a flip of 0 to 9 bits away from another (both sides of the window)."""
    rng = np.random.default_rng(seed)
    hashes = rng.integers(0, 2**63, n, dtype=np.int64).astype(np.uint64)
    for source, target in zip(rng.integers(0, n, n // 10), rng.integers(0, n, n // 10), strict=True):
        value = int(hashes[source])
        for bit in rng.choice(64, int(rng.integers(0, 10)), replace=False):
            value ^= 1 << int(bit)
        hashes[target] = np.uint64(value)
    return hashes


@pytest.mark.parametrize("window", [0, EXACT_PIXEL_WINDOW, 9])
@pytest.mark.parametrize("groups", [1, 4])
def test_indexed_pairs_equal_all_pairs(window: int, groups: int) -> None:
    n = 3000
    rng = np.random.default_rng(window * 10 + groups)
    hashes = _near_hashes(n, window)
    scopes = rng.integers(0, groups, n).astype(np.int64) << 32 | 768
    valid = rng.random(n) < 0.97
    want = hamming_pairs(hashes, scopes, valid, window)
    got = hamming_pairs_indexed(hashes, scopes, valid, window, block=700)  # several blocks
    as_set = lambda p: set(zip(*(a.tolist() for a in p), strict=True))  # noqa: E731
    assert as_set(got) == as_set(want)
    assert len(got[0]) == len(want[0]) > 0
    assert (got[0] < got[1]).all()


def test_indexed_pairs_without_candidates() -> None:
    one = np.array([5], np.uint64)
    i, j, d = hamming_pairs_indexed(one, np.zeros(1, np.int64), np.ones(1, bool), EXACT_PIXEL_WINDOW)
    assert len(i) == len(j) == len(d) == 0
