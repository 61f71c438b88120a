"""The `gemini` backend: Gemini through `google-genai`, by the project's one Gemini client (`data/clients/gemini.py`,
`GeminiClient.generate_text`), with the image as an inline part.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, Field

from data.clients.gemini import GeminiClient, GeminiConfigError, GeminiSettings, StructuredAnswer, resolve_api_key
from data.clients.model_ids import slug
from data.clients.retry import RetryPolicy
from data.stage import BackendConfig, require
from evaluation.models.vlm.base import (
    Answer,
    VisionLanguageModel,
    VlmConfigError,
    VlmIdentity,
    http_error_class,
    image_mime,
    public_endpoint,
)
from evaluation.models.vlm.cache import AnswerCache, CachedVlm

DEFAULT_GEMINI_ENDPOINT = "https://generativelanguage.googleapis.com"


class GeminiVlmConfig(BackendConfig[VisionLanguageModel]):
    """Gemini through google-genai and the project's Gemini client (`data/clients/gemini.py`), the image as an inline
    part."""

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


class GeminiVlm(CachedVlm):
    runs_locally = False

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


def _gemini_error(result: StructuredAnswer[BaseModel]) -> str | None:
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
        return http_error_class(int(code.group(1)))[0]
    if re.match(r"\w*Timeout", detail):
        return "timeout"
    if re.match(r"\w*Connect", detail):
        return "connection_error"
    if result.error in ("malformed_output", "invalid_output"):
        return "bad_response"
    return "api_error"
