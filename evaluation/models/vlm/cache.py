"""The answer cache (one JSON file per question, keyed by everything that decides the answer and nothing secret)
and `CachedVlm`, the base of the three backends: the cache around each backend's `_ask`, the image check before
anything is asked, and the scrubbing of the API key from every answer.
"""

from __future__ import annotations

import hashlib
import json
import logging
import typing
from collections.abc import Sequence
from datetime import UTC, datetime

from data import provenance
from data.workspace import Storage, sha256_bytes
from evaluation.models.vlm.base import MODEL_OUTCOMES, Answer, Question, VlmIdentity, image_mime

logger = logging.getLogger(__name__)

#: A backend's generation settings that decide its answers (`CachedVlm._params`): each a JSON scalar.
GenerationParams = dict[str, str | int | float | bool | None]


def answer_key(
    identity: VlmIdentity, model: str | None, prompt: str, image_sha256: str | None, params: GenerationParams
) -> str:
    """The cache key of one question: everything that decides the answer (backend, the served model name or hub id,
    endpoint, weights, prompt, image, generation settings), nothing secret, and not the display name."""
    payload = {
        "backend": identity.backend,
        "model": model,
        "endpoint": identity.endpoint,
        "weights_sha256": identity.weights_sha256,
        "prompt": prompt,
        "image_sha256": image_sha256,
        "params": params,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class AnswerCache:
    """One JSON file per answered question, `<cache_dir>/<backend>/<key[:2]>/<key>.json`, written atomically (any
    fsspec URL)."""

    def __init__(self, url: str, identity: VlmIdentity) -> None:
        self.storage = Storage(url)
        self.identity = identity

    def _path(self, key: str) -> str:
        return self.storage.path(self.identity.backend, key[:2], f"{key}.json")

    def get(self, key: str) -> Answer | None:
        path = self._path(key)
        if not self.storage.exists(path):
            return None
        try:
            record = self.storage.read_json(path)
            text, error, detail = record["text"], record.get("error"), record.get("detail")
            if not all(value is None or isinstance(value, str) for value in (text, error, detail)):
                raise TypeError("a field that is not text")
        except (KeyError, TypeError, ValueError) as exc:  # a damaged entry is asked again, not trusted
            logger.info("vlm cache entry %s ignored: %s", key[:12], type(exc).__name__)
            return None
        if error is not None and error not in MODEL_OUTCOMES:
            return None
        return Answer(text, error, detail, 0, True)

    def put(self, key: str, prompt: str, image_sha256: str | None, params: GenerationParams, answer: Answer) -> None:
        self.storage.write_json(
            self._path(key),
            {
                "key": key,
                "identity": self.identity.model_dump(exclude={"display_name"}),  # a label: never the cache's
                "prompt": prompt,
                "image_sha256": image_sha256,
                "params": params,
                "text": answer.text,
                "error": answer.error,
                "detail": answer.detail,
                "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
            },
        )


class CachedVlm:
    """The cache around a backend's `_ask`; subclasses set `identity`, `_model`, `_params` and implement `_ask` (or
    `_ask_many`, when they answer several questions at once)."""

    identity: VlmIdentity
    _model: str | None  # what the backend is asked for (None: the weights hash names it)
    _params: GenerationParams
    _cache: AnswerCache | None

    def _secret(self) -> str | None:
        return None

    #: Questions `ask_many` hands `_ask_many` at once; a backend that generates several together sets it.
    batch_size: int = 1

    def ask(self, prompt: str, image: bytes | None = None) -> Answer:
        return self.ask_many([(prompt, image)])[0]

    def ask_many(self, questions: Sequence[Question]) -> list[Answer]:
        """The answers to `questions`, in order: cache hits and unreadable images first, then the rest asked
        `batch_size` at a time through `_ask_many`, each answer scrubbed and (when the model gave it) cached."""
        out: list[Answer | None] = [None] * len(questions)
        pending: list[tuple[int, str, str | None]] = []  # (index, cache key, image sha256)
        for index, (prompt, image) in enumerate(questions):
            image_sha = None if image is None else sha256_bytes(image)
            key = answer_key(self.identity, self._model, prompt, image_sha, self._params)
            hit = self._cache.get(key) if self._cache is not None else None
            if hit is not None:
                out[index] = hit
            elif image is not None and image_mime(image) is None:
                out[index] = Answer(None, "bad_image", "the image bytes are not JPEG, PNG, GIF or WebP", 0, False)
            else:
                pending.append((index, key, image_sha))
        secret = self._secret()
        for start in range(0, len(pending), self.batch_size):
            chunk = pending[start : start + self.batch_size]
            answers = self._ask_many([questions[index] for index, _, _ in chunk])
            for (index, key, image_sha), raw in zip(chunk, answers, strict=True):
                answer = Answer(
                    provenance.scrub(raw.text, [secret]),
                    raw.error,
                    provenance.scrub(raw.detail, [secret]),
                    raw.attempts,
                    False,
                )
                if self._cache is not None and (answer.error is None or answer.error in MODEL_OUTCOMES):
                    self._cache.put(key, questions[index][0], image_sha, self._params, answer)
                out[index] = answer
        return typing.cast(list[Answer], out)  # every index was filled above

    def _ask_many(self, questions: Sequence[Question]) -> list[Answer]:
        """Answers to up to `batch_size` questions whose images are readable; by default asked one at a time."""
        return [self._ask(prompt, image) for prompt, image in questions]

    def _ask(self, prompt: str, image: bytes | None) -> Answer:
        raise NotImplementedError

    def __repr__(self) -> str:  # the clients inside may hold the key; show the identity only
        return f"{type(self).__name__}({self.identity.model_id!r})"
