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
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DEFAULT_ANSWER = "I am not sure which country this is from."


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    received_at: float  # time.monotonic()

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


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # JSON-serialisable, or bytes sent as they are
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0  # wait before answering (client timeouts)


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


class FakeOpenAI:
    """A threaded HTTP server; use as a context manager (or start()/stop()), one per test."""

    def __init__(self, fallback: Responder = default_responder) -> None:
        self.fallback = fallback
        self.requests: list[RecordedRequest] = []
        self._queue: deque[Reply | Responder] = deque()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """What a client takes as its base URL (with the usual `/v1` prefix)."""
        assert self._server is not None, "server not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def enqueue(self, *replies: Reply | Responder) -> None:
        """Replies used, in order, by the next requests; then the fallback responder answers."""
        with self._lock:
            self._queue.extend(replies)

    def _next(self, request: RecordedRequest) -> Reply:
        with self._lock:
            self.requests.append(request)
            item = self._queue.popleft() if self._queue else self.fallback
        return item if isinstance(item, Reply) else item(request)

    def start(self) -> FakeOpenAI:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _send(self, reply: Reply) -> None:
                data = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body or {}).encode()
                try:
                    self.send_response(reply.status)
                    for key, value in {"content-type": "application/json", **reply.headers}.items():
                        self.send_header(key, value)
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout tests)
                    pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", 0)))
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(error_reply(404, f"fake server: no route {self.path}"))
                    return
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    body = {"_raw": raw.decode("utf-8", "replace")}
                request = RecordedRequest(self.path, dict(self.headers.items()), body, time.monotonic())
                reply = fake._next(request)
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                self._send(reply)

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-openai", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
