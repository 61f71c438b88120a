"""The interface of a MixCuBe VLM backend, and what the backends share: the `VisionLanguageModel` protocol (with its
capability flag `runs_locally`), `VlmIdentity`, `Answer` and its reason classes (`ERROR_CLASSES`), and the
helpers that turn endpoints, image bytes and HTTP statuses into what a results card and an `Answer` hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field

from data.clients.model_ids import MODEL_ID_PATTERN
from data.clients.retry import TRANSIENT_HTTP_CODES
from evaluation.models.display_name import DisplayName, display_name_field

#: The reason classes an `Answer.error` takes.
ERROR_CLASSES: tuple[str, ...] = (
    "rate_limited",  # 429 after the retries
    "server_error",  # 5xx (and 408/425) after the retries
    "timeout",  # the request timed out after the retries
    "connection_error",  # the endpoint could not be reached after the retries
    "auth_error",  # 401/403: the key is missing or wrong
    "bad_request",  # another 4xx: the endpoint rejected the request (model name, image size, ...)
    "bad_response",  # the endpoint answered with something that is not a chat completion (not JSON, no choices)
    "malformed_response",  # JSON of the wrong shape: choices not a list, a message content that is not text, ...
    "response_too_large",  # the answer's body exceeded max_response_bytes; the rest was not read
    "refused",  # the model declined to answer (a refusal, a safety stop)
    "empty",  # the model answered with no text
    "bad_image",  # the image bytes could not be read; nothing was asked
    "out_of_memory",  # a local model ran out of (GPU) memory
    "generation_error",  # a local model failed otherwise
    "api_error",  # anything else an API client raised
)
#: Answers the model itself gave at these settings: scored (as incorrect) and cached, unlike transport failures.
MODEL_OUTCOMES = frozenset({"refused", "empty"})


class VlmConfigError(ValueError):
    """A VLM config that cannot work at all (every question would fail alike): raised, never returned per image."""


class VlmIdentity(BaseModel):
    """Which model answered: goes into a results card. Holds no secret and no machine path."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: str = Field(description='"openai" | "gemini" | "transformers".')
    model_id: str = Field(
        pattern=MODEL_ID_PATTERN,
        description='Filesystem-safe id (data.clients.model_ids.slug), e.g. "openai--Qwen--Qwen2-VL".',
    )
    name: str = Field(description="Human-readable model name.")
    display_name: DisplayName | None = display_name_field()
    weights_sha256: str | None = Field(
        default=None,
        description="Local weights: sha256 over the sorted (relative path, file sha256) of the model folder; None "
        "for remote APIs.",
    )
    endpoint: str | None = Field(default=None, description="Base URL of a remote API (no key, no query string).")


@dataclass(frozen=True)
class Answer:
    """The outcome of one question."""

    text: str | None  # the raw answer, kept verbatim
    error: str | None  # None on success; else a reason class of ERROR_CLASSES
    detail: str | None  # why, scrubbed of secrets
    attempts: int  # requests made for this answer (0 on a cache hit or when nothing was asked)
    cached: bool

    @property
    def ok(self) -> bool:
        return self.error is None


@runtime_checkable
class VisionLanguageModel(Protocol):
    identity: VlmIdentity

    # A capability flag, declared by the backend (a class attribute will do), so that no caller tests its name.
    @property
    def runs_locally(self) -> bool:
        """The model runs in this process (on its CPU or GPU): a run holds the `gpu` slot while it asks. False: a
        remote API answers."""
        ...

    def ask(self, prompt: str, image: bytes | None = None) -> Answer:
        """Ask `prompt` about `image` (encoded JPEG/PNG bytes), or text only when `image` is None (a judge)."""
        ...


#: One question: the prompt and the encoded image bytes it is about (None: text only, a judge's question).
Question = tuple[str, bytes | None]


@runtime_checkable
class AnswersInBatches(Protocol):
    """A capability a model may declare beside `VisionLanguageModel`: it answers several questions in one call (a
    local model generating them together). `batch_size` is how many it takes at once; 1 means one at a time, and
    callers then ask it as any other model."""

    @property
    def batch_size(self) -> int: ...

    def ask_many(self, questions: Sequence[Question]) -> list[Answer]:
        """One `Answer` per question, in order; never raises for one question's failure (as `ask`)."""
        ...


# -- shared helpers ------------------------------------------------------------------------------------------------
def public_endpoint(url: str | None) -> str | None:
    """A base URL as a results card may show it: no user info, no query string, no fragment, no trailing slash."""
    if not url:
        return None
    parts = urlsplit(url.strip())
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme.lower(), netloc.lower(), parts.path.rstrip("/"), "", ""))


def image_mime(data: bytes) -> str | None:
    """The MIME type of encoded image bytes, from their signature; None when they are no image we know."""
    if data[:3] == b"\xff\xd8\xff":
        return "image/jpeg"
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "image/png"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def short(text: str, limit: int = 500) -> str:
    """`text` on one line, cut to `limit` characters: a detail as an `Answer` holds it."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def http_error_class(code: int) -> tuple[str, bool]:
    """(error class, transient?) of an HTTP status."""
    if code == 429:
        return "rate_limited", True
    if code in (408,):
        return "timeout", True
    if code in TRANSIENT_HTTP_CODES or code >= 500:
        return "server_error", True
    if code in (401, 403):
        return "auth_error", False
    return "bad_request", False
