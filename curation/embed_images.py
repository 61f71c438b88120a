"""Embedding stage helpers: decode stored images, embed them in batches, and store or read the vectors."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from curation.image_embeddings import ImageEmbedder
from curation.image_thumbnails import decode_normalized
from data.row_errors import error_text
from data.schemas import IMAGE_EMBEDDINGS


def embed_images(
    embedder: ImageEmbedder, loaders: Sequence[Callable[[], bytes]], batch_size: int = 64
) -> tuple[npt.NDArray[np.float16], list[str | None]]:
    """(n, dim) float16 unit rows and a decode error per row (its row stays zero, so it never pairs)."""
    vectors = np.zeros((len(loaders), embedder.dim), dtype=np.float16)
    errors: list[str | None] = [None] * len(loaders)
    for start in range(0, len(loaders), batch_size):
        images, rows = [], []
        for row in range(start, min(start + batch_size, len(loaders))):
            try:
                images.append(decode_normalized(loaders[row]()))
                rows.append(row)
            except Exception as exc:  # an undecodable image is a row with a reason
                errors[row] = error_text(exc)
        if images:
            vectors[rows] = embedder.embed(images)
    return vectors, errors


def embeddings_table(
    image_ids: Sequence[str], model_id: str, vectors: npt.NDArray[np.float16], errors: list[str | None]
) -> pa.Table:
    values = pa.array(np.asarray(vectors, dtype=np.float16).ravel(), pa.float16())
    offsets = pa.array(np.arange(0, vectors.size + 1, max(1, vectors.shape[1]), dtype=np.int32)[: len(image_ids) + 1])
    # Typed: an empty shard's mask would be of type null, which pyarrow refuses as a mask.
    lists = pa.ListArray.from_arrays(offsets, values, mask=pa.array([e is not None for e in errors], pa.bool_()))
    return pa.table(
        {
            "image_id": pa.array(list(image_ids), pa.string()),
            "model_id": pa.array([model_id] * len(image_ids), pa.string()),
            "embedding": lists.cast(pa.list_(pa.float16())),
            "error": pa.array(errors, pa.string()),
        },
        schema=IMAGE_EMBEDDINGS,
    )


def vectors_in_order(table: pa.Table, image_ids: Sequence[str]) -> npt.NDArray[np.float16]:
    """The stored vectors as an (n, dim) float16 array in the order of `image_ids`; missing rows are zero."""
    ok = table.filter(pa.compute.is_valid(table["embedding"]))
    if ok.num_rows == 0:
        return np.zeros((len(image_ids), 1), dtype=np.float16)
    flat = pa.compute.list_flatten(ok["embedding"]).to_numpy(zero_copy_only=False)
    stored = flat.reshape(ok.num_rows, -1)
    position = {image_id: k for k, image_id in enumerate(ok["image_id"].to_pylist())}
    out = np.zeros((len(image_ids), stored.shape[1]), dtype=np.float16)
    for row, image_id in enumerate(image_ids):
        k = position.get(image_id)
        if k is not None:
            out[row] = stored[k]
    return out
