"""Hashing stage: per stored image, a hash of the decoded, normalised pixels and a 64-bit perceptual hash."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Sequence

import imagehash
import numpy as np
import pyarrow as pa
from PIL import Image, ImageOps

from data.schemas import IMAGE_HASHES, from_rows
from data.workspace import BlobStore


def decode_normalized(data: bytes) -> Image.Image:
    """Decode and normalise: EXIF orientation applied, converted to RGB."""
    with Image.open(io.BytesIO(data)) as image:
        return ImageOps.exif_transpose(image).convert("RGB")


def pixel_sha256(image: Image.Image) -> str:
    digest = hashlib.sha256(f"{image.mode}:{image.width}x{image.height}:".encode())
    digest.update(image.tobytes())
    return digest.hexdigest()


def phash64(image: Image.Image) -> int:
    """imagehash's pHash (32x32 DCT, top-left 8x8 against the median) packed into an unsigned 64-bit int."""
    bits = imagehash.phash(image, hash_size=8).hash.flatten()
    return int(np.packbits(bits.astype(np.uint8)).view(">u8")[0])


def hash_images(items: Sequence[dict], blobs: BlobStore) -> pa.Table:
    rows = []
    for item in items:
        image = decode_normalized(blobs.get(item["sha256"]))
        rows.append(
            {
                "image_id": item["image_id"],
                "sha256": item["sha256"],
                "pixel_sha256": pixel_sha256(image),
                "phash": phash64(image),
            }
        )
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
