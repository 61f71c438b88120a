"""The thumbnails blob of a shard of the image pass: its one writer and its one reader.

The image pass (collectors/image_pass.py) stores each shard's dedup thumbnails as one content-addressed blob, an
uncompressed .npz of `align` (N, 64, 64) uint8 and `chroma` (N, 2, 32, 32) int8, which numpy reads without a
decoder; the dedup (curation/dedup_stage.py) reads it back and decodes no image.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from curation.image_thumbnails import ALIGN_SIDE, CHROMA_SIDE
from data.workspace import BlobStore


def store_thumbnails(
    store: BlobStore,
    align: npt.NDArray[np.uint8] | None,
    chroma: npt.NDArray[np.int8] | None,
    rows: Sequence[int],
) -> str:
    """One blob of the thumbnails of `rows`: an uncompressed .npz (`align` (N, 64, 64) uint8, `chroma`
    (N, 2, 32, 32) int8), which numpy reads without a decoder; its key names it in every row."""
    assert align is not None and chroma is not None
    buffer = io.BytesIO()
    np.savez(buffer, align=align[list(rows)], chroma=chroma[list(rows)])
    return store.put(buffer.getvalue())


def read_thumbnails(data: bytes, key: str = "") -> Mapping[str, npt.NDArray[Any]]:
    """A thumbnails blob's arrays, checked for their shapes (a blob of another kind is refused, not misread).
    Every way it can be damaged is one ValueError naming the blob `key`."""
    name = f"thumbnails blob {key}".rstrip()
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
            align, chroma = arrays["align"], arrays["chroma"]
    except (ValueError, KeyError, OSError, zipfile.BadZipFile, EOFError) as exc:
        # np.load's own words mislead here (a non-npz file "contains pickled data"; a missing array is a KeyError).
        raise ValueError(f"{name}: not a thumbnails blob ({type(exc).__name__}: {str(exc)[:120]})") from None
    if align.dtype != np.uint8 or align.ndim != 3 or align.shape[1:] != (ALIGN_SIDE, ALIGN_SIDE):
        raise ValueError(f"{name}: not a thumbnails blob: align is {align.dtype} {align.shape}")
    if chroma.dtype != np.int8 or chroma.shape != (len(align), 2, CHROMA_SIDE, CHROMA_SIDE):
        raise ValueError(f"{name}: not a thumbnails blob: chroma is {chroma.dtype} {chroma.shape}")
    return {"align": align, "chroma": chroma}
