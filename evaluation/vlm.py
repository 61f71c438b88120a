"""Vision-language models asked MixCuBe's questions (MixCuBe paper §3, App. B.2, B.3, C): one protocol, three
backends.

- `openai`: any OpenAI-compatible chat-completions endpoint (vLLM, SGLang, hosted APIs) through the `openai`
  client; the image goes as a base64 `data:` URL content part.
- `gemini`: Gemini through `google-genai`, by the project's one Gemini client (`data/gemini.py`,
  `GeminiClient.generate_text`), with the image as an inline part.
- `transformers`: a local (or hub) model through `transformers.pipeline("image-text-to-text")`, greedy decoding.

Rules shared by the three:

- `ask(prompt, image)` never raises for one question's failure: it returns an `Answer` whose `error` names a short
  reason class (`ERROR_CLASSES`). Only a config error raises (a missing extra, a model folder that does not exist,
  `device="cuda"` without a GPU, no Gemini key), and `build()` checks those before any image is processed.
- Transient errors (429, 5xx, timeouts, dropped connections) are retried by the shared `RetryPolicy` of
  `data/retry.py`, honouring Retry-After up to its `max_retry_after_s`; a longer Retry-After fails the question at
  once as `rate_limited` (waiting less than asked would only be refused again), as the downloader does. The SDKs'
  own retries are off, so one policy counts the attempts. Remote backends share a process-wide rate limiter per
  endpoint and model (`shared_limiter`).
- `openai`: `timeout_s` is a deadline for the whole HTTP request (connect, sending, headers and body together), not
  for each read: a server that trickles its answer a byte at a time is cut off there (`timeout`). The body is read
  as a stream and its decoded size capped (`max_response_bytes`): a bigger answer is a `response_too_large` failure,
  never read whole. A body that is JSON but not a chat completion's shape (`choices` not a list, a message whose
  content is not text) is a `malformed_response` failure.
- Answers are cached on disk when `cache_dir` is set: one JSON file per question, keyed by the sha256 of (backend,
  model, endpoint, weights, prompt, image sha256, generation settings); a rerun asks nothing again. Transport
  failures (malformed, oversized and late answers among them) are never cached and never scored; "refused" and
  "empty" are the model's own answers at these settings, so they are. A cache entry whose fields are not text is
  asked again.
- The API key is read from the environment (or a Prefect Secret block for Gemini) when the first question is asked
  and is kept only inside the client: it is scrubbed from every detail, answer and cache record, and it is never
  logged, never part of the identity and never part of a cache key.
- `VlmIdentity` names the model for a results card: a filesystem-safe `model_id`, the endpoint without any query
  string or user info, and for local weights the sha256 over their files.

The paper's generation settings (App. C.2: 120 tokens, temperature 0.3, top-p 0.6 for the evaluated models) are
available, but the default temperature is 0 (greedy), so that reruns and caches agree; set them to reproduce the
paper's sampling.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import logging
import os
import re
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from data import provenance
from data.devices import resolve_device
from data.gemini import GeminiClient, GeminiConfigError, GeminiSettings, StructuredAnswer, resolve_api_key
from data.model_ids import MODEL_ID_PATTERN, folder_sha256, slug
from data.retry import TRANSIENT_HTTP_CODES, RetryPolicy, parse_retry_after, shared_limiter
from data.stage import BackendConfig, require
from data.workspace import Storage, sha256_bytes
from evaluation.http_limits import (
    ResponseTooLarge,
    bound_by_deadlines,
    read_capped,
    request_deadline,
)

logger = logging.getLogger(__name__)

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

DEFAULT_GEMINI_ENDPOINT = "https://generativelanguage.googleapis.com"
PLACEHOLDER_API_KEY = "EMPTY"  # what vLLM/SGLang accept when they run without a key


class VlmConfigError(ValueError):
    """A VLM config that cannot work at all (every question would fail alike): raised, never returned per image."""


class VlmIdentity(BaseModel):
    """Which model answered: goes into a results card. Holds no secret and no machine path."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: str = Field(description='"openai" | "gemini" | "transformers".')
    model_id: str = Field(
        pattern=MODEL_ID_PATTERN, description='Filesystem-safe id (data.model_ids.slug), e.g. "openai--Qwen--Qwen2-VL".'
    )
    name: str = Field(description="Human-readable model name.")
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

    def ask(self, prompt: str, image: bytes | None = None) -> Answer:
        """Ask `prompt` about `image` (encoded JPEG/PNG bytes), or text only when `image` is None (a judge)."""
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


def _short(text: str, limit: int = 500) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def answer_key(
    identity: VlmIdentity, model: str | None, prompt: str, image_sha256: str | None, params: dict[str, Any]
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

    def put(self, key: str, prompt: str, image_sha256: str | None, params: dict[str, Any], answer: Answer) -> None:
        self.storage.write_json(
            self._path(key),
            {
                "key": key,
                "identity": self.identity.model_dump(),
                "prompt": prompt,
                "image_sha256": image_sha256,
                "params": params,
                "text": answer.text,
                "error": answer.error,
                "detail": answer.detail,
                "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
            },
        )


class _CachedVlm:
    """The cache around a backend's `_ask`; subclasses set `identity`, `_model`, `_params` and implement `_ask`."""

    identity: VlmIdentity
    _model: str | None  # what the backend is asked for (None: the weights hash names it)
    _params: dict[str, Any]
    _cache: AnswerCache | None

    def _secret(self) -> str | None:
        return None

    def ask(self, prompt: str, image: bytes | None = None) -> Answer:
        image_sha = None if image is None else sha256_bytes(image)
        key = answer_key(self.identity, self._model, prompt, image_sha, self._params)
        if self._cache is not None:
            hit = self._cache.get(key)
            if hit is not None:
                return hit
        if image is not None and image_mime(image) is None:
            return Answer(None, "bad_image", "the image bytes are not JPEG, PNG, GIF or WebP", 0, False)
        answer = self._ask(prompt, image)
        secret = self._secret()
        answer = Answer(
            provenance.scrub(answer.text, [secret]),
            answer.error,
            provenance.scrub(answer.detail, [secret]),
            answer.attempts,
            False,
        )
        if self._cache is not None and (answer.error is None or answer.error in MODEL_OUTCOMES):
            self._cache.put(key, prompt, image_sha, self._params, answer)
        return answer

    def _ask(self, prompt: str, image: bytes | None) -> Answer:
        raise NotImplementedError

    def __repr__(self) -> str:  # the clients inside may hold the key; show the identity only
        return f"{type(self).__name__}({self.identity.model_id!r})"


def _http_error_class(code: int) -> tuple[str, bool]:
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


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number" if isinstance(value, int | float) else type(value).__name__)


# -- openai ----------------------------------------------------------------------------------------------------------
class OpenAIChatConfig(BackendConfig["VisionLanguageModel"]):
    """An OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, SGLang, ...), asked with the image as a
    base64 data URL."""

    backend: Literal["openai"] = "openai"
    base_url: str = Field(description="The API base URL, e.g. http://127.0.0.1:8000/v1 for a local vLLM server.")
    model: str = Field(description="The model name the endpoint serves.")
    name: str | None = Field(default=None, description="Display name (and model_id source); default the model.")
    api_key_env: str = Field(
        default="OPENAI_API_KEY",
        description=f"Environment variable holding the key; unset, {PLACEHOLDER_API_KEY!r} is sent (local servers).",
    )
    max_tokens: int = Field(default=120, ge=1, description="Answer length cap (App. C.2: 120).")
    temperature: float = Field(default=0.0, ge=0.0, le=2.0, description="0 = greedy (App. C.2 used 0.3).")
    top_p: float | None = Field(default=None, gt=0.0, le=1.0, description="None = the server's default (C.2: 0.6).")
    timeout_s: float = Field(
        default=120.0,
        gt=0,
        description="Deadline of one HTTP request, whole: connect, send, headers and body together (not per read).",
    )
    max_response_bytes: int = Field(
        default=1 << 20,
        ge=1024,
        description="Cap on one answer's body (decoded); beyond it the question fails as response_too_large, unread.",
    )
    rate_per_s: float | None = Field(default=None, gt=0, description="Requests per second, process-wide; None: no cap.")
    retry: RetryPolicy = Field(
        default_factory=lambda: RetryPolicy(max_attempts=6, base_delay_s=2.0, max_delay_s=60.0),
        description="Transient errors only (429, 5xx, timeouts); a Retry-After beyond its max_retry_after_s fails "
        "the question at once.",
    )
    cache_dir: str | None = Field(default=None, description="fsspec folder of cached answers; None: no cache.")

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url {value!r} is not an http(s) URL")
        return value

    def build(self) -> OpenAIChatVlm:
        return OpenAIChatVlm(self)


class OpenAIChatVlm(_CachedVlm):
    def __init__(self, config: OpenAIChatConfig, sleep: Callable[[float], None] = time.sleep) -> None:
        self.config = config
        self._openai = require("openai", "evaluate")
        endpoint = public_endpoint(config.base_url)
        name = config.name or config.model
        self.identity = VlmIdentity(
            backend="openai", model_id=slug("openai", name), name=name, weights_sha256=None, endpoint=endpoint
        )
        self._model = config.model
        self._params = {"max_tokens": config.max_tokens, "temperature": config.temperature, "top_p": config.top_p}
        self._cache = AnswerCache(config.cache_dir, self.identity) if config.cache_dir else None
        self._limiter = shared_limiter(f"openai:{endpoint}:{config.model}", config.rate_per_s)
        self._sleep = sleep
        self._client: Any = None
        self._key: str | None = None
        self._lock = threading.Lock()

    def _secret(self) -> str | None:
        return self._key if self._key != PLACEHOLDER_API_KEY else None

    def _connect(self) -> Any:
        with self._lock:
            if self._client is None:
                key = os.environ.get(self.config.api_key_env, "").strip()
                if not key:
                    logger.info("openai vlm: %s is not set; sending a placeholder key", self.config.api_key_env)
                self._key = key or PLACEHOLDER_API_KEY
                http_client = self._openai.DefaultHttpxClient(timeout=self.config.timeout_s)
                if not bound_by_deadlines(http_client):
                    logger.warning(
                        "openai vlm: the HTTP client has no connection pool we know; timeout_s bounds each read "
                        "and the pauses of the body only"
                    )
                self._client = self._openai.OpenAI(
                    api_key=self._key,
                    base_url=self.config.base_url,
                    max_retries=0,
                    timeout=self.config.timeout_s,
                    http_client=http_client,
                )
            return self._client

    def _messages(self, prompt: str, image: bytes | None) -> list[dict[str, Any]]:
        if image is None:
            return [{"role": "user", "content": prompt}]
        url = f"data:{image_mime(image)};base64,{base64.b64encode(image).decode('ascii')}"
        return [
            {
                "role": "user",
                "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": prompt}],
            }
        ]

    def _classify(self, exc: Exception) -> tuple[str, str, float | None, bool]:
        """(error class, detail, Retry-After seconds, transient?) of an exception from the request."""
        errors = self._openai
        detail = _short(f"{type(exc).__name__}: {exc}")
        if isinstance(exc, errors.APIStatusError):
            error, transient = _http_error_class(int(exc.status_code))
            headers = getattr(exc.response, "headers", None) or {}
            retry_after = parse_retry_after(headers.get("retry-after"))
            if retry_after is None and headers.get("retry-after-ms", "").strip().isdigit():
                retry_after = int(headers["retry-after-ms"]) / 1000.0
            return error, detail, retry_after, transient
        if exc.__cause__ is not None and str(exc.__cause__) not in detail:  # the SDK's "Request timed out." says less
            detail = _short(f"{detail} ({exc.__cause__})")
        # The body is read after the SDK returns: its errors are the HTTP client's own (httpx or httpx2).
        bases = {cls.__name__ for cls in type(exc).__mro__}
        if isinstance(exc, errors.APITimeoutError | TimeoutError) or "TimeoutException" in bases:
            return "timeout", detail, None, True
        if isinstance(exc, errors.APIConnectionError) or "TransportError" in bases:
            return "connection_error", detail, None, True
        if isinstance(exc, errors.APIResponseValidationError | ValueError | zlib.error) or "DecodingError" in bases:
            return "bad_response", detail, None, False
        return "api_error", detail, None, False

    def _request(self, client: Any, messages: list[dict[str, Any]], kwargs: dict[str, Any]) -> bytes:
        """One request, its body read as a stream under the size cap, all of it within the request deadline."""
        request = client.chat.completions.with_streaming_response.create
        headers = {"Accept-Encoding": "gzip, deflate"}  # what read_capped inflates under its cap
        with (
            request_deadline(self.config.timeout_s),
            request(model=self.config.model, messages=messages, extra_headers=headers, **kwargs) as response,
        ):
            return read_capped(response.http_response, self.config.max_response_bytes)

    def _ask(self, prompt: str, image: bytes | None) -> Answer:
        client = self._connect()
        kwargs: dict[str, Any] = {"max_tokens": self.config.max_tokens, "temperature": self.config.temperature}
        if self.config.top_p is not None:
            kwargs["top_p"] = self.config.top_p
        messages = self._messages(prompt, image)
        retry = self.config.retry
        attempts = failures = 0
        while True:
            attempts += 1
            self._limiter.acquire()
            try:
                body = self._request(client, messages, kwargs)
            except ResponseTooLarge as exc:  # the model's answer is not what max_tokens allows: not retried
                logger.warning("openai vlm %s: response_too_large (%s)", self.identity.model_id, exc)
                return Answer(None, "response_too_large", _short(str(exc)), attempts, False)
            except Exception as exc:  # classified below; only transient classes are retried
                error, detail, retry_after, transient = self._classify(exc)
                detail = provenance.scrub(detail, [self._secret()]) or ""
                # A Retry-After beyond the cap: waiting less than asked would only be refused again.
                too_long = retry_after is not None and retry_after > retry.max_retry_after_s
                if too_long:
                    detail = f"{detail}; Retry-After {retry_after:g} s > max_retry_after_s {retry.max_retry_after_s:g}"
                if transient and not too_long and retry.may_retry(failures + 1):
                    failures += 1
                    delay = retry.delay(failures, retry_after)
                    logger.warning(
                        "openai vlm %s: %s (%s); retry %d in %.1fs",
                        self.identity.model_id,
                        error,
                        detail,
                        failures,
                        delay,
                    )
                    self._sleep(delay)
                    continue
                logger.warning(
                    "openai vlm %s: %s after %d attempt(s) (%s)", self.identity.model_id, error, attempts, detail
                )
                return Answer(None, error, detail, attempts, False)
            return _completion_answer(body, attempts)


def _completion_answer(body: bytes, attempts: int) -> Answer:
    """An Answer from a chat completion's body: its text, or why there is none. Its shape is checked field by field
    (the SDK's models are not validated): anything but text where text belongs is `malformed_response`, never
    an empty answer."""

    def malformed(what: str) -> Answer:
        return Answer(None, "malformed_response", _short(what), attempts, False)

    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        return Answer(None, "bad_response", _short(f"the body is not JSON: {exc}"), attempts, False)
    if not isinstance(data, dict):
        return malformed(f"not a chat completion: {_json_type(data)}")
    choices = data.get("choices")
    if not isinstance(choices, list):
        return malformed(f"not a chat completion: 'choices' is {_json_type(choices)}, not an array")
    if not choices:
        return Answer(None, "bad_response", "a chat completion without choices", attempts, False)
    choice = choices[0]
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        where = "choices[0]" if not isinstance(choice, dict) else "choices[0].message"
        return malformed(f"{where} is {_json_type(message if isinstance(choice, dict) else choice)}, not an object")
    content, refusal, finish = message.get("content"), message.get("refusal"), choice.get("finish_reason")
    fields = {
        "choices[0].message.content": content,
        "choices[0].message.refusal": refusal,
        "choices[0].finish_reason": finish,
    }
    for name, value in fields.items():
        if value is not None and not isinstance(value, str):
            return malformed(f"{name} is {_json_type(value)}, not text")
    if content and content.strip():
        return Answer(content, None, None, attempts, False)
    if refusal or finish == "content_filter":
        return Answer(None, "refused", _short(refusal or f"finish_reason: {finish}"), attempts, False)
    return Answer(content, "empty", f"no answer text; finish_reason: {finish}", attempts, False)


# -- gemini ----------------------------------------------------------------------------------------------------------
class GeminiVlmConfig(BackendConfig["VisionLanguageModel"]):
    """Gemini through google-genai and the project's Gemini client (`data/gemini.py`), the image as an inline part."""

    backend: Literal["gemini"] = "gemini"
    model: str = Field(default="gemini-2.5-flash", description="The Gemini model.")
    name: str | None = Field(default=None, description="Display name (and model_id source); default the model.")
    api_key_env: str = Field(default="GEMINI_API_KEY", description="Environment variable holding the key.")
    api_key_secret_block: str | None = Field(
        default=None, description="Name of a Prefect Secret block holding the key; wins over the environment."
    )
    base_url: str | None = Field(default=None, description="Override of the API endpoint (tests, proxies).")
    api_version: str = "v1beta"
    max_output_tokens: int = Field(default=120, ge=1, description="Answer length cap (App. C.2: 120).")
    thinking_budget: int | None = Field(
        default=0,
        ge=0,
        description="0 turns thinking off (thinking tokens count against max_output_tokens); None leaves the "
        "model's default.",
    )
    temperature: float = Field(default=0.0, ge=0.0, le=2.0, description="0 = greedy (App. C.2 used 0.3).")
    timeout_s: float = Field(default=120.0, gt=0, description="Per HTTP request.")
    rate_per_s: float | None = Field(default=None, gt=0, description="Requests per second, process-wide; None: no cap.")
    retry: RetryPolicy = Field(
        default_factory=lambda: RetryPolicy(max_attempts=6, base_delay_s=2.0, max_delay_s=60.0),
        description="Transient errors only (429, 5xx, timeouts).",
    )
    prefect_concurrency_limit: str | None = Field(
        default="gemini", description="Prefect global concurrency limit held per request inside a Prefect run."
    )
    cache_dir: str | None = Field(default=None, description="fsspec folder of cached answers; None: no cache.")

    def settings(self) -> GeminiSettings:
        return GeminiSettings(
            model=self.model,
            api_key_env=self.api_key_env,
            api_key_secret_block=self.api_key_secret_block,
            base_url=self.base_url,
            api_version=self.api_version,
            timeout_s=self.timeout_s,
            retry=self.retry,
            temperature=self.temperature,
            requests_per_minute=None if self.rate_per_s is None else self.rate_per_s * 60.0,
            prefect_concurrency_limit=self.prefect_concurrency_limit,
            cache_dir=None,  # the VLM cache below is the one cache
        )

    def build(self) -> GeminiVlm:
        return GeminiVlm(self)


class GeminiVlm(_CachedVlm):
    def __init__(self, config: GeminiVlmConfig, sleep: Callable[[float], None] = time.sleep) -> None:
        self.config = config
        self._types = require("google.genai.types", "gemini")
        settings = config.settings()
        if settings.api_key_secret_block is None:  # no key is a config error: fail now, naming the variables
            try:
                resolve_api_key(settings)
            except GeminiConfigError as exc:
                raise VlmConfigError(f"gemini vlm: {exc}") from None
        self._client = GeminiClient(settings, sleep=sleep)
        name = config.name or config.model
        self.identity = VlmIdentity(
            backend="gemini",
            model_id=slug("gemini", name),
            name=name,
            weights_sha256=None,
            endpoint=public_endpoint(config.base_url or DEFAULT_GEMINI_ENDPOINT),
        )
        self._model = config.model
        self._params = {
            "max_output_tokens": config.max_output_tokens,
            "temperature": config.temperature,
            "thinking_budget": config.thinking_budget,
            "api_version": config.api_version,
        }
        self._cache = AnswerCache(config.cache_dir, self.identity) if config.cache_dir else None

    def _ask(self, prompt: str, image: bytes | None) -> Answer:
        # GeminiClient scrubs its key from the answer and the detail itself.
        contents: list[Any] = [prompt]
        if image is not None:
            contents = [self._types.Part.from_bytes(data=image, mime_type=image_mime(image)), prompt]
        result = self._client.generate_text(
            contents,
            request_key=self.identity.model_id,
            max_output_tokens=self.config.max_output_tokens,
            thinking_budget=self.config.thinking_budget,
        )
        return Answer(result.raw_text, _gemini_error(result), result.detail, result.attempts, False)


def _gemini_error(result: StructuredAnswer) -> str | None:
    """The VLM reason class of a Gemini client outcome (its classes are coarser: "api_error" covers 5xx, timeouts
    and other 4xx, told apart here by the status code or exception name the detail starts with)."""
    if result.error is None:
        return None
    simple = {"rate_limited": "rate_limited", "auth_error": "auth_error", "refused": "refused", "empty_output": "empty"}
    if result.error in simple:
        return simple[result.error]
    detail = result.detail or ""
    code = re.match(r"(\d{3})\b", detail)
    if code:
        return _http_error_class(int(code.group(1)))[0]
    if re.match(r"\w*Timeout", detail):
        return "timeout"
    if re.match(r"\w*Connect", detail):
        return "connection_error"
    if result.error in ("malformed_output", "invalid_output"):
        return "bad_response"
    return "api_error"


# -- transformers ----------------------------------------------------------------------------------------------------
class TransformersVlmConfig(BackendConfig["VisionLanguageModel"]):
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


_pipelines: dict[tuple, Any] = {}
_pipelines_lock = threading.Lock()


class TransformersVlm(_CachedVlm):
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
                return Answer(None, "bad_image", _short(f"{type(exc).__name__}: {exc}"), 0, False)
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
            return Answer(None, error, _short(f"{type(exc).__name__}: {exc}"), 1, False)
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


VlmConfig = Annotated[OpenAIChatConfig | GeminiVlmConfig | TransformersVlmConfig, Field(discriminator="backend")]
