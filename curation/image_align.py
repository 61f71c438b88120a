"""Aligned correlation: does one image match another once small crops, rotations and rescales are undone?

pHash is blind to neither a 5% crop nor a 4° rotation: such copies land 12-18 bits away, where different photos
with the same layout also land (perf/dedup_vs_imagededup). For pairs in that band, OpenCV's ECC
(`findTransformECC`, Evangelidis & Psarakis 2008) fits an affine warp between two 64x64 grey thumbnails and
returns the enhanced correlation coefficient after alignment: close to 1 for the same picture, clearly lower for
another photo of the same kind. It is a per-pair check, run only on the band's candidate pairs, in threads (OpenCV
releases the GIL). A plain correlation of the same thumbnails, without alignment, is computed for all candidates
at once first: pairs far below any copy's are rejected without the costly fit, and pairs already at a copy's
correlation without any alignment need no fit either (the fit only raises it).

Grey correlation is blind to colour: another photo shot the same way (same background and layout, other objects)
can correlate like a copy. The chroma check compares the two images' Cb and Cr thumbnails, aligned with the same
warp: a copy keeps its colours (a brightness change scales them, which a correlation ignores), another photo does
not. On the tuned corpus of perf/dedup_vs_imagededup, copies correlate at 0.92 or more and the look-alike
siblings at 0.62 or less.

OpenCV is imported on first use, so that hashing a folder never pays for it.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from types import ModuleType, TracebackType

import numpy as np
import numpy.typing as npt

from curation.image_thumbnails import ALIGN_SIDE, CHROMA_SIDE

_ECC_ITERATIONS, _ECC_EPSILON = 20, 1e-3
_BLUR_SIGMA = 1.0  # removes the grain and JPEG noise that would otherwise dominate a 64 px correlation
#: Below this standard deviation of Cb and Cr (in 8-bit levels) an image has too little colour to compare.
CHROMA_MIN_STD = 2.0
IDENTITY = np.eye(2, 3, dtype=np.float32)


@cache
def _cv2() -> ModuleType:
    import cv2

    return cv2


def load_opencv() -> None:
    """Import OpenCV now, at a moment that costs nothing (curation/file_dedup.py, while its workers decode)."""
    _cv2()


def prepare(thumbnail: npt.NDArray[np.uint8]) -> npt.NDArray[np.float32]:
    """A (64, 64) uint8 thumbnail as the float32, lightly blurred image ECC works on."""
    blurred: npt.NDArray[np.float32] = _cv2().GaussianBlur(np.asarray(thumbnail, dtype=np.float32), (0, 0), _BLUR_SIGMA)
    return blurred


def fit_alignment(
    template: npt.NDArray[np.float32], image: npt.NDArray[np.float32]
) -> tuple[float, npt.NDArray[np.float32]]:
    """ECC correlation after an affine alignment of `image` onto `template` (prepared thumbnails), and the warp
    (template coordinates to image coordinates); (0, identity) if it fails."""
    cv2 = _cv2()
    criteria = (cv2.TERM_CRITERIA_EPS | cv2.TERM_CRITERIA_COUNT, _ECC_ITERATIONS, _ECC_EPSILON)
    try:
        correlation, warp = cv2.findTransformECC(template, image, IDENTITY.copy(), cv2.MOTION_AFFINE, criteria, None, 1)
    except cv2.error:  # no convergence (flat images, no overlap): no evidence of a match
        return 0.0, IDENTITY
    return float(correlation), warp


def chroma_correlations(a: npt.NDArray[np.number], b: npt.NDArray[np.number]) -> npt.NDArray[np.float32]:
    """Correlation of the Cb and Cr planes of each pair of a stack, (N, 2, ...) against (N, 2, ...), pixel by
    pixel; NaN where either image has too little colour to say."""
    x = a.reshape(len(a), 2, -1).astype(np.float32)
    y = b.reshape(len(b), 2, -1).astype(np.float32)
    x -= x.mean(axis=2, keepdims=True)
    y -= y.mean(axis=2, keepdims=True)
    colourless = np.minimum(x.std(axis=2).max(axis=1), y.std(axis=2).max(axis=1)) < CHROMA_MIN_STD
    num = (x * y).sum(axis=(1, 2))
    den = np.sqrt((x * x).sum(axis=(1, 2)) * (y * y).sum(axis=(1, 2)))
    correlation: npt.NDArray[np.float32] = num / np.maximum(den, 1e-6)
    correlation[colourless] = np.nan
    return correlation


def aligned_chroma_correlation(
    a: npt.NDArray[np.int8], b: npt.NDArray[np.int8], warp: npt.NDArray[np.float32]
) -> float:
    """`chroma_correlations` of two (2, 32, 32) chroma thumbnails, `b` warped onto `a` by an alignment warp found
    at 64x64, over the pixels the warp covers; NaN when that overlap is too small or there is no colour to say."""
    cv2 = _cv2()
    scaled = np.array(warp, dtype=np.float32)
    scaled[:, 2] *= CHROMA_SIDE / ALIGN_SIDE
    size, flags = (CHROMA_SIDE, CHROMA_SIDE), cv2.WARP_INVERSE_MAP
    planes = np.asarray(b, dtype=np.float32).transpose(1, 2, 0)
    warped = cv2.warpAffine(planes, scaled, size, flags=flags | cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    ones = np.ones((CHROMA_SIDE, CHROMA_SIDE), dtype=np.float32)
    valid = cv2.warpAffine(ones, scaled, size, flags=flags | cv2.INTER_NEAREST) > 0.5
    if valid.sum() < valid.size // 4:
        return float("nan")
    return float(chroma_correlations(np.asarray(a)[:, valid][None], warped.transpose(2, 0, 1)[:, valid][None])[0])


class AlignedScorer:
    """Scores pairs of rows; `thumbnail(row)` gives a row's 64x64 uint8 thumbnail, prepared once per row, and
    `chroma(row)` its (2, 32, 32) chroma thumbnail."""

    def __init__(
        self,
        thumbnail: Callable[[int], npt.NDArray[np.uint8]],
        workers: int = 1,
        chroma: Callable[[int], npt.NDArray[np.int8]] | None = None,
    ) -> None:
        self._thumbnail = thumbnail
        self._chroma = chroma
        self._prepared: dict[int, npt.NDArray[np.float32]] = {}
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers))

    def __enter__(self) -> AlignedScorer:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._pool.shutdown()

    def forget(self) -> None:
        """Drop every prepared thumbnail (between batches of pairs: curation/pair_batches.py)."""
        self._prepared.clear()

    def _prepare(self, rows: set[int]) -> None:
        missing = sorted(rows - self._prepared.keys())
        for row, image in zip(missing, self._pool.map(lambda r: prepare(self._thumbnail(r)), missing), strict=True):
            self._prepared[row] = image

    def plain_correlation(self, i: npt.NDArray[np.integer], j: npt.NDArray[np.integer]) -> npt.NDArray[np.float32]:
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
        correlation: npt.NDArray[np.float32] = np.einsum("ij,ij->i", a, b).astype(np.float32)
        return correlation

    def fit(
        self, i: npt.NDArray[np.integer], j: npt.NDArray[np.integer]
    ) -> tuple[npt.NDArray[np.float32], list[npt.NDArray[np.float32]]]:
        """ECC correlation of each pair after alignment, and the warps, in the thread pool."""
        self._prepare(set(i.tolist()) | set(j.tolist()))
        prepared = self._prepared
        fits = list(
            self._pool.map(lambda pair: fit_alignment(prepared[pair[0]], prepared[pair[1]]), zip(i, j, strict=True))
        )
        return np.array([score for score, _ in fits], dtype=np.float32), [warp for _, warp in fits]

    def aligned_correlation(self, i: npt.NDArray[np.integer], j: npt.NDArray[np.integer]) -> npt.NDArray[np.float32]:
        """ECC correlation of each pair after alignment."""
        return self.fit(i, j)[0]

    def colour_agrees(
        self,
        i: npt.NDArray[np.integer],
        j: npt.NDArray[np.integer],
        minimum: float,
        warps: list[npt.NDArray[np.float32]] | None = None,
    ) -> npt.NDArray[np.bool_]:
        """Per pair: its chroma correlation (after `warps`, else as they are) is at least `minimum`, or there is
        no colour to compare (no chroma thumbnails, or an image with almost none)."""
        if self._chroma is None or len(i) == 0:
            return np.ones(len(i), dtype=bool)
        if warps is None:
            correlation = chroma_correlations(
                np.stack([self._chroma(r) for r in i.tolist()]), np.stack([self._chroma(r) for r in j.tolist()])
            )
        else:
            pairs = zip(i.tolist(), j.tolist(), warps, strict=True)
            found = [aligned_chroma_correlation(self._chroma(a), self._chroma(b), warp) for a, b, warp in pairs]
            correlation = np.array(found, dtype=np.float32)
        return np.isnan(correlation) | (correlation >= minimum)
