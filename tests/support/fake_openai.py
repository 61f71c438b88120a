"""A fake OpenAI-compatible chat-completions API on 127.0.0.1 for tests: the real `openai` client talks to it
through `base_url` (OpenAIChatConfig.base_url), as it would to vLLM, SGLang or a hosted API.

It serves `POST {prefix}/chat/completions` (any prefix, normally `/v1`), records every request (path, headers,
body, arrival time), and answers from a scriptable queue of replies; when the queue is empty it answers with the
fallback responder (by default a fixed sentence). Images sent as `data:` URLs can be read back decoded.

    with FakeOpenAI() as fake:
        fake.enqueue(error_reply(429, retry_after="1"), text_reply("Korean food: kimchi"))
        config = OpenAIChatConfig(base_url=fake.base_url, model="fake-vlm", ...)
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from tests.support.fake_json_api import JsonRequest, Reply, ScriptedJsonServer

DEFAULT_ANSWER = "I am not sure which country this is from."


class RecordedRequest(JsonRequest):
    @property
    def model(self) -> str | None:
        return self.body.get("model")

    @property
    def api_key(self) -> str | None:
        """The bearer token of the Authorization header."""
        value = next((v for k, v in self.headers.items() if k.lower() == "authorization"), None)
        return value.split(" ", 1)[1] if value and " " in value else value

    def _parts(self) -> list[dict[str, Any]]:
        parts: list[dict[str, Any]] = []
        for message in self.body.get("messages", []):
            content = message.get("content")
            if isinstance(content, str):
                parts.append({"type": "text", "text": content})
            elif isinstance(content, list):
                parts.extend(p for p in content if isinstance(p, dict))
        return parts

    @property
    def prompt(self) -> str:
        """Every text part of every message, joined."""
        return "\n".join(p["text"] for p in self._parts() if p.get("type") == "text")

    @property
    def schema_properties(self) -> set[str]:
        """The properties of the JSON schema the request asks its answer to follow (`response_format`)."""
        schema = ((self.body.get("response_format") or {}).get("json_schema") or {}).get("schema") or {}
        return set(schema.get("properties", {}))

    @property
    def image_urls(self) -> list[str]:
        return [p["image_url"]["url"] for p in self._parts() if p.get("type") == "image_url"]

    @property
    def images(self) -> list[tuple[str, bytes]]:
        """(mime type, decoded bytes) of every image sent as a base64 `data:` URL."""
        decoded = []
        for url in self.image_urls:
            header, _, data = url.partition(",")
            if not header.startswith("data:") or not header.endswith(";base64"):
                raise ValueError(f"not a base64 data URL: {url[:40]}...")
            decoded.append((header[len("data:") : -len(";base64")], base64.b64decode(data)))
        return decoded


Responder = Callable[[RecordedRequest], Reply]


def completion(content: str | None, finish_reason: str = "stop", refusal: str | None = None) -> dict[str, Any]:
    """A chat.completion object with one choice."""
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": "fake",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": refusal},
                "finish_reason": finish_reason,
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def text_reply(text: str | None, finish_reason: str = "stop") -> Reply:
    """A 200 whose single choice holds `text` (the model's raw answer)."""
    return Reply(body=completion(text, finish_reason))


def refusal_reply(reason: str = "I can't help with that.") -> Reply:
    return Reply(body=completion(None, "stop", refusal=reason))


def malformed_reply() -> Reply:
    """A 200 whose body is not JSON at all."""
    return Reply(body=b'{"choices": [ this is not json')


def no_choices_reply() -> Reply:
    return Reply(
        body={"id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": "fake", "choices": []}
    )


def error_reply(status: int, message: str = "fake error", retry_after: str | None = None) -> Reply:
    kinds = {400: "invalid_request_error", 401: "authentication_error", 429: "rate_limit_error", 500: "server_error"}
    return Reply(
        status=status,
        body={"error": {"message": message, "type": kinds.get(status, "api_error"), "param": None, "code": None}},
        headers={"Retry-After": retry_after} if retry_after is not None else {},
    )


def default_responder(request: RecordedRequest) -> Reply:
    return text_reply(DEFAULT_ANSWER)


class FakeOpenAI(ScriptedJsonServer[RecordedRequest]):
    """A threaded HTTP server; use as a context manager (or start()/stop()), one per test."""

    thread_name = "fake-openai"
    url_suffix = "/v1"  # the usual prefix of OpenAI-compatible APIs

    def __init__(self, fallback: Responder = default_responder) -> None:
        super().__init__(RecordedRequest, fallback)

    def reject(self, path: str) -> Reply | None:
        """Only `{prefix}/chat/completions` is served; anything else is a 404 (not recorded)."""
        if path.rstrip("/").endswith("/chat/completions"):
            return None
        return error_reply(404, f"fake server: no route {path}")
