"""Where an open_clip model comes from, checked before it is built: its weights (a local file, hashed, or an open_clip
tag) and its architecture (built in, or a JSON in `model_config_dir`). Shared by the embedding tier of the image
dedup (`curation/image_embeddings.py`) and the 3XCM evaluation's open_clip encoder (`evaluation/`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from data.stage import require
from data.workspace import file_sha256

WEIGHT_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors", ".ckpt", ".npz")


class OpenClipSettings(Protocol):
    """The fields the helpers below read: OpenClipEmbeddingConfig's, and those of the 3XCM evaluation's open_clip
    encoder (evaluation/), which shares these checks."""

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
