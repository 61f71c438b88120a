"""Aligned correlation: does one image match another once small crops, rotations and rescales are undone?

pHash is blind to neither a 5% crop nor a 4° rotation: such copies land 12-18 bits away, where different photos
with the same layout also land (benchmarks/dedup_vs_imagededup). For pairs in that band, OpenCV's ECC
(`findTransformECC`, Evangelidis & Psarakis 2008) fits an affine warp between two 64x64 grey thumbnails and
returns the enhanced correlation coefficient after alignment: close to 1 for the same picture, clearly lower for
another photo of the same kind. It is a per-pair check, run only on the band's candidate pairs, in threads (OpenCV
releases the GIL).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import cv2
import numpy as np

ALIGN_SIDE = 64
_CRITERIA = (cv2.TERM_CRITERIA_EPS | cv2.TERM_CRITERIA_COUNT, 30, 1e-3)
_BLUR_SIGMA = 1.0  # removes the grain and JPEG noise that would otherwise dominate a 64 px correlation


def prepare(thumbnail: np.ndarray) -> np.ndarray:
    """A (64, 64) uint8 thumbnail as the float32, lightly blurred image ECC works on."""
    return cv2.GaussianBlur(np.asarray(thumbnail, dtype=np.float32), (0, 0), _BLUR_SIGMA)


def aligned_correlation(template: np.ndarray, image: np.ndarray) -> float:
    """ECC correlation after an affine alignment of `image` onto `template` (prepared thumbnails); 0 if it fails."""
    warp = np.eye(2, 3, dtype=np.float32)
    try:
        correlation, _ = cv2.findTransformECC(template, image, warp, cv2.MOTION_AFFINE, _CRITERIA, None, 1)
    except cv2.error:  # no convergence (flat images, no overlap): no evidence of a match
        return 0.0
    return float(correlation)


def correlate_pairs(
    thumbnail: Callable[[int], np.ndarray], i: np.ndarray, j: np.ndarray, workers: int = 2
) -> np.ndarray:
    """Aligned correlation of each pair (i[k], j[k]); `thumbnail(row)` gives a row's 64x64 uint8 thumbnail."""
    rows = sorted(set(i.tolist()) | set(j.tolist()))
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        prepared = dict(zip(rows, pool.map(lambda row: prepare(thumbnail(row)), rows), strict=True))
        scores = pool.map(
            lambda pair: aligned_correlation(prepared[pair[0]], prepared[pair[1]]), zip(i, j, strict=True)
        )
        return np.fromiter(scores, dtype=np.float32, count=len(i))
