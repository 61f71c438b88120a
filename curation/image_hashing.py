"""Perceptual hashes of images, computed in bulk: for the image pass (collectors/image_pass.py) and for a folder
(curation/file_dedup.py).

Each image is decoded once, at reduced scale where the format allows it (curation/image_thumbnails.py); the hashes
are then computed for a whole batch with numpy (one matrix product for every DCT, one comparison for every median),
not image by image.

The exact-pixel tier needs the full decode: formats decoded in full anyway (PNG, ...) get their pixel sha256 here;
JPEGs get theirs lazily, only for the pairs that can have identical pixels (`pixel_sha256`, used by
curation/image_dedup.py).

Decoding runs in a thread pool: Pillow's decoders and resamplers release the GIL, so threads use every core
without the start-up and pickling cost of processes. Only numpy and Pillow are imported at module level, so that
hashing a folder (curation/file_dedup.py) starts fast.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache

import numpy as np
import numpy.typing as npt

from curation.image_thumbnails import ALIGN_SIDE, CHROMA_SIDE, HASH_SIDE, PHASH_SIDE, Thumbnails, thumbnails
from data.row_errors import error_text


@cache
def _dct_rows(side: int, keep: int) -> npt.NDArray[np.float64]:
    """The first `keep` rows of the unnormalised DCT-II matrix (scipy.fftpack.dct type 2, as imagehash uses)."""
    n = np.arange(side)
    k = np.arange(keep)[:, None]
    return (2.0 * np.cos(np.pi * k * (2 * n + 1) / (2 * side))).astype(np.float64)


def _pack_bits(bits: npt.NDArray[np.bool_]) -> npt.NDArray[np.uint64]:
    """(N, 64) booleans, row-major, to N big-endian-packed unsigned 64-bit ints (imagehash's bit order)."""
    return np.packbits(bits.astype(np.uint8), axis=1).view(">u8").ravel().astype(np.uint64)


def phash_bulk(inputs: npt.ArrayLike) -> npt.NDArray[np.uint64]:
    """imagehash.phash (hash_size 8) for a batch of (N, 32, 32) grey thumbnails, as uint64."""
    inputs = np.asarray(inputs, dtype=np.float64)
    if inputs.size == 0:
        return np.empty(0, dtype=np.uint64)
    d = _dct_rows(PHASH_SIDE, HASH_SIDE)
    low = d @ inputs @ d.T  # (N, 8, 8): the low frequencies of the 2-D DCT, in one batched product
    flat = low.reshape(len(inputs), -1)
    # np.median's value (the mean of the two middle values of 64), without its first-use import of numpy.ma.
    middle = np.partition(flat, (31, 32), axis=1)[:, 31:33]
    return _pack_bits(flat > (middle[:, :1] + middle[:, 1:]) / 2)


def dhash_bulk(inputs: npt.ArrayLike) -> npt.NDArray[np.uint64]:
    """imagehash.dhash (hash_size 8) for a batch of (N, 8, 9) grey thumbnails, as uint64."""
    inputs = np.asarray(inputs, dtype=np.float32)
    if inputs.size == 0:
        return np.empty(0, dtype=np.uint64)
    return _pack_bits((inputs[:, :, 1:] > inputs[:, :, :-1]).reshape(len(inputs), -1))


@dataclass(frozen=True)
class HashedBatch:
    """Bulk hashes of a batch, aligned with its input; a row that could not be decoded has an error instead."""

    width: npt.NDArray[np.int32]
    height: npt.NDArray[np.int32]
    phash: npt.NDArray[np.uint64]
    dhash: npt.NDArray[np.uint64]
    errors: list[str | None]
    draft_decoded: npt.NDArray[np.bool_]
    sha256: list[str | None]  # of the bytes
    pixel_sha256: list[str | None]  # when asked for and known for free (see `thumbnails`)
    align: npt.NDArray[np.uint8] | None = None  # (N, 64, 64) uint8 when asked for; zeros where a row failed
    chroma: npt.NDArray[np.int8] | None = None  # (N, 2, 32, 32) int8 with `align`; zeros where a row failed


def _try_thumbnails(load: Callable[[], bytes]) -> Decoded:
    """(sha256 of the bytes, thumbnails or an error); reading happens here too, so I/O overlaps in the pool."""
    try:
        data = load()
    except Exception as exc:
        return None, error_text(exc)
    digest = hashlib.sha256(data).hexdigest()
    try:
        return digest, thumbnails(data, pixel_hash=True)
    except Exception as exc:  # any decoder failure is a row, not a crash of the batch
        return digest, error_text(exc)


#: What one image's decode gave: the sha256 of its bytes (None if they could not be read), and its thumbnails or
#: the error.
Decoded = tuple[str | None, Thumbnails | str]


def decode_all(loaders: Sequence[Callable[[], bytes]], workers: int = 2) -> list[Decoded]:
    """Each loader's bytes read and decoded, in a thread pool of `workers`, in order."""
    if workers > 1 and len(loaders) > 1:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(_try_thumbnails, loaders))
    return [_try_thumbnails(load) for load in loaders]


def hash_batch(loaders: Sequence[Callable[[], bytes]], workers: int = 2, keep_align: bool = False) -> HashedBatch:
    """Decode in a thread pool, then hash the whole batch at once; optionally keep the alignment and chroma
    thumbnails. Formats decoded in full give their pixel sha256 too (hashing it in place costs far less than
    decoding again for the exact-pixel tier)."""
    return hash_decoded(decode_all(loaders, workers), keep_align)


def hash_decoded(outcomes: Sequence[Decoded], keep_align: bool = False) -> HashedBatch:
    """`hash_thumbnails` of `decode_all`'s answer."""
    return hash_thumbnails([digest for digest, _ in outcomes], [result for _, result in outcomes], keep_align)


def hash_thumbnails(
    digests: list[str | None], results: Sequence[Thumbnails | str], keep_align: bool = False
) -> HashedBatch:
    """The bulk hashes of decoded thumbnails (an error string where a row did not decode); `digests`: the sha256
    of each row's bytes. The image pass (collectors/image_pass.py) calls it with the thumbnails its one decode
    made."""
    n = len(results)
    ok = [i for i, r in enumerate(results) if isinstance(r, Thumbnails)]
    thumbs = [r for r in results if isinstance(r, Thumbnails)]  # those of `ok`, in its order
    width = np.zeros(n, dtype=np.int32)
    height = np.zeros(n, dtype=np.int32)
    phash = np.zeros(n, dtype=np.uint64)
    dhash = np.zeros(n, dtype=np.uint64)
    if ok:
        width[ok] = [t.width for t in thumbs]
        height[ok] = [t.height for t in thumbs]
        phash[ok] = phash_bulk(np.stack([t.phash_input for t in thumbs]))
        dhash[ok] = dhash_bulk(np.stack([t.dhash_input for t in thumbs]))
    errors = [None if isinstance(r, Thumbnails) else r for r in results]
    align = chroma = None
    if keep_align:
        align = np.zeros((n, ALIGN_SIDE, ALIGN_SIDE), dtype=np.uint8)
        chroma = np.zeros((n, 2, CHROMA_SIDE, CHROMA_SIDE), dtype=np.int8)
        for i, thumb in zip(ok, thumbs, strict=True):
            align[i] = thumb.align_input
            chroma[i] = thumb.chroma_input
    draft = np.array([isinstance(r, Thumbnails) and r.draft_decoded for r in results], dtype=bool)
    pixels = [r.pixel_sha256 if isinstance(r, Thumbnails) else None for r in results]
    return HashedBatch(width, height, phash, dhash, errors, draft, digests, pixels, align, chroma)


def hamming_within(
    hashes: npt.ArrayLike, max_distance: int, block: int = 2048
) -> tuple[npt.NDArray[np.integer], npt.NDArray[np.integer], npt.NDArray[np.int16]]:
    """All pairs i < j with Hamming distance <= max_distance, in block x block tiles (memory stays bounded)."""
    hashes = np.asarray(hashes, dtype=np.uint64)
    n = len(hashes)
    out_i: list[npt.NDArray[np.integer]] = [np.empty(0, np.int64)]
    out_j: list[npt.NDArray[np.integer]] = [np.empty(0, np.int64)]
    out_d: list[npt.NDArray[np.int16]] = [np.empty(0, np.int16)]
    for r0 in range(0, n, block):
        rows = hashes[r0 : r0 + block]
        for c0 in range(r0, n, block):
            distances = np.bitwise_count(rows[:, None] ^ hashes[None, c0 : c0 + block])
            local_i, local_j = np.nonzero(distances <= max_distance)
            i, j = local_i + r0, local_j + c0
            upper = j > i
            out_i.append(i[upper])
            out_j.append(j[upper])
            out_d.append(distances[local_i[upper], local_j[upper]].astype(np.int16))
    return np.concatenate(out_i), np.concatenate(out_j), np.concatenate(out_d)
