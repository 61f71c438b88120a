"""Structured requests to any OpenAI-compatible chat-completions endpoint: a local vLLM, llama.cpp or Ollama
server, or a hosted API, through the `openai` package.

It is the Gemini client (`data/clients/gemini.py`) with another transport: the same cache of valid answers, the
same validation and bounded re-asks, the same retry policy for transient errors (429, 5xx, timeouts, a refused
connection) and the same key scrubbing. The answer's JSON schema is sent as `response_format` `json_schema` (vLLM,
llama.cpp's server and Ollama honour it; `structured_output: false` sends the schema in the prompt only, for a
server that does not). The key comes from `api_key_env`; unset, the placeholder `EMPTY` is sent, which local servers
accept.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from data.clients.gemini import ErrorClass, GeminiClient, GeminiSettings, StructuredAnswer, _short, scrub
from data.clients.retry import TRANSIENT_HTTP_CODES, RetryPolicy, parse_retry_after
from data.stage import require

PLACEHOLDER_API_KEY = "EMPTY"  # what vLLM, llama.cpp and Ollama accept when they run without a key


class OpenAICompatibleSettings(BaseModel):
    """How to reach an OpenAI-compatible endpoint. Holds no secret: only where the key is found."""

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(description="The API base URL, e.g. http://127.0.0.1:8000/v1 for a local vLLM server.")
    model: str = Field(min_length=1, description="The model name the endpoint serves.")
    api_key_env: str = Field(
        default="OPENAI_API_KEY",
        description=f"Environment variable holding the key; unset, {PLACEHOLDER_API_KEY!r} is sent (local servers).",
    )
    structured_output: bool = Field(
        default=True, description="Send the answer's JSON schema as response_format (false: in the prompt only)."
    )
    max_tokens: int = Field(default=4096, ge=16, le=131072, description="Cap on one answer's length.")
    timeout_s: float = Field(default=120.0, gt=0, description="Per HTTP request.")
    retry: RetryPolicy = Field(
        default_factory=lambda: RetryPolicy(max_attempts=3, base_delay_s=1.0, max_delay_s=10.0),
        description="Transient errors only (429, 5xx, timeouts, a refused connection).",
    )
    max_invalid_answers: int = Field(
        default=3, ge=1, description="Malformed or rule-breaking answers tolerated before the request is reported."
    )
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    requests_per_minute: float | None = Field(default=None, gt=0, description="Process-wide request budget.")
    prefect_concurrency_limit: str | None = Field(
        default=None, description="Prefect global concurrency limit held per request inside a Prefect run."
    )
    cache_dir: str | None = Field(
        default=None, description="fsspec folder of cached answers; the build passes a workspace folder when None."
    )

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url {value!r} is not an http(s) URL")
        return value.rstrip("/")

    @property
    def endpoint(self) -> str:
        """The endpoint as a log line or an error may name it: scheme, host, port and path, no credentials."""
        parts = urlsplit(self.base_url)
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{parts.hostname}{port}{parts.path}"


class OpenAICompatibleClient(GeminiClient):
    """`GeminiClient`'s requests (cache, validation, re-asks, retries) over an OpenAI-compatible endpoint."""

    label = "openai-compatible"

    def __init__(
        self,
        settings: OpenAICompatibleSettings,
        cache_dir: str | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        import time

        super().__init__(settings, cache_dir, sleep or time.sleep)  # type: ignore[arg-type]  # the fields it reads
        self.settings: OpenAICompatibleSettings = settings  # type: ignore[assignment]
        self._transient = ()

    def __repr__(self) -> str:
        return f"OpenAICompatibleClient(endpoint={self.settings.endpoint!r}, model={self.settings.model!r})"

    def _connect(self) -> Any:
        with self._lock:
            if self._client is None:
                openai = require("openai", "evaluate")
                self._errors = openai
                key = os.environ.get(self.settings.api_key_env, "").strip()
                self._secret = key or None
                self._client = openai.OpenAI(
                    api_key=key or PLACEHOLDER_API_KEY,
                    base_url=self.settings.base_url,
                    max_retries=0,  # our RetryPolicy is the only retry layer
                    timeout=self.settings.timeout_s,
                )
            return self._client

    def _structured_config(self, schema: type[BaseModel]) -> Any:
        kwargs: dict[str, Any] = {"temperature": self.settings.temperature, "max_tokens": self.settings.max_tokens}
        if self.settings.structured_output:
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": schema.__name__, "schema": schema.model_json_schema()},
            }
        return {"kwargs": kwargs, "schema": schema.model_json_schema()}

    def _call(self, client: Any, contents: list[Any], config: Any) -> Any:
        if not all(isinstance(part, str) for part in contents):
            raise TypeError("an OpenAI-compatible request here takes text parts only")
        schema = json.dumps(config["schema"], ensure_ascii=False)
        text = "\n\n".join([*contents, f"The answer is one JSON object following this JSON schema: {schema}"])
        return client.chat.completions.create(
            model=self.settings.model, messages=[{"role": "user", "content": text}], **config["kwargs"]
        )

    def _text(self, response: Any) -> str | None:
        choices = getattr(response, "choices", None)
        if not isinstance(choices, list) or not choices:
            return None
        content = getattr(getattr(choices[0], "message", None), "content", None)
        return content if isinstance(content, str) else None

    def _no_text(self, response: Any) -> str:
        choices = getattr(response, "choices", None)
        if not isinstance(choices, list) or not choices:
            return "no choices"
        return f"finish_reason: {getattr(choices[0], 'finish_reason', None)}"

    def _classify(self, exc: Exception) -> tuple[ErrorClass, str, float | None, bool]:
        errors = self._errors
        detail = scrub(_short(f"{type(exc).__name__}: {exc}"), self._secret)
        if isinstance(exc, errors.APIStatusError):
            code = int(exc.status_code)
            headers = getattr(exc.response, "headers", None) or {}
            retry_after = parse_retry_after(headers.get("retry-after"))
            if code == 429:
                return "rate_limited", detail, retry_after, True
            if code in TRANSIENT_HTTP_CODES or code >= 500:
                return "api_error", detail, retry_after, True
            if code in (401, 403):
                return "auth_error", detail, None, False
            return "api_error", detail, None, False
        if exc.__cause__ is not None and str(exc.__cause__) not in detail:  # "Connection error." says less
            detail = scrub(_short(f"{detail} ({exc.__cause__})"), self._secret)
        if isinstance(exc, errors.APITimeoutError | errors.APIConnectionError):
            return "api_error", detail, None, True
        return "api_error", detail, None, False

    def generate_text(
        self,
        contents: list[Any],
        request_key: str = "",
        max_output_tokens: int | None = None,
        thinking_budget: int | None = None,
    ) -> StructuredAnswer[BaseModel]:
        raise NotImplementedError("the OpenAI-compatible drafting client asks for structured answers only")


#: The settings of a model that drafts structured answers (translations, descriptors, concepts).
LanguageModelSettings = GeminiSettings | OpenAICompatibleSettings


def structured_client(settings: LanguageModelSettings, cache_dir: str | None = None) -> GeminiClient:
    """The client for `settings`: Gemini's API, or an OpenAI-compatible endpoint."""
    if isinstance(settings, OpenAICompatibleSettings):
        return OpenAICompatibleClient(settings, cache_dir)
    return GeminiClient(settings, cache_dir)
