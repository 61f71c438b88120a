"""A release's images and query texts through an encoder, each embedded once, with the progress callback every
evaluation reports through: 3XCM's triplets and retrieval and MixCuBe's bias audit all gather their vectors here."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from data.publish.reader import Release
from evaluation.models.encoders import ImageRef, TextImageEncoder
from evaluation.models.vectors import Vectors, refuse_degenerate

#: (stage, done, total), as the build's progress callbacks.
Progress = Callable[[str, int, int], None]


def image_vectors(
    release: Release,
    image_ids: Sequence[str],
    encoder: TextImageEncoder,
    progress: Progress | None = None,
    config: str = "image_metadata",
    id_column: str = "image_id",
) -> Vectors:
    """The encoder's vectors of `image_ids` (the `id_column` of the release's image table `config`); the bytes are
    read from the release only if the encoder asks. MixCuBe's audit reads its quintets' images through it too."""
    # Precomputed vectors are looked up by id: reading (and hashing) every image's bytes would be wasted I/O.
    if encoder.needs_image_bytes and release.has(config) and "image" in release.columns(config):
        store = release.images(config, id_column)
        missing = [i for i in image_ids if i not in store.locations]
        if missing:
            raise KeyError(f"{len(missing)} benchmark image(s) are not in {config}, e.g. {missing[:3]}")
        # Table order: each Parquet row group is read once.
        where = store.locations
        order = sorted(image_ids, key=lambda i: (str(where[i].file), where[i].row_group, where[i].row))
        refs = [ImageRef(i, store.sha256[i], _loader(store, i)) for i in order]
    else:  # precomputed vectors, or a release without image bytes (the reassembled authors' benchmark)
        refs = [ImageRef(i, "", _no_bytes(release, i)) for i in image_ids]
    done = 0

    def advance(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress("embed images", done, len(refs))

    matrix = encoder.image_vectors(refs, advance)
    keys = [r.image_id for r in refs]
    _refuse_degenerate(encoder, keys, matrix, "image")
    return Vectors.from_arrays(keys, matrix)


def _refuse_degenerate(encoder: TextImageEncoder, keys: Sequence[str], matrix: Any, what: str) -> None:
    refuse_degenerate("3XCM evaluation", encoder.identity.model_id, list(keys), matrix, what)


def _loader(store: Any, image_id: str) -> Callable[[], bytes]:
    return lambda: store.load(image_id)


def _no_bytes(release: Release, image_id: str) -> Callable[[], bytes]:
    def load() -> bytes:
        raise ValueError(
            f"{release.path} carries no image bytes (no image_metadata images); evaluate it with "
            "--model-backend embeddings, or a release that has its images"
        )

    return load


def text_vectors(texts: Sequence[str], encoder: TextImageEncoder) -> Vectors:
    unique = list(dict.fromkeys(texts))
    matrix = encoder.text_vectors(unique)
    _refuse_degenerate(encoder, unique, matrix, "text")
    return Vectors.from_arrays(unique, matrix)
