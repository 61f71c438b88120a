"""The models a 3XCM evaluation scores: text and image embeddings for text-to-image retrieval (3XCM paper §3.2).

A backend turns the release's images and query texts into vectors; `metrics_3xcm` does the rest (it normalises).
Four backends, one discriminated union (`EncoderConfig`):

- `open_clip`: CLIP, the multilingual XLM-R CLIPs and SigLIP through open_clip (`encode_image` / `encode_text`).
- `transformers`: a Hugging Face dual encoder with `get_image_features` / `get_text_features` (CLIP, Chinese-CLIP).
- `sentence-transformers`: an image model and a text model with the same output space (clip-ViT-B-32 with
  clip-ViT-B-32-multilingual-v1).
- `embeddings`: vectors computed elsewhere, read from two Parquet files; nothing runs.

Rules shared with `curation/image_embeddings.py`, whose open_clip checks are reused: weights are explicit (never a
random fallback), a missing file fails at `build()` with the field named, `precision="fp16"` applies on CUDA only
(CPU falls back to fp32 with a logged warning) and `device="cuda"` without a GPU is an error. Vectors are float32
and are what the model's feature method returns (unnormalised). Images are decoded with PIL, turned upright by
their EXIF orientation and converted to RGB, as the `datasets` Image feature that the authors' evaluator loads the
benchmark with does.

Every encoder carries a `ModelIdentity`: the results card records it, and `embedding_cache` keys its folders by it.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from PIL import Image, ImageOps
from pydantic import BaseModel, ConfigDict, Field, field_validator

from data.devices import resolve_device
from data.model_ids import MODEL_ID_PATTERN, folder_sha256, slug
from data.open_clip_weights import register_model_configs, resolve_weights
from data.stage import BackendConfig, require
from data.workspace import file_sha256, sha256_bytes
from evaluation.metrics_3xcm import COSINE_EPS

log = logging.getLogger(__name__)

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


class ModelIdentity(BaseModel):
    """Which model made the vectors: written into a results card and naming the embedding cache's folder."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: str = Field(description="open_clip | transformers | sentence-transformers | embeddings")
    model_id: str = Field(
        pattern=MODEL_ID_PATTERN,
        description="Filesystem-safe slug of the model and its weights, stable across runs, e.g. "
        "open_clip--ViT-B-32--laion2b_s34b_b79k; used as a folder name.",
    )
    name: str = Field(description="The model as configured: architecture and tag, hub id, or a path's last part.")
    weights_sha256: str | None = Field(
        description="sha256 of the weights file; of a folder, over its sorted (relative path, file sha256); of the "
        "embeddings backend, over its two Parquet files. None only for a hub tag or id whose files are not local."
    )
    device: str = Field(description="cpu, cuda, or n/a")
    precision: str = Field(description="fp32, fp16, or n/a")


class TextImageEncoder(Protocol):
    identity: ModelIdentity

    def image_vectors(self, images: Sequence[ImageRef], progress: Callable[[int], None] | None = None) -> np.ndarray:
        """(len(images), dim) float32, row i for images[i]; `progress(n)` after each batch of n images."""
        ...

    def text_vectors(self, texts: Sequence[str]) -> np.ndarray:
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
class _ModelSource:
    """A `model` field checked: what from_pretrained loads, how identities name it, and its hash if local."""

    load_from: str  # a local folder (given, or the hub cache's snapshot) or a hub id to download
    label: str  # the folder's last part, or the hub id (@revision)
    id_parts: tuple[str, ...]  # what the model_id is made of
    weights_sha256: str | None
    local: bool


def _resolve_source(value: str, field: str, revision: str | None, extra: str) -> _ModelSource:
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
        return _ModelSource(str(resolved), resolved.name, (resolved.name,), folder_sha256(resolved), local=True)
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
        return _ModelSource(value, label, id_parts, None, local=False)  # downloads on first use: nothing to hash
    if not any(p.suffix in _HF_WEIGHT_SUFFIXES for p in snapshot.rglob("*") if p.is_file()):
        return _ModelSource(value, label, id_parts, None, local=False)  # a partial snapshot (config only)
    return _ModelSource(str(snapshot), label, id_parts, folder_sha256(snapshot), local=True)


class _ModelBackendConfig(BackendConfig["TextImageEncoder"]):
    """Fields the three model backends share."""

    device: Literal["auto", "cpu", "cuda"] = Field(
        default="auto", description="auto: CUDA when a GPU is usable, else CPU. cuda without a usable GPU is an error."
    )
    precision: Literal["fp32", "fp16"] = Field(
        default="fp32",
        description="fp16 halves GPU memory and time on CUDA; on CPU it falls back to fp32 with a warning.",
    )
    batch_size: int = Field(default=64, gt=0, description="Images (or texts) per forward pass.")


def _check_dims(vectors: np.ndarray, expected_rows: int, what: str) -> np.ndarray:
    if vectors.ndim != 2 or vectors.shape[0] != expected_rows:
        raise RuntimeError(f"{STAGE}: {what} returned shape {vectors.shape}, expected ({expected_rows}, dim)")
    return np.ascontiguousarray(vectors, dtype=np.float32)


def _embed_images(
    images: Sequence[ImageRef],
    size: int,
    prepare: Callable[[ImageRef, bytes], T],
    encode: Callable[[list[T]], np.ndarray],
    progress: Callable[[int], None] | None,
    what: str,
) -> np.ndarray:
    """`encode` over `_prepared_batches`, the rows stacked and checked; `progress(n)` after each batch."""
    rows = []
    for batch in _prepared_batches(images, size, prepare):
        rows.append(np.asarray(encode(batch), dtype=np.float32))
        if progress is not None:
            progress(len(batch))
    return _check_dims(np.concatenate(rows), len(images), what)


def _embed_texts(texts: Sequence[str], size: int, encode: Callable[[list[str]], np.ndarray], what: str) -> np.ndarray:
    """`encode` over batches of `size` texts, the rows stacked and checked."""
    rows = [
        np.asarray(encode(list(texts[start : start + size])), dtype=np.float32) for start in range(0, len(texts), size)
    ]
    return _check_dims(np.concatenate(rows), len(texts), what)


# -- open_clip ------------------------------------------------------------------------------------------------------


class OpenClipEncoderConfig(_ModelBackendConfig):
    """An open_clip model (CLIP, XLM-R CLIP, SigLIP); the weights are always named explicitly."""

    backend: Literal["open_clip"] = "open_clip"
    model_name: str = Field(
        description="open_clip architecture (a built-in config such as ViT-B-32, xlm-roberta-large-ViT-H-14 or "
        "ViT-B-16-SigLIP, or the file stem of a JSON in model_config_dir)."
    )
    pretrained: str = Field(
        description="The weights: a local .pt/.bin/.safetensors file, or an open_clip pretrained tag of model_name "
        "such as laion2b_s34b_b79k (downloads on first use, or is read from the Hugging Face cache). A missing file "
        "or unknown tag is an error, never random weights."
    )
    model_config_dir: str | None = Field(
        default=None,
        description="Optional folder of extra open_clip model-config JSONs (one architecture per file, named by its "
        "stem), registered before loading.",
    )
    preprocess_tag: str | None = Field(
        default=None,
        description="With a local weights file: the open_clip tag the file was released as, whose image "
        "preprocessing (mean, std, interpolation, resize mode) and QuickGELU setting are used, e.g. webli for a "
        "SigLIP file or openai for OpenAI's. Without it a file gets the architecture's defaults (OpenAI CLIP "
        "mean/std, shortest-side resize), which are wrong for SigLIP. A tag in `pretrained` brings its own.",
    )

    def build(self) -> OpenClipEncoder:
        """Checks weights, architecture, tag and device now; loads the model on first use."""
        return OpenClipEncoder(self)


def _cached_tag_file(open_clip: Any, cfg: dict) -> Path | None:
    """The file open_clip would load for a pretrained tag, if it is already on disk (no download): the same
    lookup order as open_clip's `download_pretrained` (the hub file, its .safetensors alternative first)."""
    if cfg.get("file"):
        path = Path(cfg["file"]).expanduser()
        return path if path.is_file() else None
    if cfg.get("hf_hub"):
        try:
            import huggingface_hub
        except ImportError:
            return None
        repo, filename = os.path.split(cfg["hf_hub"])
        filename = filename or open_clip.constants.HF_WEIGHTS_NAME
        candidates = [filename]
        if filename == open_clip.constants.HF_WEIGHTS_NAME:
            candidates.insert(0, open_clip.constants.HF_SAFE_WEIGHTS_NAME)
        elif filename.endswith((".bin", ".pth")):
            candidates.insert(0, filename[:-4] + ".safetensors")
        for name in candidates:
            found = huggingface_hub.try_to_load_from_cache(repo, name)
            if isinstance(found, str) and Path(found).is_file():
                return Path(found)
        return None
    if cfg.get("url"):
        path = Path("~/.cache/clip").expanduser() / os.path.basename(cfg["url"])
        return path if path.is_file() else None
    return None


class OpenClipEncoder:
    """open_clip `encode_image` / `encode_text`; the model is loaded on first use."""

    def __init__(self, config: OpenClipEncoderConfig) -> None:
        self.config = config
        self.weights = resolve_weights(config, STAGE)
        open_clip = register_model_configs(config, STAGE)
        self._tag_cfg: dict = {}
        if config.preprocess_tag is not None:
            if not self.weights.is_file:
                raise ValueError(
                    f"{STAGE}: OpenClipEncoderConfig.preprocess_tag applies to a weights file; pretrained "
                    f"{config.pretrained!r} is a tag and brings its own preprocessing."
                )
            self._tag_cfg = open_clip.get_pretrained_cfg(config.model_name, config.preprocess_tag)
            if not self._tag_cfg:
                tags = open_clip.list_pretrained_tags_by_model(config.model_name)
                raise ValueError(
                    f"{STAGE}: OpenClipEncoderConfig.preprocess_tag={config.preprocess_tag!r} is not an open_clip "
                    f"pretrained tag of {config.model_name!r} (tags: {', '.join(tags) or 'none'})."
                )
        self.device, self.precision = resolve_device(
            config.device, config.precision, owner=f"{STAGE}: {type(config).__name__}", extra="embed"
        )
        self.dim = int(open_clip.get_model_config(config.model_name)["embed_dim"])
        if self.weights.is_file:
            weights_file: Path | None = Path(self.weights.value)
            weights_name = weights_file.name
            tail = [weights_file.stem]
            if config.preprocess_tag:
                tail.append(f"pp-{config.preprocess_tag}")  # other preprocessing, other vectors: another id
        else:
            tag_cfg = open_clip.get_pretrained_cfg(config.model_name, config.pretrained)
            weights_file = _cached_tag_file(open_clip, tag_cfg)
            weights_name = config.pretrained
            tail = [config.pretrained]
        self.identity = ModelIdentity(
            backend="open_clip",
            model_id=slug("open_clip", config.model_name, *tail),
            name=f"{config.model_name}/{weights_name}",
            weights_sha256=file_sha256(weights_file) if weights_file is not None else None,
            device=self.device,
            precision=self.precision,
        )
        self._loaded: tuple[Any, Any, Any] | None = None
        self._lock = threading.Lock()

    def _load(self) -> tuple[Any, Any, Any]:
        """(model, image preprocess, tokenizer), once."""
        with self._lock:
            if self._loaded is None:
                open_clip = register_model_configs(self.config, STAGE)
                tag = self._tag_cfg
                model, _, preprocess = open_clip.create_model_and_transforms(
                    self.config.model_name,
                    pretrained=self.weights.value,
                    precision=self.precision,
                    device=self.device,
                    image_mean=tag.get("mean"),
                    image_std=tag.get("std"),
                    image_interpolation=tag.get("interpolation"),
                    image_resize_mode=tag.get("resize_mode"),
                    force_quick_gelu=bool(tag.get("quick_gelu", False)),
                    pretrained_text=False,  # the checkpoint holds the text tower; never fetch base weights
                    require_pretrained=True,  # weights that do not load are an error, never random
                )
                model.eval()  # open_clip returns the model in training mode (dropout on)
                self._loaded = (model, preprocess, open_clip.get_tokenizer(self.config.model_name))
            return self._loaded

    def image_vectors(self, images: Sequence[ImageRef], progress: Callable[[int], None] | None = None) -> np.ndarray:
        if not len(images):
            return np.empty((0, self.dim), dtype=np.float32)
        torch = require("torch", "embed")
        model, preprocess, _ = self._load()
        # open_clip's fp16 keeps some parameters in fp32; the input follows the conv weights, in half.
        dtype = torch.float16 if self.precision == "fp16" else torch.float32

        def encode(batch: list[Any]) -> np.ndarray:
            return model.encode_image(torch.stack(batch).to(self.device, dtype=dtype)).float().cpu().numpy()

        with torch.inference_mode():
            prepare = lambda ref, data: preprocess(decode_image(ref, data))  # noqa: E731
            return _embed_images(images, self.config.batch_size, prepare, encode, progress, "open_clip encode_image")

    def text_vectors(self, texts: Sequence[str]) -> np.ndarray:
        if not len(texts):
            return np.empty((0, self.dim), dtype=np.float32)
        torch = require("torch", "embed")
        model, _, tokenizer = self._load()

        def encode(batch: list[str]) -> np.ndarray:
            return model.encode_text(tokenizer(batch).to(self.device)).float().cpu().numpy()

        with torch.inference_mode():
            return _embed_texts(texts, self.config.batch_size, encode, "open_clip encode_text")


# -- transformers ---------------------------------------------------------------------------------------------------


class TransformersEncoderConfig(_ModelBackendConfig):
    """A Hugging Face dual encoder with get_image_features / get_text_features (CLIP, Chinese-CLIP)."""

    backend: Literal["transformers"] = "transformers"
    model: str = Field(
        description="A local folder written by save_pretrained (or downloaded), or a hub id such as "
        "openai/clip-vit-large-patch14 or OFA-Sys/chinese-clip-vit-large-patch14 (read from the Hugging Face cache "
        "when there, else downloaded on first use)."
    )
    revision: str | None = Field(
        default=None, description="Hub ids only: the branch, tag or commit to load (pins the weights)."
    )

    def build(self) -> TransformersEncoder:
        return TransformersEncoder(self)


def _feature_tensor(output: Any, method: str) -> Any:
    """transformers 4.x returns the projected features as a tensor; 5.x returns an output object whose
    pooler_output holds them."""
    if hasattr(output, "ndim"):
        return output
    pooled = getattr(output, "pooler_output", None)
    if pooled is None:
        raise TypeError(f"{STAGE}: {method} returned {type(output).__name__} without pooler_output")
    return pooled


class TransformersEncoder:
    """AutoModel + its processor; the model is loaded on first use."""

    def __init__(self, config: TransformersEncoderConfig) -> None:
        self.config = config
        require("transformers", "synthesis")
        self.source = _resolve_source(config.model, "TransformersEncoderConfig.model", config.revision, "synthesis")
        self.device, self.precision = resolve_device(
            config.device, config.precision, owner=f"{STAGE}: {type(config).__name__}", extra="embed"
        )
        self.identity = ModelIdentity(
            backend="transformers",
            model_id=slug("transformers", *self.source.id_parts),
            name=self.source.label,
            weights_sha256=self.source.weights_sha256,
            device=self.device,
            precision=self.precision,
        )
        self._loaded: tuple[Any, Any, Any] | None = None
        self._lock = threading.Lock()

    def _load(self) -> tuple[Any, Any, Any]:
        """(model, tokenizer, image processor), once."""
        with self._lock:
            if self._loaded is None:
                torch = require("torch", "synthesis")
                transformers = require("transformers", "synthesis")
                kwargs: dict[str, Any] = (
                    {"local_files_only": True} if self.source.local else {"revision": self.config.revision}
                )
                dtype = torch.float16 if self.precision == "fp16" else torch.float32
                # transformers 5 renamed torch_dtype to dtype; 4.x would pass an unknown `dtype` to the config.
                dtype_arg = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
                kwargs[dtype_arg] = dtype
                model = transformers.AutoModel.from_pretrained(self.source.load_from, **kwargs)
                kwargs.pop(dtype_arg)
                for method in ("get_image_features", "get_text_features"):
                    if not callable(getattr(model, method, None)):
                        raise ValueError(
                            f"{STAGE}: {self.source.label!r} loads as {type(model).__name__}, which has no {method}: "
                            "the transformers backend needs a dual encoder such as CLIP or Chinese-CLIP."
                        )
                model.to(self.device).eval()
                tokenizer = image_processor = None
                try:
                    processor = transformers.AutoProcessor.from_pretrained(self.source.load_from, **kwargs)
                    tokenizer = getattr(processor, "tokenizer", None)
                    image_processor = getattr(processor, "image_processor", None)
                except (OSError, ValueError, KeyError, TypeError):
                    pass  # no processor config: the tokenizer and image processor load on their own below
                if tokenizer is None:
                    tokenizer = transformers.AutoTokenizer.from_pretrained(self.source.load_from, **kwargs)
                if image_processor is None:
                    image_processor = transformers.AutoImageProcessor.from_pretrained(self.source.load_from, **kwargs)
                self._loaded = (model, tokenizer, image_processor)
            return self._loaded

    def _empty(self) -> np.ndarray:
        """(0, dim): CLIP-style configs name their projection size; otherwise one text tells."""
        model = self._load()[0]
        dim = getattr(model.config, "projection_dim", None)
        return np.empty((0, int(dim) if dim else self.text_vectors(["a"]).shape[1]), dtype=np.float32)

    def image_vectors(self, images: Sequence[ImageRef], progress: Callable[[int], None] | None = None) -> np.ndarray:
        if not len(images):
            return self._empty()
        torch = require("torch", "synthesis")
        model, _, image_processor = self._load()
        dtype = torch.float16 if self.precision == "fp16" else torch.float32

        def encode(batch: list[Image.Image]) -> np.ndarray:
            pixels = image_processor(images=batch, return_tensors="pt")["pixel_values"]
            output = model.get_image_features(pixel_values=pixels.to(self.device, dtype=dtype))
            return _feature_tensor(output, "get_image_features").float().cpu().numpy()

        with torch.inference_mode():
            return _embed_images(images, self.config.batch_size, decode_image, encode, progress, "get_image_features")

    def text_vectors(self, texts: Sequence[str]) -> np.ndarray:
        if not len(texts):
            return self._empty()
        torch = require("torch", "synthesis")
        model, tokenizer, _ = self._load()
        # A tokenizer saved without model_max_length reports a huge one: the position table is the real limit.
        limit = getattr(getattr(model.config, "text_config", model.config), "max_position_embeddings", None)
        max_length = min(tokenizer.model_max_length, limit) if limit else tokenizer.model_max_length

        def encode(batch: list[str]) -> np.ndarray:
            encoded = tokenizer(batch, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
            output = model.get_text_features(**encoded.to(self.device))
            return _feature_tensor(output, "get_text_features").float().cpu().numpy()

        with torch.inference_mode():
            return _embed_texts(texts, self.config.batch_size, encode, "get_text_features")


# -- sentence-transformers ------------------------------------------------------------------------------------------


class SentenceTransformersEncoderConfig(_ModelBackendConfig):
    """Two SentenceTransformer models sharing one vector space: one encodes images, the other query texts."""

    backend: Literal["sentence-transformers"] = "sentence-transformers"
    image_model: str = Field(
        description="Local folder or hub id of the SentenceTransformer that encodes PIL images, e.g. "
        "sentence-transformers/clip-ViT-B-32."
    )
    text_model: str = Field(
        description="Local folder or hub id of the SentenceTransformer that encodes the query texts into the image "
        "model's space, e.g. sentence-transformers/clip-ViT-B-32-multilingual-v1 (or the image model itself)."
    )

    def build(self) -> SentenceTransformersEncoder:
        return SentenceTransformersEncoder(self)


def _st_dimension(model: Any) -> int | None:
    # sentence-transformers 5.x renamed get_sentence_embedding_dimension to get_embedding_dimension.
    method = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return method()


class SentenceTransformersEncoder:
    """`SentenceTransformer.encode` on PIL images and on strings; both models load on first use, and their output
    dimensions are compared then."""

    def __init__(self, config: SentenceTransformersEncoderConfig) -> None:
        self.config = config
        require("sentence_transformers", "embed")
        self.image_source = _resolve_source(
            config.image_model, "SentenceTransformersEncoderConfig.image_model", None, "embed"
        )
        self.text_source = _resolve_source(
            config.text_model, "SentenceTransformersEncoderConfig.text_model", None, "embed"
        )
        self.device, self.precision = resolve_device(
            config.device, config.precision, owner=f"{STAGE}: {type(config).__name__}", extra="embed"
        )
        same = self.image_source.load_from == self.text_source.load_from
        parts = self.image_source.id_parts + (() if same else self.text_source.id_parts)
        hashes = (self.image_source.weights_sha256, self.text_source.weights_sha256)
        self.identity = ModelIdentity(
            backend="sentence-transformers",
            model_id=slug("sentence-transformers", *parts),
            name=f"image={self.image_source.label} text={self.text_source.label}",
            weights_sha256=None if None in hashes else sha256_bytes(f"{hashes[0]}\n{hashes[1]}".encode()),
            device=self.device,
            precision=self.precision,
        )
        self._loaded: tuple[Any, Any, int] | None = None
        self._lock = threading.Lock()

    def _open(self, source: _ModelSource) -> Any:
        st = require("sentence_transformers", "embed")
        model = st.SentenceTransformer(source.load_from, device=self.device, local_files_only=source.local)
        if self.precision == "fp16":
            model.half()
        return model.eval()

    def _load(self) -> tuple[Any, Any, int]:
        """(image model, text model, dim), once, with equal output dimensions checked."""
        with self._lock:
            if self._loaded is None:
                image_model = self._open(self.image_source)
                same = self.image_source.load_from == self.text_source.load_from
                text_model = image_model if same else self._open(self.text_source)
                # A CLIP image module may not declare its dimension: one tiny input each tells.
                image_dim = _st_dimension(image_model) or image_model.encode([Image.new("RGB", (8, 8))]).shape[-1]
                text_dim = _st_dimension(text_model) or text_model.encode(["a"]).shape[-1]
                if image_dim != text_dim:
                    raise ValueError(
                        f"{STAGE}: the image model {self.image_source.label!r} gives {image_dim}-d vectors but the "
                        f"text model {self.text_source.label!r} gives {text_dim}-d ones; pair a text model trained "
                        "into the image model's space (e.g. clip-ViT-B-32 with clip-ViT-B-32-multilingual-v1)."
                    )
                self._loaded = (image_model, text_model, int(image_dim))
            return self._loaded

    def image_vectors(self, images: Sequence[ImageRef], progress: Callable[[int], None] | None = None) -> np.ndarray:
        image_model, _, dim = self._load()
        if not len(images):
            return np.empty((0, dim), dtype=np.float32)

        def encode(batch: list[Image.Image]) -> np.ndarray:
            return image_model.encode(batch, batch_size=len(batch), convert_to_numpy=True, show_progress_bar=False)

        return _embed_images(images, self.config.batch_size, decode_image, encode, progress, "the image model's encode")

    def text_vectors(self, texts: Sequence[str]) -> np.ndarray:
        _, text_model, dim = self._load()
        if not len(texts):
            return np.empty((0, dim), dtype=np.float32)
        vectors = text_model.encode(
            list(texts), batch_size=self.config.batch_size, convert_to_numpy=True, show_progress_bar=False
        )
        return _check_dims(np.asarray(vectors, dtype=np.float32), len(texts), "the text model's encode")


# -- precomputed embeddings -----------------------------------------------------------------------------------------


class EmbeddingsEncoderConfig(BackendConfig["TextImageEncoder"]):
    """Vectors computed elsewhere (another framework, an API), read from two Parquet files; no model runs."""

    backend: Literal["embeddings"] = "embeddings"
    image_embeddings: str = Field(
        description="Parquet file (a local path or fsspec URL) with columns image_id (string) and embedding "
        "(list of float): one row per image of the release."
    )
    text_embeddings: str = Field(
        description="Parquet file with columns text (string, the exact query text) and embedding (list of float)."
    )
    name: str | None = Field(
        default=None,
        description="What the results call the model; its filesystem-safe form is the model_id (default: the "
        "image file's name without .parquet, plus the first 12 hex digits of both files' hash).",
    )

    @field_validator("name")
    @classmethod
    def _named(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("name is empty")
        return value

    def build(self) -> EmbeddingsEncoder:
        """Reads and checks both files now: a bad file fails before any scoring."""
        return EmbeddingsEncoder(self)


@dataclass(frozen=True)
class _Lookup:
    """One validated Parquet file: key -> row of a float32 matrix."""

    path: str
    sha256: str
    rows: dict[str, int]
    matrix: np.ndarray


#: Every Parquet file starts and ends with these four bytes.
PARQUET_MAGIC = b"PAR1"
#: A Parquet footer (schema and row-group index) larger than this is not an embeddings file's: refused unread.
MAX_PARQUET_FOOTER_BYTES = 64 << 20
_HASH_CHUNK = 8 << 20


def _parquet_reader(handle: Any, size: int, where: str) -> pq.ParquetFile:
    """The file as a ParquetFile, from its magic bytes and its footer only (no data page is read): a file that is
    not Parquet, however large, is refused from its first and last bytes."""
    if size < 12:
        raise ValueError(f"{where} is not a readable Parquet file: {size} bytes, fewer than any Parquet file has.")
    head = handle.read(4)
    handle.seek(size - 8)
    tail = handle.read(8)
    if head != PARQUET_MAGIC or tail[4:] != PARQUET_MAGIC:
        raise ValueError(
            f"{where} is not a readable Parquet file: it does not start and end with {PARQUET_MAGIC.decode()} "
            f"(it starts with {head!r})."
        )
    footer = int.from_bytes(tail[:4], "little")
    if not 0 < footer <= min(size - 12, MAX_PARQUET_FOOTER_BYTES):
        raise ValueError(
            f"{where} is not a readable Parquet file: its footer claims {footer} bytes of a {size}-byte file "
            f"(at most {MAX_PARQUET_FOOTER_BYTES >> 20} MB are read)."
        )
    handle.seek(0)
    try:
        return pq.ParquetFile(handle)
    except (pa.ArrowException, OSError) as exc:
        raise ValueError(f"{where} is not a readable Parquet file: {' '.join(str(exc).split())}") from None


def _file_sha256(handle: Any) -> str:
    handle.seek(0)
    digest = hashlib.sha256()
    while chunk := handle.read(_HASH_CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


def _read_embeddings(path: str, key: str, field: str) -> _Lookup:
    """Read and check one file: the two columns and their types, no nulls, non-finite values or zero vectors, no
    duplicate keys, one dimension. The magic bytes, footer and schema are checked before any data is read. Each
    error names the file and the problem."""
    import fsspec

    where = f"{STAGE}: {field} {path!r}"
    try:
        fs, fs_path = fsspec.core.url_to_fs(path)
    except (ValueError, ImportError) as exc:
        raise ValueError(f"{where} is not a usable path or fsspec URL: {exc}") from exc
    if not fs.isfile(fs_path):
        raise FileNotFoundError(f"{where} does not exist.")
    with fs.open(fs_path, "rb") as handle:
        reader = _parquet_reader(handle, int(fs.size(fs_path)), where)
        names = reader.schema_arrow.names
        missing = [name for name in (key, "embedding") if name not in names]
        if missing:
            raise ValueError(
                f"{where} lacks column(s) {', '.join(missing)}; it has {', '.join(names) or 'none'} "
                f"(expected {key}: string, embedding: list of float)."
            )
        try:
            table = reader.read(columns=[key, "embedding"])
        except (pa.ArrowException, OSError) as exc:
            raise ValueError(f"{where} is not a readable Parquet file: {' '.join(str(exc).split())}") from None
        digest = _file_sha256(handle)
    if table.num_rows == 0:
        raise ValueError(f"{where} has no rows.")
    keys, vectors = table[key].combine_chunks(), table["embedding"].combine_chunks()
    if not (pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type)):
        raise ValueError(f"{where}: column {key} must be string, not {keys.type}.")
    is_list = pa.types.is_list(vectors.type) or pa.types.is_large_list(vectors.type)
    if not (is_list or pa.types.is_fixed_size_list(vectors.type)) or not pa.types.is_floating(vectors.type.value_type):
        raise ValueError(f"{where}: column embedding must be a list of float, not {vectors.type}.")
    for name, column in ((key, keys), ("embedding", vectors)):
        if column.null_count:
            raise ValueError(f"{where}: column {name} has {column.null_count} null(s).")
    values = vectors.flatten()  # honours slices and offsets, unlike .values
    if values.null_count:
        raise ValueError(f"{where}: column embedding holds {values.null_count} null value(s) inside its lists.")
    lengths = pc.list_value_length(vectors).to_numpy(zero_copy_only=False)
    dim = int(lengths[0])
    if (lengths == 0).any():
        odd = int(np.flatnonzero(lengths == 0)[0])
        raise ValueError(f"{where}: row {odd} ({key} {keys[odd].as_py()!r}) has an empty embedding.")
    if (lengths != dim).any():
        odd = int(np.flatnonzero(lengths != dim)[0])
        raise ValueError(
            f"{where}: embeddings must share one length; row {odd} ({key} {keys[odd].as_py()!r}) has "
            f"{int(lengths[odd])} values where row 0 has {dim}."
        )
    matrix = values.to_numpy(zero_copy_only=False).astype(np.float32).reshape(len(keys), dim)
    finite = np.isfinite(matrix).all(axis=1)
    if not finite.all():
        bad = np.flatnonzero(~finite)
        raise ValueError(
            f"{where}: {len(bad)} embedding(s) hold NaN or infinite values (e.g. {key} {keys[int(bad[0])].as_py()!r})."
        )
    # A zero vector has no direction: its cosine with anything is 0, so every candidate ties and the slot order
    # would decide (M_cr = 1, SP = 0 from nothing measured).
    zero = np.flatnonzero(np.linalg.norm(matrix.astype(np.float64), axis=1) <= COSINE_EPS)
    if len(zero):
        raise ValueError(
            f"{where}: {len(zero)} embedding(s) have zero norm (all zeros, e.g. {key} "
            f"{keys[int(zero[0])].as_py()!r}); a vector without a direction cannot be scored."
        )
    names = keys.to_pylist()
    rows = {name: i for i, name in enumerate(names)}
    if len(rows) != len(names):
        counts = pc.value_counts(keys)
        dupes = [item["values"].as_py() for item in counts if item["counts"].as_py() > 1]
        raise ValueError(
            f"{where}: {len(dupes)} {key} value(s) occur more than once, e.g. {', '.join(map(repr, dupes[:3]))}."
        )
    return _Lookup(path, digest, rows, matrix)


def _take(lookup: _Lookup, keys: Sequence[str], what: str) -> np.ndarray:
    missing = [k for k in keys if k not in lookup.rows]
    if missing:
        examples = ", ".join(repr(k) for k in list(dict.fromkeys(missing))[:5])
        raise KeyError(
            f"{STAGE}: {len(missing)} of {len(keys)} {what} have no vector in {lookup.path!r}, e.g. {examples}"
        )
    return lookup.matrix[[lookup.rows[k] for k in keys]]  # fancy indexing: a copy, safe to modify


class EmbeddingsEncoder:
    """Looks vectors up by image_id and by exact query text; never loads an image."""

    def __init__(self, config: EmbeddingsEncoderConfig) -> None:
        self.config = config
        self.images = _read_embeddings(config.image_embeddings, "image_id", "EmbeddingsEncoderConfig.image_embeddings")
        self.texts = _read_embeddings(config.text_embeddings, "text", "EmbeddingsEncoderConfig.text_embeddings")
        image_dim, text_dim = self.images.matrix.shape[1], self.texts.matrix.shape[1]
        if image_dim != text_dim:
            raise ValueError(
                f"{STAGE}: image embeddings {config.image_embeddings!r} are {image_dim}-d but text embeddings "
                f"{config.text_embeddings!r} are {text_dim}-d; both must come from one model's shared space."
            )
        stem = config.image_embeddings.rstrip("/").rsplit("/", 1)[-1].removesuffix(".parquet")
        name = config.name or stem
        digest = sha256_bytes(f"{self.images.sha256}\n{self.texts.sha256}".encode())
        # Unnamed vectors are told apart by their files' hash: two sets both called IMG.parquet are two models.
        self.identity = ModelIdentity(
            backend="embeddings",
            model_id=slug("embeddings", name) if config.name else slug("embeddings", name, digest[:12]),
            name=name,
            weights_sha256=digest,
            device="n/a",
            precision="n/a",
        )

    def image_vectors(self, images: Sequence[ImageRef], progress: Callable[[int], None] | None = None) -> np.ndarray:
        vectors = _take(self.images, [ref.image_id for ref in images], "images")
        if progress is not None and len(images):
            progress(len(images))
        return vectors

    def text_vectors(self, texts: Sequence[str]) -> np.ndarray:
        return _take(self.texts, list(texts), "query texts")


EncoderConfig = Annotated[
    OpenClipEncoderConfig | TransformersEncoderConfig | SentenceTransformersEncoderConfig | EmbeddingsEncoderConfig,
    Field(discriminator="backend"),
]
