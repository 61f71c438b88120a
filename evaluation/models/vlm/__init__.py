"""Vision-language models asked MixCuBe's questions (MixCuBe paper §3, App. B.2, B.3, C): one protocol, three
backends, one file each, and one discriminated union of their configs (`VlmConfig`).

- `openai` (`openai.py`): any OpenAI-compatible chat-completions endpoint (vLLM, SGLang, hosted APIs) through the
  `openai` client; the image goes as a base64 `data:` URL content part.
- `gemini` (`gemini.py`): Gemini through `google-genai`, by the project's one Gemini client (`data/clients/gemini.py`,
  `GeminiClient.generate_text`), with the image as an inline part.
- `transformers` (`transformers.py`): a local (or hub) model through `transformers.pipeline("image-text-to-text")`,
  greedy decoding.

The protocol, the identity, `Answer` and the shared helpers are `base.py`; the answer cache and the backends'
common base class (`CachedVlm`) are `cache.py`; the whole-request deadline and capped body of the HTTP requests
are `http_limits.py`. Callers never test a backend's name: a built model declares `runs_locally` (it runs in this
process and holds the `gpu` slot) instead.

Rules shared by the three:

- `ask(prompt, image)` never raises for one question's failure: it returns an `Answer` whose `error` names a short
  reason class (`ERROR_CLASSES`). Only a config error raises (a missing extra, a model folder that does not exist,
  `device="cuda"` without a GPU, no Gemini key), and `build()` checks those before any image is processed.
- Transient errors (429, 5xx, timeouts, dropped connections) are retried by the shared `RetryPolicy` of
  `data/clients/retry.py`, honouring Retry-After up to its `max_retry_after_s`; a longer Retry-After fails the question
  at once as `rate_limited` (waiting less than asked would only be refused again), as the downloader does. The SDKs'
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

from typing import Annotated

from pydantic import Field

from data.clients.model_ids import folder_sha256
from evaluation.models.vlm.base import (
    ERROR_CLASSES,
    MODEL_OUTCOMES,
    Answer,
    AnswersInBatches,
    Question,
    VisionLanguageModel,
    VlmConfigError,
    VlmIdentity,
    image_mime,
    public_endpoint,
)
from evaluation.models.vlm.cache import AnswerCache, answer_key
from evaluation.models.vlm.gemini import DEFAULT_GEMINI_ENDPOINT, GeminiVlm, GeminiVlmConfig
from evaluation.models.vlm.openai import PLACEHOLDER_API_KEY, OpenAIChatConfig, OpenAIChatVlm
from evaluation.models.vlm.transformers import TransformersVlm, TransformersVlmConfig, resolve_model_folder

VlmConfig = Annotated[OpenAIChatConfig | GeminiVlmConfig | TransformersVlmConfig, Field(discriminator="backend")]

__all__ = [
    "DEFAULT_GEMINI_ENDPOINT",
    "ERROR_CLASSES",
    "MODEL_OUTCOMES",
    "PLACEHOLDER_API_KEY",
    "Answer",
    "AnswerCache",
    "AnswersInBatches",
    "GeminiVlm",
    "GeminiVlmConfig",
    "OpenAIChatConfig",
    "OpenAIChatVlm",
    "Question",
    "TransformersVlm",
    "TransformersVlmConfig",
    "VisionLanguageModel",
    "VlmConfig",
    "VlmConfigError",
    "VlmIdentity",
    "answer_key",
    "folder_sha256",
    "image_mime",
    "public_endpoint",
    "resolve_model_folder",
]
