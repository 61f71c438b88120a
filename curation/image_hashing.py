"""Hashing stage: perceptual hashes of every stored image, computed in bulk.

One reduced decode per image gives a 32x32 grey thumbnail for pHash and a 9x8 one for dHash. JPEGs are decoded in
DCT-scaled draft mode (libjpeg scales 1/2..1/8 while decoding), so the full-size pixels are never materialised for
the perceptual tiers: that decode dominates the cost of hashing. The hashes themselves are computed for a whole
batch with numpy (one matrix product for every DCT, one comparison for every median), not image by image.

The exact-pixel tier needs the full decode; it is computed lazily, only for the pairs that can have identical
pixels (`pixel_sha256`, used by curation/image_dedup.py).

Decoding runs in a thread pool: Pillow's decoders and resamplers release the GIL, so threads use every core
without the start-up and pickling cost of processes.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache

import numpy as np
import pyarrow as pa
from PIL import Image, ImageOps

from curation.image_align import ALIGN_SIDE
from data.schemas import IMAGE_HASHES, from_rows
from data.stage import error_text
from data.workspace import BlobStore

PHASH_SIDE = 32  # imagehash.phash: a 32x32 DCT, of which the top-left 8x8 is kept
HASH_SIDE = 8
#: The thumbnail is taken from a decode at least this large, so the reduction to 32x32 stays well filtered.
DRAFT_SIDE = 4 * PHASH_SIDE
_EXIF_ORIENTATION = 0x0112
_TRANSPOSED_ORIENTATIONS = {5, 6, 7, 8}  # EXIF orientations that swap width and height


@dataclass(frozen=True)
class Thumbnails:
    """What one reduced decode yields: the normalised full size and the two grey thumbnails."""

    width: int
    height: int
    phash_input: np.ndarray  # (32, 32) float32
    dhash_input: np.ndarray  # (8, 9) float32
    align_input: np.ndarray  # (64, 64) uint8, for the aligned-correlation check of curation/image_align.py
    draft_decoded: bool  # a JPEG decoded at reduced scale (its thumbnails differ a little from a full decode's)
    pixel_sha256: str | None  # known when the format was decoded in full anyway


def decode_normalized(data: bytes) -> Image.Image:
    """Full decode, normalised: EXIF orientation applied, converted to RGB."""
    with Image.open(io.BytesIO(data)) as image:
        return ImageOps.exif_transpose(image).convert("RGB")


def pixel_sha256(data: bytes) -> str:
    """sha256 of the decoded, normalised pixels (with the mode and size, so equal bytes mean equal images)."""
    return _pixels_digest(decode_normalized(data))


def _pixels_digest(image: Image.Image) -> str:
    digest = hashlib.sha256(f"{image.mode}:{image.width}x{image.height}:".encode())
    digest.update(image.tobytes())
    return digest.hexdigest()


def thumbnails(data: bytes) -> Thumbnails:
    """Decode at reduced scale where the format allows it, normalise, and cut the thumbnails.

    Formats without a reduced decode (PNG, WebP, ...) are decoded in full anyway, so their pixel sha256 comes
    almost free here; JPEGs get theirs later, and only if they can have a pixel-identical twin."""
    pixels = None
    with Image.open(io.BytesIO(data)) as image:
        width, height = image.size
        orientation = image.getexif().get(_EXIF_ORIENTATION, 1)
        draft_decoded = image.format == "JPEG"
        if draft_decoded:
            image.draft("L", (DRAFT_SIDE, DRAFT_SIDE))  # libjpeg decodes at 1/2..1/8 scale, never below DRAFT_SIDE
            grey = ImageOps.exif_transpose(image).convert("L")
        else:
            rgb = ImageOps.exif_transpose(image).convert("RGB")
            pixels = _pixels_digest(rgb)
            grey = rgb.convert("L")
    if orientation in _TRANSPOSED_ORIENTATIONS:
        width, height = height, width
    # A box reduction to about DRAFT_SIDE first, so every format reaches the same intermediate scale as a draft.
    factor = max(1, min(grey.width, grey.height) // DRAFT_SIDE)
    if factor > 1:
        grey = grey.reduce(factor)
    phash_input = np.asarray(grey.resize((PHASH_SIDE, PHASH_SIDE), Image.Resampling.LANCZOS), dtype=np.float32)
    dhash_input = np.asarray(grey.resize((HASH_SIDE + 1, HASH_SIDE), Image.Resampling.LANCZOS), dtype=np.float32)
    align_input = np.asarray(grey.resize((ALIGN_SIDE, ALIGN_SIDE), Image.Resampling.BOX), dtype=np.uint8)
    return Thumbnails(width, height, phash_input, dhash_input, align_input, draft_decoded, pixels)


@cache
def _dct_rows(side: int, keep: int) -> np.ndarray:
    """The first `keep` rows of the unnormalised DCT-II matrix (scipy.fftpack.dct type 2, as imagehash uses)."""
    n = np.arange(side)
    k = np.arange(keep)[:, None]
    return (2.0 * np.cos(np.pi * k * (2 * n + 1) / (2 * side))).astype(np.float64)


def _pack_bits(bits: np.ndarray) -> np.ndarray:
    """(N, 64) booleans, row-major, to N big-endian-packed unsigned 64-bit ints (imagehash's bit order)."""
    return np.packbits(bits.astype(np.uint8), axis=1).view(">u8").ravel().astype(np.uint64)


def phash_bulk(inputs: np.ndarray) -> np.ndarray:
    """imagehash.phash (hash_size 8) for a batch of (N, 32, 32) grey thumbnails, as uint64."""
    inputs = np.asarray(inputs, dtype=np.float64)
    if inputs.size == 0:
        return np.empty(0, dtype=np.uint64)
    d = _dct_rows(PHASH_SIDE, HASH_SIDE)
    low = d @ inputs @ d.T  # (N, 8, 8): the low frequencies of the 2-D DCT, in one batched product
    flat = low.reshape(len(inputs), -1)
    return _pack_bits(flat > np.median(flat, axis=1, keepdims=True))


def dhash_bulk(inputs: np.ndarray) -> np.ndarray:
    """imagehash.dhash (hash_size 8) for a batch of (N, 8, 9) grey thumbnails, as uint64."""
    inputs = np.asarray(inputs, dtype=np.float32)
    if inputs.size == 0:
        return np.empty(0, dtype=np.uint64)
    return _pack_bits((inputs[:, :, 1:] > inputs[:, :, :-1]).reshape(len(inputs), -1))


@dataclass(frozen=True)
class HashedBatch:
    """Bulk hashes of a batch, aligned with its input; a row that could not be decoded has an error instead."""

    width: np.ndarray  # int32
    height: np.ndarray
    phash: np.ndarray  # uint64
    dhash: np.ndarray
    errors: list[str | None]
    draft_decoded: np.ndarray  # bool
    sha256: list[str | None]  # of the bytes
    pixel_sha256: list[str | None]  # when known for free (see `thumbnails`)
    align: np.ndarray | None = None  # (N, 64, 64) uint8 when asked for; zeros where a row failed


def _try_thumbnails(load: Callable[[], bytes]) -> tuple[str | None, Thumbnails | str]:
    """(sha256 of the bytes, thumbnails or an error); reading happens here too, so I/O overlaps in the pool."""
    try:
        data = load()
    except Exception as exc:
        return None, error_text(exc)
    digest = hashlib.sha256(data).hexdigest()
    try:
        return digest, thumbnails(data)
    except Exception as exc:  # any decoder failure is a row, not a crash of the batch
        return digest, error_text(exc)


def hash_batch(loaders: Sequence[Callable[[], bytes]], workers: int = 2, keep_align: bool = False) -> HashedBatch:
    """Decode in a thread pool, then hash the whole batch at once; optionally keep the alignment thumbnails."""
    if workers > 1 and len(loaders) > 1:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            outcomes = list(pool.map(_try_thumbnails, loaders))
    else:
        outcomes = [_try_thumbnails(load) for load in loaders]
    digests = [digest for digest, _ in outcomes]
    results = [result for _, result in outcomes]
    n = len(results)
    ok = [i for i, r in enumerate(results) if isinstance(r, Thumbnails)]
    width = np.zeros(n, dtype=np.int32)
    height = np.zeros(n, dtype=np.int32)
    phash = np.zeros(n, dtype=np.uint64)
    dhash = np.zeros(n, dtype=np.uint64)
    if ok:
        thumbs = [results[i] for i in ok]
        width[ok] = [t.width for t in thumbs]
        height[ok] = [t.height for t in thumbs]
        phash[ok] = phash_bulk(np.stack([t.phash_input for t in thumbs]))
        dhash[ok] = dhash_bulk(np.stack([t.dhash_input for t in thumbs]))
    errors = [None if isinstance(r, Thumbnails) else r for r in results]
    align = None
    if keep_align:
        align = np.zeros((n, ALIGN_SIDE, ALIGN_SIDE), dtype=np.uint8)
        for i in ok:
            align[i] = results[i].align_input
    draft = np.array([isinstance(r, Thumbnails) and r.draft_decoded for r in results], dtype=bool)
    pixels = [r.pixel_sha256 if isinstance(r, Thumbnails) else None for r in results]
    return HashedBatch(width, height, phash, dhash, errors, draft, digests, pixels, align)


def hash_images(items: Sequence[dict], blobs: BlobStore, workers: int = 2) -> pa.Table:
    """IMAGE_HASHES rows for stored images (dicts with image_id and sha256)."""
    batch = hash_batch([lambda sha=item["sha256"]: blobs.get(sha) for item in items], workers)
    rows = [
        {
            "image_id": item["image_id"],
            "sha256": item["sha256"],
            "phash": None if error else int(batch.phash[i]),
            "dhash": None if error else int(batch.dhash[i]),
            "pixel_sha256": batch.pixel_sha256[i],
            "error": error,
        }
        for i, (item, error) in enumerate(zip(items, batch.errors, strict=True))
    ]
    return from_rows(rows, IMAGE_HASHES)


def hamming_within(
    hashes: np.ndarray, max_distance: int, block: int = 2048
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All pairs i < j with Hamming distance <= max_distance, in block x block tiles (memory stays bounded)."""
    hashes = np.asarray(hashes, dtype=np.uint64)
    n = len(hashes)
    out_i, out_j, out_d = [np.empty(0, np.int64)], [np.empty(0, np.int64)], [np.empty(0, np.int16)]
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
