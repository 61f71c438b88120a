"""Aligned correlation: does one image match another once small crops, rotations and rescales are undone?

pHash is blind to neither a 5% crop nor a 4° rotation: such copies land 12-18 bits away, where different photos
with the same layout also land (perf/dedup_vs_imagededup). For pairs in that band, OpenCV's ECC
(`findTransformECC`, Evangelidis & Psarakis 2008) fits an affine warp between two 64x64 grey thumbnails and
returns the enhanced correlation coefficient after alignment: close to 1 for the same picture, clearly lower for
another photo of the same kind. It is a per-pair check, run only on the band's candidate pairs, in threads (OpenCV
releases the GIL). A plain correlation of the same thumbnails, without alignment, is computed for all candidates
at once first: pairs far below any copy's are rejected without the costly fit.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType

import cv2
import numpy as np

ALIGN_SIDE = 64
_CRITERIA = (cv2.TERM_CRITERIA_EPS | cv2.TERM_CRITERIA_COUNT, 20, 1e-3)
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


class AlignedScorer:
    """Scores pairs of rows; `thumbnail(row)` gives a row's 64x64 uint8 thumbnail, prepared once per row."""

    def __init__(self, thumbnail: Callable[[int], np.ndarray], workers: int = 1) -> None:
        self._thumbnail = thumbnail
        self._prepared: dict[int, np.ndarray] = {}
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers))

    def __enter__(self) -> AlignedScorer:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._pool.shutdown()

    def _prepare(self, rows: set[int]) -> None:
        missing = sorted(rows - self._prepared.keys())
        for row, image in zip(missing, self._pool.map(lambda r: prepare(self._thumbnail(r)), missing), strict=True):
            self._prepared[row] = image

    def plain_correlation(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """Pearson correlation of each pair's prepared thumbnails, as they are (no alignment); vectorised."""
        self._prepare(set(i.tolist()) | set(j.tolist()))
        if len(i) == 0:
            return np.empty(0, dtype=np.float32)
        rows = sorted(set(i.tolist()) | set(j.tolist()))
        where = {row: k for k, row in enumerate(rows)}
        flat = np.stack([self._prepared[row].ravel() for row in rows])
        flat -= flat.mean(axis=1, keepdims=True)
        flat /= np.maximum(np.linalg.norm(flat, axis=1, keepdims=True), 1e-6)
        a = flat[[where[r] for r in i.tolist()]]
        b = flat[[where[r] for r in j.tolist()]]
        return np.einsum("ij,ij->i", a, b).astype(np.float32)

    def aligned_correlation(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """ECC correlation of each pair after alignment, in the thread pool."""
        self._prepare(set(i.tolist()) | set(j.tolist()))
        prepared = self._prepared
        scores = self._pool.map(
            lambda pair: aligned_correlation(prepared[pair[0]], prepared[pair[1]]), zip(i, j, strict=True)
        )
        return np.fromiter(scores, dtype=np.float32, count=len(i))
