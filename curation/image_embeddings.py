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
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
from PIL import Image
from pydantic import Field

from data.stage import BackendConfig, require
from data.workspace import file_sha256

log = logging.getLogger(__name__)

WEIGHT_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors", ".ckpt", ".npz")


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

    def embed(self, images: Sequence[Image.Image]) -> np.ndarray:
        """(n, dim) float16 unit-norm rows, one per RGB image, in input order."""
        ...


class OpenClipSettings(Protocol):
    """The fields the helpers below read: OpenClipEmbeddingConfig's, and those of the 3XCM evaluation's open_clip
    encoder (curation/evaluation/encoders.py), which shares these checks."""

    @property
    def model_name(self) -> str: ...
    @property
    def pretrained(self) -> str | None: ...
    @property
    def model_config_dir(self) -> str | None: ...
    @property
    def device(self) -> str: ...
    @property
    def precision(self) -> str: ...


@dataclass(frozen=True)
class ResolvedWeights:
    """`pretrained` checked and named: either a local file or an open_clip tag."""

    value: str  # the absolute file path, or the tag, as open_clip takes it
    label: str  # what model_id records: file name + content hash prefix, or the tag
    is_file: bool


def looks_like_path(value: str) -> bool:
    """Tags are bare names (laion2b_s34b_b79k); anything with a separator, a home/relative prefix or a weights
    suffix names a file."""
    return "/" in value or "\\" in value or value.startswith((".", "~")) or value.lower().endswith(WEIGHT_SUFFIXES)


def resolve_weights(config: OpenClipSettings, stage: str = "image embeddings") -> ResolvedWeights:
    """Check `pretrained` before any model is built, so a typo fails with the path and the field, not later.
    `stage` and the config's class name open every message."""
    owner = type(config).__name__
    if not config.pretrained:
        raise ValueError(
            f"{stage}: {owner}.pretrained is not set. Trained weights are needed (random weights give "
            "meaningless similarities): give a local weights file (e.g. open_clip_pytorch_model.bin) or an "
            "open_clip pretrained tag."
        )
    path = Path(config.pretrained).expanduser()
    if path.is_file():
        path = path.resolve()
        # The file name, never the machine path: the id goes into published tables.
        return ResolvedWeights(str(path), f"{path.name}:sha256-{file_sha256(path)[:12]}", is_file=True)
    if looks_like_path(config.pretrained):
        what = "is a folder, not a weights file" if path.is_dir() else "does not exist"
        raise FileNotFoundError(
            f"{stage}: weights file {config.pretrained!r} ({owner}.pretrained) {what}. "
            "Point pretrained at an open_clip .pt/.bin/.safetensors file, e.g. the open_clip_pytorch_model.bin of "
            "a downloaded laion/CLIP-ViT-B-32-laion2B-s34B-b79K repository."
        )
    open_clip = require("open_clip", "embed")
    if not open_clip.get_pretrained_cfg(config.model_name, config.pretrained):
        tags = open_clip.list_pretrained_tags_by_model(config.model_name)
        raise ValueError(
            f"{stage}: {owner}.pretrained={config.pretrained!r} is neither an existing "
            f"file nor an open_clip pretrained tag of {config.model_name!r} (tags: {', '.join(tags) or 'none'})."
        )
    return ResolvedWeights(config.pretrained, config.pretrained, is_file=False)


def register_model_configs(config: OpenClipSettings, stage: str = "image embeddings") -> Any:
    """Import open_clip, register `model_config_dir` and check that `model_name` is a known architecture."""
    open_clip = require("open_clip", "embed")
    owner = type(config).__name__
    if config.model_name.startswith(("hf-hub:", "local-dir:")):
        # Those schemas make open_clip ignore `pretrained` and fetch weights by their own rules.
        raise ValueError(
            f"{stage}: model_name {config.model_name!r} uses an open_clip schema; give the architecture "
            "name as model_name and the weights file as pretrained instead."
        )
    if config.model_config_dir is not None:
        folder = Path(config.model_config_dir).expanduser()
        if not folder.is_dir():
            raise FileNotFoundError(
                f"{stage}: model config folder {config.model_config_dir!r} ({owner}.model_config_dir) does not exist."
            )
        # Added again on every load so that this folder's config wins over a same-named one added earlier.
        open_clip.add_model_config(folder)
    if open_clip.get_model_config(config.model_name) is None:
        raise ValueError(
            f"{stage}: unknown open_clip architecture {config.model_name!r} "
            f"({owner}.model_name); add its JSON to model_config_dir or pick a built-in one."
        )
    return open_clip


def resolve_device(config: OpenClipSettings, stage: str = "image embeddings") -> tuple[str, str]:
    """The torch device and the effective precision (fp16 only on CUDA)."""
    torch = require("torch", "embed")
    has_cuda = torch.cuda.is_available()
    if config.device == "cuda" and not has_cuda:
        raise RuntimeError(
            f"{stage}: {type(config).__name__}.device is 'cuda' but torch sees no usable CUDA device; "
            "use device 'auto' or 'cpu'."
        )
    device = "cuda" if config.device == "cuda" or (config.device == "auto" and has_cuda) else "cpu"
    precision = config.precision
    if precision == "fp16" and device == "cpu":
        log.warning("%s: precision fp16 needs CUDA; running in fp32 on the CPU", stage)
        precision = "fp32"
    return device, precision


@dataclass
class _Loaded:
    visual: Any  # the image tower only: the text tower is dropped, half of ViT-B-32's parameters
    preprocess: Any
    dtype: Any


_models: dict[tuple, _Loaded] = {}
_models_lock = threading.Lock()


def _load(config: OpenClipEmbeddingConfig, weights: ResolvedWeights, device: str, precision: str) -> _Loaded:
    """One image tower per (architecture, weights, device, precision) in this process."""
    stamp: tuple = ()
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
        self.device, self.precision = resolve_device(config)
        self.dim = int(open_clip.get_model_config(config.model_name)["embed_dim"])
        self.model_id = f"open_clip:{config.model_name}:{self.weights.label}"

    def embed(self, images: Sequence[Image.Image]) -> np.ndarray:
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
