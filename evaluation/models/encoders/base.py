"""The interface of a 3XCM encoder backend, and what the backends share.

- `ImageRef` (an image to embed, loaded only when embedded), `ModelIdentity` (which model made the vectors) and the
  `TextImageEncoder` protocol, whose capability flags (`runs_locally`, `needs_image_bytes`) tell callers what a
  backend needs without naming it.
- The image decoding (PIL, upright by EXIF orientation, RGB) and the batch loops the model backends run: the bytes
  are loaded in the calling thread, decoded in threads a batch ahead, and the rows checked.
- The fields of the three model backends (`ModelBackendConfig`: device, precision, batch size) and the resolution
  of a Hugging Face `model` field (`resolve_source`: a local folder, a hub id in the cache, or one that downloads).
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

import numpy as np
import numpy.typing as npt
from PIL import Image, ImageOps
from pydantic import BaseModel, ConfigDict, Field

from data.clients.model_ids import MODEL_ID_PATTERN, folder_sha256
from data.stage import BackendConfig, require
from evaluation.models.display_name import DisplayName, absent, display_name_field

STAGE = "3XCM evaluation"
#: Files that hold a Hugging Face model's weights: a cached snapshot without one is not a usable local copy.
_HF_WEIGHT_SUFFIXES = (".safetensors", ".bin")
# Decoding is PIL work that releases the GIL; a few threads keep a GPU fed without oversubscribing a small CPU.
_DECODE_THREADS = max(1, min(8, os.cpu_count() or 1))

T = TypeVar("T")


# -- the interface --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImageRef:
    """One image to embed: its id, the sha256 of its encoded bytes (the cache key) and how to get those bytes."""

    image_id: str
    sha256: str
    load: Callable[[], bytes]  # the encoded image (JPEG/PNG); called from the calling thread, only when embedded


class VectorsFrom(BaseModel):
    """The model that computed precomputed vectors, as the tool that ran it recorded it in the vector files (the
    Parquet metadata `culturebench.model` that the mteb export's runner writes): read, not verified."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="The model's name as the tool knew it (mteb's model name, e.g. local/open_clip-X).")
    revision: str | None = Field(default=None, description="Its revision there (mteb's: the weights' digest).")
    harness: str | None = Field(default=None, description="The tool that ran it (mteb).")


class ModelIdentity(BaseModel):
    """Which model made the vectors: written into a results card and naming the embedding cache's folder."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: str = Field(description="open_clip | transformers | sentence-transformers | embeddings")
    model_id: str = Field(
        pattern=MODEL_ID_PATTERN,
        description="Filesystem-safe slug of the model and its weights, stable across runs, e.g. "
        "open_clip--ViT-B-32--laion2b_s34b_b79k; used as a folder name.",
    )
    name: str = Field(
        description="The model as configured: architecture and tag, hub id, or a path's last part; of the embeddings "
        "backend, the model its files say made them (`vectors_from`), else its `name` or the image file's name."
    )
    display_name: DisplayName | None = display_name_field()
    weights_sha256: str | None = Field(
        description="sha256 of the weights file; of a folder, over its sorted (relative path, file sha256); of the "
        "embeddings backend, over its two Parquet files. None only for a hub tag or id whose files are not local."
    )
    device: str = Field(description="cpu, cuda, or n/a")
    precision: str = Field(description="fp32, fp16, or n/a")
    vectors_from: VectorsFrom | None = Field(
        default=None,
        exclude_if=absent,
        description="Of the embeddings backend: the model that computed the vectors, as the tool that ran it "
        "recorded it in the files (their `culturebench.model` metadata). Left out when the files say nothing.",
    )


class TextImageEncoder(Protocol):
    @property
    def identity(self) -> ModelIdentity:
        """What names the model in a result (an attribute will do; read only here, so a wrapper may pass its
        encoder's on)."""
        ...

    # Capability flags: what a caller needs to know of a backend, declared by it (a class attribute will do), so
    # that no caller tests a backend's name.
    @property
    def runs_locally(self) -> bool:
        """A model runs in this process (on its CPU or GPU): a run holds the `gpu` slot while it embeds."""
        ...

    @property
    def needs_image_bytes(self) -> bool:
        """`image_vectors` reads each `ImageRef`'s bytes. False: it looks vectors up by image_id and never calls
        `load`, so the release's images are not read, and the embedding cache, keyed by their bytes, has nothing
        to keep."""
        ...

    def image_vectors(
        self, images: Sequence[ImageRef], progress: Callable[[int], None] | None = None
    ) -> npt.NDArray[np.float32]:
        """(len(images), dim) float32, row i for images[i]; `progress(n)` after each batch of n images."""
        ...

    def text_vectors(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """(len(texts), dim) float32, row i for texts[i]."""
        ...


def decode_image(ref: ImageRef, data: bytes) -> Image.Image:
    """The upright RGB image from `ref`'s bytes; an undecodable one is an error naming the image."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            return ImageOps.exif_transpose(image).convert("RGB")
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        raise ValueError(
            f"{STAGE}: image {ref.image_id!r} (sha256 {ref.sha256[:12]}) cannot be decoded: {exc}"
        ) from exc


def _prepared_batches(
    images: Sequence[ImageRef], size: int, prepare: Callable[[ImageRef, bytes], T]
) -> Iterator[list[T]]:
    """Batches of `prepare(ref, bytes)`, in order. The bytes are loaded in the calling thread (a caller's loader
    need not be thread-safe); decoding runs in threads, the next batch's while the caller runs the model on this
    one, so at most two batches are held."""
    batches = [images[start : start + size] for start in range(0, len(images), size)]
    if not batches:
        return
    with ThreadPoolExecutor(_DECODE_THREADS, thread_name_prefix="decode") as pool:

        def submit(batch: Sequence[ImageRef]) -> list[Any]:
            return [pool.submit(prepare, ref, ref.load()) for ref in batch]

        upcoming = submit(batches[0])
        for index in range(len(batches)):
            current = upcoming
            if index + 1 < len(batches):
                upcoming = submit(batches[index + 1])
            yield [future.result() for future in current]


def _looks_like_folder(value: str) -> bool:
    """Hub ids are `name` or `org/name`; anything else that names a location is a path."""
    return value.startswith((".", "/", "~")) or "\\" in value or value.count("/") > 1


@dataclass(frozen=True)
class ModelSource:
    """A `model` field checked: what from_pretrained loads, how identities name it, and its hash if local."""

    load_from: str  # a local folder (given, or the hub cache's snapshot) or a hub id to download
    label: str  # the folder's last part, or the hub id (@revision)
    id_parts: tuple[str, ...]  # what the model_id is made of
    weights_sha256: str | None
    local: bool


def resolve_source(value: str, field: str, revision: str | None, extra: str) -> ModelSource:
    """A local folder, a hub id already in the Hugging Face cache (then hashed and loaded from there), or a hub id
    that downloads on first use (no hash). A path-like value that is not a folder is an error."""
    path = Path(value).expanduser()
    if path.is_dir():
        if revision is not None:
            raise ValueError(f"{STAGE}: {field}.revision applies to hub ids only; {value!r} is a local folder.")
        if not (path / "config.json").is_file() and not (path / "modules.json").is_file():
            raise FileNotFoundError(
                f"{STAGE}: folder {value!r} ({field}) has no config.json: point it at a folder written by "
                "save_pretrained or downloaded from the hub."
            )
        resolved = path.resolve()
        # The folder's name, never the machine path: identities go into published results.
        return ModelSource(str(resolved), resolved.name, (resolved.name,), folder_sha256(resolved), local=True)
    if path.is_file() or _looks_like_folder(value):
        what = "is a file, not a model folder" if path.is_file() else "does not exist"
        raise FileNotFoundError(
            f"{STAGE}: model folder {value!r} ({field}) {what}. Point it at a folder holding the model (e.g. "
            "`huggingface-cli download <id> --local-dir <folder>`) or at a hub id."
        )
    hub = require("huggingface_hub", extra)
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    label = value if revision is None else f"{value}@{revision}"
    id_parts = (value,) if revision is None else (value, f"rev-{revision}")
    try:
        snapshot = Path(hub.snapshot_download(value, revision=revision, local_files_only=True))
    except HFValidationError as exc:
        raise ValueError(f"{STAGE}: {value!r} ({field}) is neither a local folder nor a valid hub id: {exc}") from exc
    except LocalEntryNotFoundError:
        return ModelSource(value, label, id_parts, None, local=False)  # downloads on first use: nothing to hash
    if not any(p.suffix in _HF_WEIGHT_SUFFIXES for p in snapshot.rglob("*") if p.is_file()):
        return ModelSource(value, label, id_parts, None, local=False)  # a partial snapshot (config only)
    return ModelSource(str(snapshot), label, id_parts, folder_sha256(snapshot), local=True)


class ModelBackendConfig(BackendConfig[TextImageEncoder]):
    """Fields the three model backends share."""

    device: Literal["auto", "cpu", "cuda"] = Field(
        default="auto", description="auto: CUDA when a GPU is usable, else CPU. cuda without a usable GPU is an error."
    )
    precision: Literal["fp32", "fp16"] = Field(
        default="fp32",
        description="fp16 halves GPU memory and time on CUDA; on CPU it falls back to fp32 with a warning.",
    )
    batch_size: int = Field(default=64, gt=0, description="Images (or texts) per forward pass.")


def check_dims(vectors: npt.NDArray[np.floating], expected_rows: int, what: str) -> npt.NDArray[np.float32]:
    if vectors.ndim != 2 or vectors.shape[0] != expected_rows:
        raise RuntimeError(f"{STAGE}: {what} returned shape {vectors.shape}, expected ({expected_rows}, dim)")
    return np.ascontiguousarray(vectors, dtype=np.float32)


def embed_images(
    images: Sequence[ImageRef],
    size: int,
    prepare: Callable[[ImageRef, bytes], T],
    encode: Callable[[list[T]], npt.ArrayLike],
    progress: Callable[[int], None] | None,
    what: str,
) -> npt.NDArray[np.float32]:
    """`encode` over `_prepared_batches`, the rows stacked and checked; `progress(n)` after each batch."""
    rows = []
    for batch in _prepared_batches(images, size, prepare):
        rows.append(np.asarray(encode(batch), dtype=np.float32))
        if progress is not None:
            progress(len(batch))
    return check_dims(np.concatenate(rows), len(images), what)


def embed_texts(
    texts: Sequence[str], size: int, encode: Callable[[list[str]], npt.ArrayLike], what: str
) -> npt.NDArray[np.float32]:
    """`encode` over batches of `size` texts, the rows stacked and checked."""
    rows = [
        np.asarray(encode(list(texts[start : start + size])), dtype=np.float32) for start in range(0, len(texts), size)
    ]
    return check_dims(np.concatenate(rows), len(texts), what)
