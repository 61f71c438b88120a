"""The `openai` backend: any OpenAI-compatible chat-completions endpoint (vLLM, SGLang, hosted APIs) through the
`openai` client; the image goes as a base64 `data:` URL content part.

`timeout_s` is a deadline for the whole HTTP request (connect, sending, headers and body together), not for each
read (`http_limits`): a server that trickles its answer a byte at a time is cut off there (`timeout`). The body is
read as a stream and its decoded size capped (`max_response_bytes`): a bigger answer is a `response_too_large`
failure, never read whole. A body that is JSON but not a chat completion's shape (`choices` not a list, a message
whose content is not text) is a `malformed_response` failure.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any, Literal, NotRequired, TypedDict
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from data import provenance
from data.clients.model_ids import slug
from data.clients.retry import (
    GaveUp,
    RetryCount,
    RetryPolicy,
    RetryVerdict,
    call_with_retries,
    parse_retry_after,
    shared_limiter,
)
from data.stage import BackendConfig, require
from evaluation.models.vlm.base import (
    Answer,
    VisionLanguageModel,
    VlmIdentity,
    http_error_class,
    image_mime,
    public_endpoint,
    short,
)
from evaluation.models.vlm.cache import AnswerCache, CachedVlm
from evaluation.models.vlm.http_limits import ResponseTooLarge, bound_by_deadlines, read_capped, request_deadline

logger = logging.getLogger(__name__)


class _ImageUrl(TypedDict):
    url: str  # a data: URL of the image bytes


class _ImageUrlPart(TypedDict):
    type: Literal["image_url"]
    image_url: _ImageUrl


class _TextPart(TypedDict):
    type: Literal["text"]
    text: str


class _Message(TypedDict):
    """A chat completions message: the prompt alone, or the image and the prompt."""

    role: str
    content: str | list[_ImageUrlPart | _TextPart]


class _Sampling(TypedDict):
    """The request's generation settings (`OpenAiVlmConfig`)."""

    max_tokens: int
    temperature: float
    top_p: NotRequired[float]


PLACEHOLDER_API_KEY = "EMPTY"  # what vLLM/SGLang accept when they run without a key


class OpenAIChatConfig(BackendConfig[VisionLanguageModel]):
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


class OpenAIChatVlm(CachedVlm):
    runs_locally = False

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

    def _messages(self, prompt: str, image: bytes | None) -> list[_Message]:
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
        detail = short(f"{type(exc).__name__}: {exc}")
        if isinstance(exc, errors.APIStatusError):
            error, transient = http_error_class(int(exc.status_code))
            headers = getattr(exc.response, "headers", None) or {}
            retry_after = parse_retry_after(headers.get("retry-after"))
            if retry_after is None and headers.get("retry-after-ms", "").strip().isdigit():
                retry_after = int(headers["retry-after-ms"]) / 1000.0
            return error, detail, retry_after, transient
        if exc.__cause__ is not None and str(exc.__cause__) not in detail:  # the SDK's "Request timed out." says less
            detail = short(f"{detail} ({exc.__cause__})")
        # The body is read after the SDK returns: its errors are the HTTP client's own (httpx or httpx2).
        bases = {cls.__name__ for cls in type(exc).__mro__}
        if isinstance(exc, errors.APITimeoutError | TimeoutError) or "TimeoutException" in bases:
            return "timeout", detail, None, True
        if isinstance(exc, errors.APIConnectionError) or "TransportError" in bases:
            return "connection_error", detail, None, True
        if isinstance(exc, errors.APIResponseValidationError | ValueError | zlib.error) or "DecodingError" in bases:
            return "bad_response", detail, None, False
        return "api_error", detail, None, False

    def _request(self, client: Any, messages: list[_Message], kwargs: _Sampling) -> bytes:
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
        kwargs: _Sampling = {"max_tokens": self.config.max_tokens, "temperature": self.config.temperature}
        if self.config.top_p is not None:
            kwargs["top_p"] = self.config.top_p
        messages = self._messages(prompt, image)
        retry = self.config.retry
        count = RetryCount()

        def attempt() -> bytes:
            self._limiter.acquire()
            return self._request(client, messages, kwargs)

        def classify(exc: Exception) -> RetryVerdict | None:
            if isinstance(exc, ResponseTooLarge):  # the model's answer is not what max_tokens allows: not retried
                return RetryVerdict(False)
            _, _, retry_after, transient = self._classify(exc)
            return RetryVerdict(transient, retry_after)

        def log_retry(exc: Exception, number: int, delay: float) -> None:
            error, detail, _, _ = self._classify(exc)
            detail = provenance.scrub(detail, [self._secret()]) or ""
            logger.warning(
                "openai vlm %s: %s (%s); retry %d in %.1fs", self.identity.model_id, error, detail, number, delay
            )

        try:
            body = call_with_retries(attempt, classify, retry, sleep=self._sleep, count=count, on_retry=log_retry)
        except GaveUp as gave_up:
            exc = gave_up.cause
            if isinstance(exc, ResponseTooLarge):
                logger.warning("openai vlm %s: response_too_large (%s)", self.identity.model_id, exc)
                return Answer(None, "response_too_large", short(str(exc)), gave_up.attempts, False)
            error, detail, retry_after, _ = self._classify(exc)
            detail = provenance.scrub(detail, [self._secret()]) or ""
            # A Retry-After beyond the cap: waiting less than asked would only be refused again.
            if gave_up.too_long:
                detail = f"{detail}; Retry-After {retry_after:g} s > max_retry_after_s {retry.max_retry_after_s:g}"
            logger.warning(
                "openai vlm %s: %s after %d attempt(s) (%s)", self.identity.model_id, error, gave_up.attempts, detail
            )
            return Answer(None, error, detail, gave_up.attempts, False)
        return _completion_answer(body, count.attempts)


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number" if isinstance(value, int | float) else type(value).__name__)


def _completion_answer(body: bytes, attempts: int) -> Answer:
    """An Answer from a chat completion's body: its text, or why there is none. Its shape is checked field by field
    (the SDK's models are not validated): anything but text where text belongs is `malformed_response`, never
    an empty answer."""

    def malformed(what: str) -> Answer:
        return Answer(None, "malformed_response", short(what), attempts, False)

    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        return Answer(None, "bad_response", short(f"the body is not JSON: {exc}"), attempts, False)
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
        return Answer(None, "refused", short(refusal or f"finish_reason: {finish}"), attempts, False)
    return Answer(content, "empty", f"no answer text; finish_reason: {finish}", attempts, False)
