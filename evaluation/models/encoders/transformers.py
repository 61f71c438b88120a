"""The `transformers` backend: a Hugging Face dual encoder with `get_image_features` / `get_text_features` (CLIP,
Chinese-CLIP), loaded with its processor (or its tokenizer and image processor).
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
from evaluation.models.encoders.base import (
    STAGE,
    ImageRef,
    ModelBackendConfig,
    ModelIdentity,
    decode_image,
    embed_images,
    embed_texts,
    resolve_source,
)


class TransformersEncoderConfig(ModelBackendConfig):
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

    runs_locally = True
    needs_image_bytes = True

    def __init__(self, config: TransformersEncoderConfig) -> None:
        self.config = config
        require("transformers", "synthesis")
        self.source = resolve_source(config.model, "TransformersEncoderConfig.model", config.revision, "synthesis")
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
                # from_pretrained's keyword arguments: a flag or revision, and the torch dtype
                kwargs: dict[str, object] = (
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

    def _empty(self) -> npt.NDArray[np.float32]:
        """(0, dim): CLIP-style configs name their projection size; otherwise one text tells."""
        model = self._load()[0]
        dim = getattr(model.config, "projection_dim", None)
        return np.empty((0, int(dim) if dim else self.text_vectors(["a"]).shape[1]), dtype=np.float32)

    def image_vectors(
        self, images: Sequence[ImageRef], progress: Callable[[int], None] | None = None
    ) -> npt.NDArray[np.float32]:
        if not len(images):
            return self._empty()
        torch = require("torch", "synthesis")
        model, _, image_processor = self._load()
        dtype = torch.float16 if self.precision == "fp16" else torch.float32

        def encode(batch: list[Image.Image]) -> npt.NDArray[np.float32]:
            pixels = image_processor(images=batch, return_tensors="pt")["pixel_values"]
            output = model.get_image_features(pixel_values=pixels.to(self.device, dtype=dtype))
            vectors: npt.NDArray[np.float32] = _feature_tensor(output, "get_image_features").float().cpu().numpy()
            return vectors

        with torch.inference_mode():
            return embed_images(images, self.config.batch_size, decode_image, encode, progress, "get_image_features")

    def text_vectors(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if not len(texts):
            return self._empty()
        torch = require("torch", "synthesis")
        model, tokenizer, _ = self._load()
        # A tokenizer saved without model_max_length reports a huge one: the position table is the real limit.
        limit = getattr(getattr(model.config, "text_config", model.config), "max_position_embeddings", None)
        max_length = min(tokenizer.model_max_length, limit) if limit else tokenizer.model_max_length

        def encode(batch: list[str]) -> npt.NDArray[np.float32]:
            encoded = tokenizer(batch, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
            output = model.get_text_features(**encoded.to(self.device))
            vectors: npt.NDArray[np.float32] = _feature_tensor(output, "get_text_features").float().cpu().numpy()
            return vectors

        with torch.inference_mode():
            return embed_texts(texts, self.config.batch_size, encode, "get_text_features")
