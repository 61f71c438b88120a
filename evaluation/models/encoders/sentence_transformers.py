"""The `sentence-transformers` backend: an image model and a text model with the same output space (clip-ViT-B-32
with clip-ViT-B-32-multilingual-v1), their output dimensions compared when they load.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from PIL import Image
from pydantic import Field

from data.clients.devices import resolve_device
from data.clients.model_ids import slug
from data.stage import require
from data.workspace import sha256_bytes
from evaluation.models.encoders.base import (
    STAGE,
    ImageRef,
    ModelBackendConfig,
    ModelIdentity,
    ModelSource,
    check_dims,
    decode_image,
    embed_images,
    resolve_source,
)


class SentenceTransformersEncoderConfig(ModelBackendConfig):
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
    dimension: int | None = method()
    return dimension


class SentenceTransformersEncoder:
    """`SentenceTransformer.encode` on PIL images and on strings; both models load on first use, and their output
    dimensions are compared then."""

    runs_locally = True
    needs_image_bytes = True

    def __init__(self, config: SentenceTransformersEncoderConfig) -> None:
        self.config = config
        require("sentence_transformers", "embed")
        self.image_source = resolve_source(
            config.image_model, "SentenceTransformersEncoderConfig.image_model", None, "embed"
        )
        self.text_source = resolve_source(
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

    def _open(self, source: ModelSource) -> Any:
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

    def image_vectors(
        self, images: Sequence[ImageRef], progress: Callable[[int], None] | None = None
    ) -> npt.NDArray[np.float32]:
        image_model, _, dim = self._load()
        if not len(images):
            return np.empty((0, dim), dtype=np.float32)

        def encode(batch: list[Image.Image]) -> npt.NDArray[np.floating]:
            vectors: npt.NDArray[np.floating] = image_model.encode(
                batch, batch_size=len(batch), convert_to_numpy=True, show_progress_bar=False
            )
            return vectors

        return embed_images(images, self.config.batch_size, decode_image, encode, progress, "the image model's encode")

    def text_vectors(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        _, text_model, dim = self._load()
        if not len(texts):
            return np.empty((0, dim), dtype=np.float32)
        vectors = text_model.encode(
            list(texts), batch_size=self.config.batch_size, convert_to_numpy=True, show_progress_bar=False
        )
        return check_dims(np.asarray(vectors, dtype=np.float32), len(texts), "the text model's encode")
