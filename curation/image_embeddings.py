"""Image embeddings for the embedding tier of near-duplicate detection (3XCM paper §3.2.1).

The paper removes near-duplicates within each concept "automatically with an embedding model"; this module turns
images into unit vectors whose dot product is their cosine similarity. The one backend, `open_clip`, loads a CLIP
image tower from a local weights file (or an open_clip pretrained tag, which downloads). Rules:

- Weights are explicit. `pretrained` must be set, a path-like value must exist, and a non-path value must be a
  known open_clip tag of `model_name`: random weights give meaningless similarities, so there is no fallback.
- `precision="fp16"` applies on CUDA only; on CPU (half matmuls are slow or missing there) it falls back to fp32
  and logs a warning, so one config works on both kinds of machine.
- `device="cuda"` without a usable GPU is an error, not a silent CPU run.
- Output rows are float16 (half the memory of float32 for a million rows), unit length up to float16 rounding.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt
from PIL import Image
from pydantic import Field

from data.clients.devices import resolve_device
from data.clients.open_clip_weights import ResolvedWeights, register_model_configs, resolve_weights
from data.stage import BackendConfig, require

log = logging.getLogger(__name__)


class OpenClipEmbeddingConfig(BackendConfig["ImageEmbedder"]):
    """An open_clip image tower; the weights are always named explicitly (no random or implicit weights)."""

    backend: Literal["open_clip"] = "open_clip"
    model_name: str = Field(
        default="ViT-B-32",
        description="open_clip architecture name (a built-in config such as ViT-B-32, or the file stem of a JSON "
        "in model_config_dir).",
    )
    pretrained: str | None = Field(
        default=None,
        description="The weights: a local .pt/.bin/.safetensors file (offline use), or an open_clip pretrained tag "
        "of model_name such as laion2b_s34b_b79k (downloads on first use). Required: a missing file is an error, "
        "never a fallback to random weights.",
    )
    model_config_dir: str | None = Field(
        default=None,
        description="Optional folder of extra open_clip model-config JSONs (one architecture per file, named by its "
        "stem), registered before loading; for custom architectures.",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        default="auto",
        description="auto: CUDA when a GPU is usable, else CPU. cuda without a usable GPU is an error.",
    )
    precision: Literal["fp32", "fp16"] = Field(
        default="fp32",
        description="fp16 halves GPU memory and time on CUDA; on CPU it falls back to fp32 with a warning.",
    )
    batch_size: int = Field(default=64, ge=1, description="Images per forward pass.")

    def build(self) -> OpenClipEmbedder:
        """Checks weights, architecture and device now; loads the model on the first `embed` call."""
        return OpenClipEmbedder(self)


class ImageEmbedder(Protocol):
    model_id: str  # names the model and its weights, recorded next to each embedding score
    dim: int

    def embed(self, images: Sequence[Image.Image]) -> npt.NDArray[np.float16]:
        """(n, dim) float16 unit-norm rows, one per RGB image, in input order."""
        ...


@dataclass
class _Loaded:
    visual: Any  # the image tower only: the text tower is dropped, half of ViT-B-32's parameters
    preprocess: Any
    dtype: Any


_models: dict[tuple[str, str | None, str, tuple[int, ...], str, str], _Loaded] = {}
_models_lock = threading.Lock()


def _load(config: OpenClipEmbeddingConfig, weights: ResolvedWeights, device: str, precision: str) -> _Loaded:
    """One image tower per (architecture, weights, device, precision) in this process."""
    stamp: tuple[int, ...] = ()
    if weights.is_file:
        stat = os.stat(weights.value)
        stamp = (stat.st_size, stat.st_mtime_ns)  # a rewritten file is loaded again
    key = (config.model_name, config.model_config_dir, weights.value, stamp, device, precision)
    with _models_lock:
        if key not in _models:
            open_clip = register_model_configs(config)
            # create_model_from_pretrained sets require_pretrained: weights that do not load are an error.
            model, preprocess = open_clip.create_model_from_pretrained(
                config.model_name, pretrained=weights.value, precision=precision, device=device
            )
            model.eval()  # open_clip returns the model in training mode (dropout on)
            visual = model.visual
            _models[key] = _Loaded(visual, preprocess, next(visual.parameters()).dtype)
        return _models[key]


class OpenClipEmbedder:
    """Unit image embeddings from an open_clip image tower; the model is loaded on the first `embed` call."""

    def __init__(self, config: OpenClipEmbeddingConfig) -> None:
        self.config = config
        self.weights = resolve_weights(config)
        open_clip = register_model_configs(config)
        self.device, self.precision = resolve_device(
            config.device, config.precision, owner=f"image embeddings: {type(config).__name__}", extra="embed"
        )
        self.dim = int(open_clip.get_model_config(config.model_name)["embed_dim"])
        self.model_id = f"open_clip:{config.model_name}:{self.weights.label}"

    def embed(self, images: Sequence[Image.Image]) -> npt.NDArray[np.float16]:
        out = np.empty((len(images), self.dim), dtype=np.float16)
        if not len(images):
            return out
        torch = require("torch", "embed")
        loaded = _load(self.config, self.weights, self.device, self.precision)
        step = self.config.batch_size
        with torch.inference_mode():
            for start in range(0, len(images), step):
                batch = [im if im.mode == "RGB" else im.convert("RGB") for im in images[start : start + step]]
                pixels = torch.stack([loaded.preprocess(im) for im in batch]).to(self.device, dtype=loaded.dtype)
                features = loaded.visual(pixels).float()
                # Normalised in float32: fp16 features drift from unit length.
                features = torch.nn.functional.normalize(features, dim=-1)
                out[start : start + len(batch)] = features.cpu().numpy().astype(np.float16)
        return out


def build_embedder(config: OpenClipEmbeddingConfig) -> ImageEmbedder:
    """`config.build()`: the embedder, with weights, architecture and device checked now, the model loaded on first
    use."""
    return config.build()
