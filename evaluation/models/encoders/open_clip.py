"""The `open_clip` backend: CLIP, the multilingual XLM-R CLIPs and SigLIP through open_clip (`encode_image` /
`encode_text`).

Its weights and architecture checks are `data/clients/open_clip_weights.py`'s, shared with
`curation/image_embeddings.py`:
the weights are always explicit (a file or a pretrained tag, never a random fallback). A weights file can borrow a
tag's image preprocessing (`preprocess_tag`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, TypedDict

import numpy as np
import numpy.typing as npt
from pydantic import Field

from data.clients.devices import resolve_device
from data.clients.model_ids import slug
from data.clients.open_clip_weights import register_model_configs, resolve_weights
from data.stage import require
from data.workspace import file_sha256
from evaluation.models.encoders.base import (
    STAGE,
    ImageRef,
    ModelBackendConfig,
    ModelIdentity,
    decode_image,
    embed_images,
    embed_texts,
)


class OpenClipEncoderConfig(ModelBackendConfig):
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


class _PretrainedCfg(TypedDict, total=False):
    """open_clip's `get_pretrained_cfg` of a tag (empty for an unknown one): where its weights are, and the image
    preprocessing and QuickGELU setting it was trained with."""

    url: str
    hf_hub: str
    file: str
    mean: tuple[float, ...]
    std: tuple[float, ...]
    interpolation: str
    resize_mode: str
    quick_gelu: bool


def _cached_tag_file(open_clip: Any, cfg: _PretrainedCfg) -> Path | None:
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

    runs_locally = True
    needs_image_bytes = True

    def __init__(self, config: OpenClipEncoderConfig) -> None:
        self.config = config
        self.weights = resolve_weights(config, STAGE)
        open_clip = register_model_configs(config, STAGE)
        self._tag_cfg: _PretrainedCfg = {}
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
            local = Path(self.weights.value)
            weights_file: Path | None = local
            weights_name = local.name
            tail = [local.stem]
            if config.preprocess_tag:
                tail.append(f"pp-{config.preprocess_tag}")  # other preprocessing, other vectors: another id
        else:
            tag_cfg: _PretrainedCfg = open_clip.get_pretrained_cfg(config.model_name, config.pretrained)
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

    def image_vectors(
        self, images: Sequence[ImageRef], progress: Callable[[int], None] | None = None
    ) -> npt.NDArray[np.float32]:
        if not len(images):
            return np.empty((0, self.dim), dtype=np.float32)
        torch = require("torch", "embed")
        model, preprocess, _ = self._load()
        # open_clip's fp16 keeps some parameters in fp32; the input follows the conv weights, in half.
        dtype = torch.float16 if self.precision == "fp16" else torch.float32

        def encode(batch: list[Any]) -> npt.NDArray[np.float32]:
            vectors: npt.NDArray[np.float32] = (
                model.encode_image(torch.stack(batch).to(self.device, dtype=dtype)).float().cpu().numpy()
            )
            return vectors

        with torch.inference_mode():
            prepare = lambda ref, data: preprocess(decode_image(ref, data))  # noqa: E731
            return embed_images(images, self.config.batch_size, prepare, encode, progress, "open_clip encode_image")

    def text_vectors(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if not len(texts):
            return np.empty((0, self.dim), dtype=np.float32)
        torch = require("torch", "embed")
        model, _, tokenizer = self._load()

        def encode(batch: list[str]) -> npt.NDArray[np.float32]:
            vectors: npt.NDArray[np.float32] = model.encode_text(tokenizer(batch).to(self.device)).float().cpu().numpy()
            return vectors

        with torch.inference_mode():
            return embed_texts(texts, self.config.batch_size, encode, "open_clip encode_text")
