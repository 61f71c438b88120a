"""The one Gemini client every Gemini backend uses: concept generation (3XCM paper App. H), translation (App. R
constraints), image tagging (App. I) and, as free text, the MixCuBe VLM questions (`generate_text`).

It asks for JSON that follows a pydantic schema, checks the answer with pydantic plus the caller's own rules, and
re-asks a bounded number of times when the answer is malformed or breaks a rule. Transient API errors (429, 5xx,
timeouts) are retried by the shared policy of `data/clients/retry.py`, honouring Retry-After; google-genai's own
retries are switched off so there is one policy. Valid answers are cached by a hash of the prompt, so a rerun does
not call the API again; failures are never cached.

The API key is resolved at the first real request, from a Prefect Secret block or an environment variable. The
settings hold only the block or variable NAME, and the key is scrubbed from every error text this module keeps.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, Literal, TypeVar, overload

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from data import provenance
from data.clients.concurrency import prefect_slot
from data.clients.retry import (
    TRANSIENT_HTTP_CODES,
    GaveUp,
    RetryCount,
    RetryPolicy,
    RetryVerdict,
    call_with_retries,
    parse_retry_after,
    shared_limiter,
)
from data.clients.secrets import resolve_secret
from data.schemas import LLM_FAILURES, LlmFailureRow, empty, from_rows
from data.stage import require
from data.workspace import Storage

logger = logging.getLogger(__name__)

FALLBACK_API_KEY_ENV = "GOOGLE_API_KEY"  # google-genai's own name for the key

ErrorClass = Literal[
    "malformed_output", "invalid_output", "rate_limited", "api_error", "auth_error", "empty_output", "refused"
]


class GeminiSettings(BaseModel):
    """How to reach Gemini. Holds no secret: only where the key is found."""

    model_config = ConfigDict(extra="forbid")

    # 3XCM paper §3.2.1 footnote 2: gemini-2.5-flash generated the concepts.
    model: str = "gemini-2.5-flash"
    api_key_env: str = Field(
        default="GEMINI_API_KEY",
        description=f"Environment variable holding the key; {FALLBACK_API_KEY_ENV} is tried next.",
    )
    api_key_secret_block: str | None = Field(
        default=None, description="Name of a Prefect Secret block holding the key; wins over the environment."
    )
    base_url: str | None = Field(default=None, description="Override of the API endpoint (tests, proxies).")
    api_version: str = "v1beta"
    timeout_s: float = Field(default=120.0, gt=0, description="Per HTTP request.")
    retry: RetryPolicy = Field(
        default_factory=lambda: RetryPolicy(max_attempts=6, base_delay_s=2.0, max_delay_s=60.0),
        description="Transient errors only (429, 5xx, timeouts).",
    )
    max_invalid_answers: int = Field(
        default=3, ge=1, description="Malformed or rule-breaking answers tolerated before the request is reported."
    )
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    requests_per_minute: float | None = Field(
        default=None, gt=0, description="Process-wide request budget for this model; None means unlimited."
    )
    prefect_concurrency_limit: str | None = Field(
        default="gemini", description="Prefect global concurrency limit held per request inside a Prefect run."
    )
    cache_dir: str | None = Field(
        default=None, description="fsspec folder of cached answers; the build passes a workspace folder when None."
    )


class GeminiConfigError(RuntimeError):
    """The client cannot run at all (no key, missing extra); raised, since every request would fail alike."""


Answer = TypeVar("Answer", bound=BaseModel)
Answer_co = TypeVar("Answer_co", bound=BaseModel, covariant=True)


@dataclass(frozen=True)
class StructuredAnswer(Generic[Answer_co]):
    """The outcome of one logical request: a validated value, or an error class with the last raw text kept."""

    value: Answer_co | None  # set exactly when `ok`, for a structured request (always None for text)
    raw_text: str | None
    attempts: int  # HTTP calls made for this answer (0 on a cache hit)
    error: ErrorClass | None
    detail: str | None
    prompt_sha256: str
    cached: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None


class InvalidAnswer(ValueError):
    def __init__(self, error: ErrorClass, detail: str) -> None:
        super().__init__(detail)
        self.error = error
        self.detail = detail


def resolve_api_key(settings: GeminiSettings) -> str:
    """The key from the Secret block, else the configured variable, else GOOGLE_API_KEY."""
    return resolve_secret(
        settings.api_key_secret_block, [settings.api_key_env, FALLBACK_API_KEY_ENV], "Gemini API key", GeminiConfigError
    )


@overload
def scrub(text: str, secret: str | None) -> str: ...
@overload
def scrub(text: None, secret: str | None) -> None: ...
@overload
def scrub(text: str | None, secret: str | None) -> str | None: ...
def scrub(text: str | None, secret: str | None) -> str | None:
    """Remove the key from a text that may echo the request (error bodies, exception messages)."""
    return provenance.scrub(text, [secret])


def _digestable(value: Any) -> Any:
    """A JSON-able stand-in for prompt contents: bytes and images by their sha256, so the hash stays small."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return {"sha256": hashlib.sha256(bytes(value)).hexdigest()}
    if isinstance(value, dict):
        return {str(k): _digestable(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple):
        return [_digestable(v) for v in value]
    if isinstance(value, BaseModel):  # google.genai.types.Part / Content / Blob
        return {type(value).__name__: _digestable(value.model_dump(exclude_none=True))}
    from PIL import Image

    if isinstance(value, Image.Image):
        return {"image_sha256": hashlib.sha256(value.tobytes()).hexdigest(), "mode": value.mode, "size": value.size}
    raise TypeError(f"cannot hash prompt contents of type {type(value).__name__}")


def prompt_sha256(
    settings: GeminiSettings,
    contents: list[Any],
    schema: type[BaseModel] | None,
    generation: Mapping[str, int | None] | None = None,
) -> str:
    """What decides an answer: model, contents, output schema (None: free text), temperature and any further
    generation settings (left out of the hash when there are none, so earlier cache entries keep their keys)."""
    payload: dict[str, object] = {  # hashed as JSON, sorted
        "model": settings.model,
        "contents": _digestable(list(contents)),
        "schema": None if schema is None else schema.model_json_schema(),
        "temperature": settings.temperature,
    }
    if generation:
        payload["generation"] = generation
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _retry_after(exc: Any) -> float | None:
    """Retry-After header, else the RetryInfo delay Google puts in a 429 body ("retryDelay": "12s")."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is not None:
        seconds = parse_retry_after(headers.get("retry-after"))
        if seconds is not None:
            return seconds
    details = getattr(exc, "details", None)
    error = details.get("error", details) if isinstance(details, dict) else None
    for item in (error or {}).get("details", []) if isinstance(error, dict) else []:
        delay = item.get("retryDelay") if isinstance(item, dict) else None
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)s\s*", delay or "")
        if match:
            return float(match.group(1))
    return None


def _transient_exceptions() -> tuple[type[BaseException], ...]:
    classes: list[type[BaseException]] = []
    for module_name in ("httpx", "httpx2"):
        try:
            module = __import__(module_name)
        except ImportError:
            continue
        classes += [getattr(module, n) for n in ("TimeoutException", "ConnectError") if hasattr(module, n)]
    return tuple(classes)


class GeminiClient:
    """Structured (JSON schema) requests to Gemini with validation, re-asks, retries, rate limits and a cache."""

    label = "gemini"  # in log lines

    def __init__(
        self,
        settings: GeminiSettings,
        cache_dir: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings
        cache = settings.cache_dir or cache_dir
        self._cache = Storage(cache) if cache else None
        self._sleep = sleep
        self._genai: Any = None
        self._types: Any = None
        self._errors: Any = None
        self._client: Any = None
        self._secret: str | None = None
        self._lock = threading.Lock()
        self._limiter = shared_limiter(
            f"gemini:{settings.model}",
            None if settings.requests_per_minute is None else settings.requests_per_minute / 60.0,
        )
        self._transient = _transient_exceptions()

    def __repr__(self) -> str:  # the genai client inside holds the key; never show it
        return f"GeminiClient(model={self.settings.model!r}, cache={bool(self._cache)})"

    # -- the genai client, built at the first real request -------------------------------------------------------
    def _connect(self) -> Any:
        with self._lock:
            if self._client is None:
                genai = require("google.genai", "gemini")
                self._types = require("google.genai.types", "gemini")
                self._errors = require("google.genai.errors", "gemini")
                self._secret = resolve_api_key(self.settings)
                options = self._types.HttpOptions(
                    base_url=self.settings.base_url,
                    api_version=self.settings.api_version,
                    timeout=max(1, round(self.settings.timeout_s * 1000)),  # google-genai wants milliseconds
                    retry_options=None,  # None = one attempt: our RetryPolicy is the only retry layer
                )
                self._client = genai.Client(api_key=self._secret, http_options=options)
            return self._client

    # -- cache ---------------------------------------------------------------------------------------------------
    def _cache_entry(self, sha: str) -> tuple[Storage, str] | None:
        """The cache and the path of the answer to `sha` in it; None without a cache."""
        return (self._cache, self._cache.path(f"{sha}.json")) if self._cache else None

    def _cached(
        self, sha: str, schema: type[Answer], validate: Callable[[Answer], None] | None
    ) -> StructuredAnswer[Answer] | None:
        entry = self._cache_entry(sha)
        if entry is None or not entry[0].exists(entry[1]):
            return None
        cache, path = entry
        try:
            raw = cache.read_json(path)["raw_text"]
            value = self._check(raw, schema, validate)
        except (InvalidAnswer, KeyError, TypeError, ValueError) as exc:
            # A cache entry the current rules reject (the validator changed) is asked again, not trusted.
            logger.info("gemini cache entry %s ignored: %s", sha[:12], type(exc).__name__)
            return None
        return StructuredAnswer(value, raw, 0, None, None, sha, cached=True)

    def _store(self, sha: str, request_key: str, raw: str) -> None:
        entry = self._cache_entry(sha)
        if entry is not None:
            cache, path = entry
            cache.write_json(
                path,
                {
                    "model": self.settings.model,
                    "prompt_sha256": sha,
                    "request_key": request_key,
                    "raw_text": scrub(raw, self._secret),
                    "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
                },
            )

    # -- validation ----------------------------------------------------------------------------------------------
    @staticmethod
    def _check(raw: str | None, schema: type[Answer], validate: Callable[[Answer], None] | None) -> Answer:
        if raw is None or not raw.strip():
            raise InvalidAnswer("malformed_output", "empty answer")
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise InvalidAnswer("malformed_output", f"not JSON: {exc}") from None
        try:
            value = schema.model_validate(data)
        except ValidationError as exc:
            raise InvalidAnswer("invalid_output", _short(str(exc))) from None
        if validate is not None:
            try:
                validate(value)
            except ValueError as exc:
                raise InvalidAnswer("invalid_output", _short(str(exc))) from None
        return value

    # -- the request ---------------------------------------------------------------------------------------------
    def generate_structured(
        self,
        contents: list[Any],
        schema: type[Answer],
        validate: Callable[[Answer], None] | None = None,
        request_key: str = "",
    ) -> StructuredAnswer[Answer]:
        """Ask for JSON following `schema`; `validate` raises ValueError for answers that break the caller's rules.

        Never raises for a bad answer or an API failure: those come back as `StructuredAnswer.error`. Raises
        `GeminiConfigError` when no request can be made at all (no key, google-genai missing).
        """
        sha = prompt_sha256(self.settings, contents, schema)
        hit = self._cached(sha, schema, validate)
        if hit is not None:
            return hit

        client = self._connect()
        config = self._structured_config(schema)
        counts = RetryCount()
        invalid_answers = 0
        raw: str | None = None
        feedback: list[str] = []
        while True:
            response, failure = self._send(client, [*contents, *feedback], config, request_key, counts)
            attempts = counts.attempts
            if failure is not None:
                return StructuredAnswer(None, scrub(raw, self._secret), attempts, *failure, sha)

            raw = self._text(response)
            try:
                value = self._check(raw, schema, validate)
            except InvalidAnswer as bad:
                invalid_answers += 1
                detail = bad.detail if raw is not None else f"{bad.detail}; {self._no_text(response)}"
                detail = scrub(detail, self._secret)
                if invalid_answers >= self.settings.max_invalid_answers:
                    logger.warning(
                        "%s %s: %d unusable answers, giving up: %s", self.label, request_key, invalid_answers, detail
                    )
                    return StructuredAnswer(None, scrub(raw, self._secret), attempts, bad.error, detail, sha)
                logger.info("%s %s: unusable answer (%s), asking again", self.label, request_key, bad.error)
                # Re-asking the same prompt at temperature 0 tends to repeat the mistake: say what was wrong.
                feedback = [
                    f"Your previous answer was not usable ({bad.error}: {_short(detail, 600)}). "
                    "Answer the request above again, returning only JSON that follows the response schema."
                ]
                continue
            assert raw is not None  # _check refuses a missing answer
            self._store(sha, request_key, raw)
            return StructuredAnswer(value, raw, attempts, None, None, sha)

    def generate_text(
        self,
        contents: list[Any],
        request_key: str = "",
        max_output_tokens: int | None = None,
        thinking_budget: int | None = None,
    ) -> StructuredAnswer[BaseModel]:
        """Ask for free text (no JSON schema), e.g. a question about an image part; the answer is `raw_text`, kept
        verbatim, and `value` is None.

        Same cache, rate limit, transient retries and key scrubbing as `generate_structured`. An answer with no
        text is returned at once, never re-asked (at temperature 0 it would come back the same): "refused" when
        Gemini blocked the prompt or stopped for safety, else "empty_output", with the reason in `detail`.
        `thinking_budget=0` turns thinking off on the models that allow it, so `max_output_tokens` is all answer.
        """
        generation = {"max_output_tokens": max_output_tokens, "thinking_budget": thinking_budget}
        generation = {key: value for key, value in generation.items() if value is not None}
        sha = prompt_sha256(self.settings, contents, None, generation)
        entry = self._cache_entry(sha)
        if entry is not None and entry[0].exists(entry[1]):
            cache, path = entry
            try:
                raw = cache.read_json(path)["raw_text"]
            except (KeyError, TypeError, ValueError) as exc:
                logger.info("gemini cache entry %s ignored: %s", sha[:12], type(exc).__name__)
            else:
                if isinstance(raw, str) and raw.strip():
                    return StructuredAnswer(None, raw, 0, None, None, sha, cached=True)

        client = self._connect()
        thinking = None if thinking_budget is None else self._types.ThinkingConfig(thinking_budget=thinking_budget)
        config = self._types.GenerateContentConfig(
            temperature=self.settings.temperature, max_output_tokens=max_output_tokens, thinking_config=thinking
        )
        counts = RetryCount()
        response, failure = self._send(client, list(contents), config, request_key, counts)
        if failure is not None:
            return StructuredAnswer(None, None, counts.attempts, *failure, sha)
        raw = _response_text(response)
        if raw is None or not raw.strip():
            error: ErrorClass = "refused" if _blocked(response) else "empty_output"
            detail = scrub(f"no answer text; {_no_text_reason(response)}", self._secret)
            logger.warning("gemini %s: %s (%s)", request_key, error, detail)
            return StructuredAnswer(None, scrub(raw, self._secret), counts.attempts, error, detail, sha)
        raw = scrub(raw, self._secret)
        self._store(sha, request_key, raw)
        return StructuredAnswer(None, raw, counts.attempts, None, None, sha)

    def _send(
        self, client: Any, contents: list[Any], config: Any, request_key: str, counts: RetryCount
    ) -> tuple[Any, tuple[ErrorClass, str] | None]:
        """One request, sent again while its error is transient and the retry policy allows; `counts` keeps the
        HTTP calls and transient failures across the calls of one logical request. Returns (response, None) or
        (None, (error class, scrubbed detail))."""

        def attempt() -> Any:
            self._limiter.acquire()
            with prefect_slot(self.settings.prefect_concurrency_limit):
                return self._call(client, contents, config)

        def classify(exc: Exception) -> RetryVerdict:
            _, _, retry_after, transient = self._classify(exc)
            return RetryVerdict(transient, retry_after)

        def log_retry(exc: Exception, number: int, delay: float) -> None:
            error, detail, _, _ = self._classify(exc)
            logger.warning("%s %s: %s (%s); retry %d in %.1fs", self.label, request_key, error, detail, number, delay)

        try:
            # A Retry-After beyond the policy's cap is waited for at the cap (RetryPolicy.delay), not given up on.
            response = call_with_retries(
                attempt,
                classify,
                self.settings.retry,
                sleep=self._sleep,
                count=counts,
                too_long_fails=False,
                on_retry=log_retry,
            )
        except GaveUp as gave_up:
            error, detail, _, _ = self._classify(gave_up.cause)
            logger.warning(
                "%s %s failed after %d attempt(s): %s (%s)", self.label, request_key, counts.attempts, error, detail
            )
            return None, (error, detail)
        return response, None

    # -- the transport: what another API's client (data/clients/openai_compatible.py) replaces ---------------------
    def _structured_config(self, schema: type[BaseModel]) -> Any:
        return self._types.GenerateContentConfig(
            response_mime_type="application/json", response_schema=schema, temperature=self.settings.temperature
        )

    def _call(self, client: Any, contents: list[Any], config: Any) -> Any:
        return client.models.generate_content(model=self.settings.model, contents=contents, config=config)

    def _text(self, response: Any) -> str | None:
        return _response_text(response)

    def _no_text(self, response: Any) -> str:
        return _no_text_reason(response)

    def _classify(self, exc: Exception) -> tuple[ErrorClass, str, float | None, bool]:
        """(error class, scrubbed detail, Retry-After seconds, transient?) for an exception from the request."""
        if isinstance(exc, self._errors.APIError):
            code = int(exc.code or 0)
            detail = scrub(_short(f"{code} {exc.status or ''}: {exc.message or exc.details}"), self._secret)
            if code == 429:
                return "rate_limited", detail, _retry_after(exc), True
            if code in TRANSIENT_HTTP_CODES or code >= 500:
                return "api_error", detail, _retry_after(exc), True
            if code in (401, 403) or "api key" in (exc.message or "").lower():
                return "auth_error", detail, None, False
            return "api_error", detail, None, False
        detail = scrub(_short(f"{type(exc).__name__}: {exc}"), self._secret)
        if isinstance(exc, self._transient):
            return "api_error", detail, None, True
        return "api_error", detail, None, False


_BLOCK_FINISH_REASONS = frozenset({"SAFETY", "PROHIBITED_CONTENT", "BLOCKLIST", "SPII", "RECITATION", "IMAGE_SAFETY"})


def _blocked(response: Any) -> bool:
    """Whether Gemini refused: the prompt was blocked, or the answer stopped for a safety-like reason."""
    feedback = getattr(response, "prompt_feedback", None)
    if feedback is not None and getattr(feedback, "block_reason", None):
        return True
    candidates = getattr(response, "candidates", None) or []
    reason = getattr(candidates[0], "finish_reason", None) if candidates else None
    return str(getattr(reason, "value", reason) or "").upper() in _BLOCK_FINISH_REASONS


def _response_text(response: Any) -> str | None:
    try:
        text: str | None = response.text
        return text
    except (ValueError, AttributeError):  # no candidates, or parts that are not text
        return None


def _no_text_reason(response: Any) -> str:
    feedback = getattr(response, "prompt_feedback", None)
    if feedback is not None and getattr(feedback, "block_reason", None):
        return f"blocked: {feedback.block_reason}"
    candidates = getattr(response, "candidates", None) or []
    if candidates and getattr(candidates[0], "finish_reason", None):
        return f"finish_reason: {candidates[0].finish_reason}"
    return "no candidates"


def _short(text: str, limit: int = 1000) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- failure rows ------------------------------------------------------------------------------------------------
def failure_row(stage: str, request_key: str, model: str, answer: StructuredAnswer[BaseModel]) -> LlmFailureRow:
    """An LLM_FAILURES row for an answer that never validated; the raw text is kept for inspection."""
    if answer.error is None:  # (`ok`)
        raise ValueError("failure_row needs a failed answer")
    return {
        "stage": stage,
        "request_key": request_key,
        "model": model,
        "prompt_sha256": answer.prompt_sha256,
        "attempts": answer.attempts,
        "error": answer.error,
        "detail": answer.detail,
        "raw_text": answer.raw_text,
    }


def failures_table(rows: Sequence[LlmFailureRow]) -> pa.Table:
    return from_rows(rows, LLM_FAILURES) if rows else empty(LLM_FAILURES)
