"""mteb 2.x encoders for CLIP checkpoints read from disk (no network): open_clip (its `local-dir:` folder layout, or
an architecture with a weights file) and Hugging Face dual encoders with `get_image_features` / `get_text_features`
(CLIP, Chinese-CLIP; a `save_pretrained` folder). A named checkpoint (an open_clip tag, a hub id) is read from the
Hugging Face cache, and downloaded only where the environment allows it.

Written by culturebench (`culturebench export RELEASE --harness mteb`) as `local_clip_mteb.py`, unchanged: it
imports mteb, torch, numpy, PIL and open_clip or transformers, never culturebench.

    import mteb
    from local_clip_mteb import hf_clip_model, open_clip_model
    model = open_clip_model("local-dir:/path/to/folder")  # or hf_clip_model("/path/to/folder")
    mteb.evaluate(model, tasks, cache=mteb.ResultCache("OUT"))

The vectors are computed as culturebench's `open_clip` and `transformers` backends compute them (eval mode, fp32,
upright RGB images, the checkpoint's own preprocessing and tokenizer; HF texts truncated at the position table),
so vectors saved from an mteb run score the same in `culturebench evaluate 3xcm --model-backend embeddings`. Each
distinct text, and each distinct picture (by its decoded pixels), is encoded once per process: the two 3XCM tasks
and their subsets share one corpus, and the saved vectors are the ones mteb scored.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from mteb.models.abs_encoder import AbsEncoder  # type: ignore[import-not-found, unused-ignore]
from mteb.models.model_meta import ModelMeta, ScoringFunction  # type: ignore[import-not-found, unused-ignore]
from PIL import Image, ImageOps

Vector = npt.NDArray[np.float32]
#: Files that hold weights, hashed into the mteb `revision` (a changed checkpoint is another revision).
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt")


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device {device!r}: one of auto, cpu, cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda': torch finds no usable GPU")
    return device


def weights_digest(root: Path, paths: Sequence[Path]) -> str:
    """The first 12 hex digits of a sha256 over the weight files (path under `root`, and content), in path order."""
    digest = hashlib.sha256()
    for path in sorted(paths, key=lambda p: p.relative_to(root).as_posix()):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        with path.open("rb") as handle:
            while chunk := handle.read(8 << 20):
                digest.update(chunk)
    return digest.hexdigest()[:12]


class _OpenClipTowers:
    """open_clip `encode_text` / `encode_image`, as culturebench's open_clip backend calls them."""

    def __init__(self, model_name: str, pretrained: str | None, device: str) -> None:
        import open_clip

        self.device = device
        self.model, _, self.preprocess = open_clip.create_model_and_transforms(
            model_name,
            pretrained=pretrained,
            device=device,
            pretrained_text=False,  # the checkpoint holds the text tower; never fetch base weights
            require_pretrained=True,  # weights that do not load are an error, never random
        )
        self.model.eval()  # open_clip returns the model in training mode (dropout on)
        self.tokenizer = open_clip.get_tokenizer(model_name)
        self.parameters = sum(p.numel() for p in self.model.parameters())

    def texts(self, texts: list[str]) -> Vector:
        with torch.inference_mode():
            tokens = self.tokenizer(texts).to(self.device)
            vectors: Vector = self.model.encode_text(tokens).float().cpu().numpy()
        return vectors

    def images(self, images: list[Image.Image]) -> Vector:
        with torch.inference_mode():
            pixels = torch.stack([self.preprocess(image) for image in images]).to(self.device)
            vectors: Vector = self.model.encode_image(pixels).float().cpu().numpy()
        return vectors


def _features(output: Any, method: str) -> Any:
    """transformers 4.x returns the projected features as a tensor, 5.x an output whose pooler_output holds them."""
    if hasattr(output, "ndim"):
        return output
    pooled = getattr(output, "pooler_output", None)
    if pooled is None:
        raise TypeError(f"{method} returned {type(output).__name__} without pooler_output")
    return pooled


class _HfClipTowers:
    """A transformers dual encoder and its processor, as culturebench's transformers backend calls them."""

    def __init__(self, source: str, device: str) -> None:
        import transformers

        self.device = device
        local = {"local_files_only": True} if Path(source).is_dir() else {}
        # transformers 5 renamed torch_dtype to dtype.
        dtype = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
        self.model = transformers.AutoModel.from_pretrained(source, **local, **{dtype: torch.float32})
        for method in ("get_image_features", "get_text_features"):
            if not callable(getattr(self.model, method, None)):
                raise ValueError(
                    f"{source} loads as {type(self.model).__name__}, which has no {method}: a dual encoder such as "
                    "CLIP or Chinese-CLIP is needed"
                )
        self.model.to(device).eval()
        tokenizer = image_processor = None
        try:
            processor = transformers.AutoProcessor.from_pretrained(source, **local)
            tokenizer = getattr(processor, "tokenizer", None)
            image_processor = getattr(processor, "image_processor", None)
        except (OSError, ValueError, KeyError, TypeError):
            pass  # no processor config: the tokenizer and image processor load on their own below
        self.tokenizer = tokenizer or transformers.AutoTokenizer.from_pretrained(source, **local)
        self.image_processor = image_processor or transformers.AutoImageProcessor.from_pretrained(source, **local)
        # A tokenizer saved without model_max_length reports a huge one: the position table is the real limit.
        config = self.model.config
        limit = getattr(getattr(config, "text_config", config), "max_position_embeddings", None)
        self.max_length = min(self.tokenizer.model_max_length, limit) if limit else self.tokenizer.model_max_length
        self.parameters = sum(p.numel() for p in self.model.parameters())

    def texts(self, texts: list[str]) -> Vector:
        with torch.inference_mode():
            encoded = self.tokenizer(
                texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
            )
            output = self.model.get_text_features(**encoded.to(self.device))
            vectors: Vector = _features(output, "get_text_features").float().cpu().numpy()
        return vectors

    def images(self, images: list[Image.Image]) -> Vector:
        with torch.inference_mode():
            pixels = self.image_processor(images=images, return_tensors="pt")["pixel_values"]
            output = self.model.get_image_features(pixel_values=pixels.to(self.device, dtype=torch.float32))
            vectors: Vector = _features(output, "get_image_features").float().cpu().numpy()
        return vectors


def _picture_key(image: Image.Image) -> bytes:
    return hashlib.sha256(f"{image.mode}{image.size}".encode() + image.tobytes()).digest()


class LocalClipEncoder(AbsEncoder):  # type: ignore[misc, unused-ignore]
    """An mteb encoder over one of the towers above: a query is text, a document an image (MIEB's t2i tasks)."""

    def __init__(self, towers: _OpenClipTowers | _HfClipTowers, name: str, revision: str) -> None:
        self.towers = towers
        self.text_memo: dict[str, Vector] = {}
        self.image_memo: dict[bytes, Vector] = {}
        self.mteb_model_meta = ModelMeta(
            loader=None,
            name=name,
            revision=revision,
            release_date=None,
            languages=None,
            n_parameters=towers.parameters,
            memory_usage_mb=None,
            max_tokens=None,
            embed_dim=int(towers.texts(["a"]).shape[1]),
            license=None,
            open_weights=True,
            public_training_code=None,
            public_training_data=None,
            framework=["PyTorch"],
            similarity_fn_name=ScoringFunction.COSINE,
            use_instructions=False,
            training_datasets=None,
            modalities=["image", "text"],
        )

    def text_vectors(self, texts: Sequence[str]) -> list[Vector]:
        missing = [text for text in dict.fromkeys(texts) if text not in self.text_memo]
        if missing:
            self.text_memo.update(zip(missing, self.towers.texts(missing), strict=True))
        return [self.text_memo[text] for text in texts]

    def image_vectors(self, images: Sequence[Image.Image]) -> list[Vector]:
        upright = [ImageOps.exif_transpose(image).convert("RGB") for image in images]
        keys = [_picture_key(image) for image in upright]
        missing = {key: image for key, image in zip(keys, upright, strict=True) if key not in self.image_memo}
        if missing:
            self.image_memo.update(zip(missing, self.towers.images(list(missing.values())), strict=True))
        return [self.image_memo[key] for key in keys]

    def encode(self, inputs: Any, *, task_metadata: Any, hf_split: str, hf_subset: str, **kwargs: Any) -> Vector:
        features = inputs.dataset.features
        if ("image" in features) == ("text" in features):
            raise ValueError(
                f"{task_metadata.name}: an input holds {'both' if 'image' in features else 'neither'} text and "
                "image; this encoder takes one or the other (a text query, an image document)"
            )
        rows: list[Vector] = []
        for batch in inputs:
            rows += self.image_vectors(batch["image"]) if "image" in features else self.text_vectors(batch["text"])
        return np.stack(rows) if rows else np.empty((0, self.mteb_model_meta.embed_dim), dtype=np.float32)


def open_clip_model(
    model_name: str, pretrained: str | None = None, *, device: str = "auto", name: str | None = None
) -> LocalClipEncoder:
    """open_clip's `local-dir:/path/to/folder` (a folder with open_clip_config.json and the weights), or an
    architecture (`ViT-B-32`) with `pretrained`: a weights file, or a tag read from the Hugging Face cache."""
    towers = _OpenClipTowers(model_name, pretrained, resolve_device(device))
    if model_name.startswith("local-dir:"):
        folder = Path(model_name.removeprefix("local-dir:")).resolve()
        files = [p for p in folder.iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file()]
        return LocalClipEncoder(towers, name or f"local/open_clip-{folder.name}", weights_digest(folder, files))
    if pretrained is not None and Path(pretrained).is_file():
        weights = Path(pretrained).resolve()
        label = f"local/open_clip-{model_name}-{weights.stem}"
        return LocalClipEncoder(towers, name or label, weights_digest(weights.parent, [weights]))
    return LocalClipEncoder(towers, name or f"local/open_clip-{model_name}-{pretrained}", "tag")


def hf_clip_model(source: str, *, device: str = "auto", name: str | None = None) -> LocalClipEncoder:
    """A transformers dual encoder: a `save_pretrained` folder (or a hub id already in the Hugging Face cache)."""
    towers = _HfClipTowers(source, resolve_device(device))
    folder = Path(source).resolve()
    if folder.is_dir():
        files = [p for p in folder.rglob("*") if p.suffix in WEIGHT_SUFFIXES and p.is_file()]
        return LocalClipEncoder(towers, name or f"local/hf-clip-{folder.name}", weights_digest(folder, files))
    return LocalClipEncoder(towers, name or f"local/hf-clip-{source.replace('/', '-')}", "hub")
