"""The `transformers` backend: a local (or hub) model through `transformers.pipeline("image-text-to-text")`, greedy
decoding; one pipeline per (weights, device, precision) in the process, one generation at a time per model, of one
question or of `batch_size` questions together.
"""

from __future__ import annotations

import io
import logging
import threading
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from pydantic import Field

from data.clients.devices import resolve_device
from data.clients.model_ids import folder_sha256, slug
from data.stage import BackendConfig, require
from evaluation.models.vlm.base import Answer, Question, VisionLanguageModel, VlmConfigError, VlmIdentity, short
from evaluation.models.vlm.cache import AnswerCache, CachedVlm

if TYPE_CHECKING:
    from PIL.Image import Image


class _TextPart(TypedDict):
    type: Literal["text"]
    text: str


class _ImagePart(TypedDict):
    type: Literal["image"]
    image: Image


class _Message(TypedDict):
    """A chat message as the image-text-to-text pipeline takes it."""

    role: str
    content: list[_ImagePart | _TextPart]


#: One question's chat: its messages.
_Conversation = list[_Message]

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
    batch_size: int = Field(
        default=1,
        ge=1,
        description="Questions generated together, left-padded (image questions and text-only ones apart). Above 1 "
        "it is part of the cache key: padding changes the float sums, so a batched answer may differ from the "
        "one-at-a-time answer where two tokens nearly tie.",
    )
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
        if config.batch_size > 1:  # batch 1 keeps the keys of caches written before batching existed
            self._params["batch_size"] = config.batch_size
        self.batch_size = config.batch_size
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
                pipe = transformers.pipeline(
                    "image-text-to-text",
                    model=model,
                    device=self.device,
                    dtype=torch.float16 if self.precision == "fp16" else torch.float32,
                    trust_remote_code=self.config.trust_remote_code,
                )
                tokenizer = pipe.tokenizer or getattr(pipe.processor, "tokenizer", None)
                if tokenizer is not None:  # a decoder-only model generates after the prompt: pad on the left
                    tokenizer.padding_side = "left"
                _pipelines[key] = pipe
            return _pipelines[key]

    def _ask_many(self, questions: Sequence[Question]) -> list[Answer]:
        """Generates the image questions together and the text-only ones together (the pipeline cannot batch the
        two); an image that does not decode is its own row. If a batch fails, its questions are asked one at a time,
        so that one question's failure stays one row."""
        out: list[Answer | None] = [None] * len(questions)
        groups: dict[bool, list[tuple[int, _Conversation]]] = {True: [], False: []}
        for index, (prompt, image) in enumerate(questions):
            messages = _messages(prompt, image)
            if isinstance(messages, Answer):
                out[index] = messages
            else:
                groups[image is not None].append((index, messages))
        for group in groups.values():
            if not group:
                continue
            try:
                answers = self._generate([messages for _, messages in group])
            except Exception as exc:  # one image's failure is a row, not a crash: ask each alone, if several
                answers = (
                    [self._generate_alone(messages) for _, messages in group] if len(group) > 1 else [self._failed(exc)]
                )
            for (index, _), answer in zip(group, answers, strict=True):
                out[index] = answer
        return typing.cast(list[Answer], out)

    def _generate(self, conversations: list[_Conversation]) -> list[Answer]:
        """One answer per conversation, generated in one pipeline call (raises what the pipeline raises)."""
        pipe = self._pipeline()
        generate = {"max_new_tokens": self.config.max_new_tokens, "do_sample": False}
        with self._lock:
            if len(conversations) == 1:
                return [_answer(pipe(text=conversations[0], generate_kwargs=generate, return_full_text=False))]
            outs = pipe(
                text=conversations, generate_kwargs=generate, return_full_text=False, batch_size=len(conversations)
            )
        return [_answer(out) for out in outs]

    def _generate_alone(self, conversation: _Conversation) -> Answer:
        try:
            return self._generate([conversation])[0]
        except Exception as exc:
            return self._failed(exc)

    def _failed(self, exc: Exception) -> Answer:
        error = "out_of_memory" if "OutOfMemory" in type(exc).__name__ else "generation_error"
        logger.warning("transformers vlm %s: %s (%s)", self.identity.model_id, error, type(exc).__name__)
        return Answer(None, error, short(f"{type(exc).__name__}: {exc}"), 1, False)


def _messages(prompt: str, image: bytes | None) -> _Conversation | Answer:
    """The chat messages of one question, or the `bad_image` answer when its bytes do not decode."""
    content: list[_ImagePart | _TextPart] = [{"type": "text", "text": prompt}]
    if image is not None:
        from PIL import Image

        try:
            with Image.open(io.BytesIO(image)) as opened:
                picture = opened.convert("RGB")
        except Exception as exc:  # PIL raises several types for bad bytes
            return Answer(None, "bad_image", short(f"{type(exc).__name__}: {exc}"), 0, False)
        content.insert(0, {"type": "image", "image": picture})
    return [{"role": "user", "content": content}]


def _answer(out: Any) -> Answer:
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
