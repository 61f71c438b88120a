"""The `transformers` backend: a local (or hub) model through `transformers.pipeline("image-text-to-text")`, greedy
decoding; one pipeline per (weights, device, precision) in the process, one generation at a time per model.
"""

from __future__ import annotations

import io
import logging
import threading
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from data.clients.devices import resolve_device
from data.clients.model_ids import folder_sha256, slug
from data.stage import BackendConfig, require
from evaluation.vlm.base import Answer, VisionLanguageModel, VlmConfigError, VlmIdentity, short
from evaluation.vlm.cache import AnswerCache, CachedVlm

logger = logging.getLogger(__name__)


class TransformersVlmConfig(BackendConfig[VisionLanguageModel]):
    """A local or hub model through `transformers.pipeline("image-text-to-text")`, asked with chat messages and
    greedy decoding."""

    backend: Literal["transformers"] = "transformers"
    model: str = Field(description="A local model folder, or a hub id (downloaded on first use, HF cache rules).")
    name: str | None = Field(
        default=None, description="Display name (and model_id source); default the folder name or the hub id."
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        default="auto", description="auto: CUDA when a GPU is usable, else CPU. cuda without a GPU is an error."
    )
    precision: Literal["fp32", "fp16"] = Field(
        default="fp32", description="fp16 applies on CUDA only; on CPU it falls back to fp32 with a warning."
    )
    max_new_tokens: int = Field(default=120, ge=1, description="Answer length cap (App. C.2: 120).")
    trust_remote_code: bool = Field(
        default=False, description="Run the model repository's own code (some VLMs need it); off unless needed."
    )
    cache_dir: str | None = Field(default=None, description="fsspec folder of cached answers; None: no cache.")

    def build(self) -> TransformersVlm:
        return TransformersVlm(self)


def _looks_like_path(value: str) -> bool:
    return value.startswith(("/", ".", "~")) or "\\" in value or value.count("/") > 1


def resolve_model_folder(model: str) -> tuple[Path | None, str]:
    """(local folder or None, display name) for a `model` that is a folder or a hub id; a path that does not exist,
    or a folder without `config.json`, is a config error."""
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise VlmConfigError(f"transformers vlm: model folder {model!r} has no config.json")
        return path.resolve(), path.resolve().name
    if path.exists() or _looks_like_path(model):
        raise VlmConfigError(f"transformers vlm: model folder {model!r} (TransformersVlmConfig.model) does not exist")
    try:  # a hub id already in the local HF cache: pin its files by hash too
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(model, local_files_only=True)), model
    except Exception:  # not cached (or no huggingface_hub): it downloads on first use, unpinned
        logger.info("transformers vlm: %s is not in the local HF cache; weights_sha256 stays unset", model)
        return None, model


_pipelines: dict[tuple[str, str | None, str, str, bool], Any] = {}
_pipelines_lock = threading.Lock()


class TransformersVlm(CachedVlm):
    runs_locally = True

    def __init__(self, config: TransformersVlmConfig) -> None:
        self.config = config
        require("transformers", "synthesis")
        self.folder, default_name = resolve_model_folder(config.model)
        self.device, self.precision = resolve_device(
            config.device, config.precision, owner="transformers vlm: TransformersVlmConfig", extra="synthesis"
        )
        name = config.name or default_name
        self.identity = VlmIdentity(
            backend="transformers",
            model_id=slug("transformers", name),
            name=name,
            weights_sha256=None if self.folder is None else folder_sha256(self.folder),
            endpoint=None,
        )
        self._model = None if self.folder is not None else config.model
        self._params = {"max_new_tokens": config.max_new_tokens, "do_sample": False, "precision": self.precision}
        self._cache = AnswerCache(config.cache_dir, self.identity) if config.cache_dir else None
        self._lock = threading.Lock()  # one generation at a time per model

    def _pipeline(self) -> Any:
        """One pipeline per (weights, device, precision) in this process, loaded on the first question."""
        model = str(self.folder) if self.folder is not None else self.config.model
        key = (model, self.identity.weights_sha256, self.device, self.precision, self.config.trust_remote_code)
        with _pipelines_lock:
            if key not in _pipelines:
                torch = require("torch", "synthesis")
                transformers = require("transformers", "synthesis")
                _pipelines[key] = transformers.pipeline(
                    "image-text-to-text",
                    model=model,
                    device=self.device,
                    dtype=torch.float16 if self.precision == "fp16" else torch.float32,
                    trust_remote_code=self.config.trust_remote_code,
                )
            return _pipelines[key]

    def _ask(self, prompt: str, image: bytes | None) -> Answer:
        content: list[dict[str, Any]] = [{"type": "text", "text": prompt}]
        if image is not None:
            from PIL import Image

            try:
                with Image.open(io.BytesIO(image)) as opened:
                    picture = opened.convert("RGB")
            except Exception as exc:  # PIL raises several types for bad bytes
                return Answer(None, "bad_image", short(f"{type(exc).__name__}: {exc}"), 0, False)
            content.insert(0, {"type": "image", "image": picture})
        messages = [{"role": "user", "content": content}]
        pipe = self._pipeline()
        try:
            with self._lock:
                out = pipe(
                    text=messages,
                    generate_kwargs={"max_new_tokens": self.config.max_new_tokens, "do_sample": False},
                    return_full_text=False,
                )
        except Exception as exc:  # one image's failure is a row, not a crash
            error = "out_of_memory" if "OutOfMemory" in type(exc).__name__ else "generation_error"
            logger.warning("transformers vlm %s: %s (%s)", self.identity.model_id, error, type(exc).__name__)
            return Answer(None, error, short(f"{type(exc).__name__}: {exc}"), 1, False)
        text = _generated_text(out)
        if text is None:
            return Answer(None, "bad_response", f"unexpected pipeline output: {type(out).__name__}", 1, False)
        if not text.strip():
            return Answer(text, "empty", "the model generated no text", 1, False)
        return Answer(text, None, None, 1, False)


def _generated_text(out: Any) -> str | None:
    """The new text of a pipeline result: `[{"generated_text": str}]`, or chat messages whose last one is it."""
    item = out[0] if isinstance(out, list) and out else out
    if isinstance(item, list) and item:  # batched form
        item = item[0]
    generated = item.get("generated_text") if isinstance(item, dict) else None
    if isinstance(generated, list) and generated:
        generated = generated[-1].get("content") if isinstance(generated[-1], dict) else None
    return generated if isinstance(generated, str) else None
