"""A fake Gemini API on 127.0.0.1 for tests: the real google-genai client talks to it through
`http_options.base_url` (GeminiSettings.base_url).

It serves `POST /{api_version}/models/{model}:generateContent`, records every request (headers, body, arrival
time), and answers from a scriptable queue of replies; when the queue is empty it answers with `default_responder`,
which answers the translation and concept-generation requests of this project deterministically from the request.

    with FakeGemini() as fake:
        fake.enqueue(error_reply(429, retry_after="1"), text_reply("{not json"))
        settings = GeminiSettings(base_url=fake.base_url, ...)
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PATH = re.compile(r"^/(?P<version>[^/]+)/models/(?P<model>[^/:]+):generateContent$")


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    received_at: float  # time.monotonic()

    @property
    def model(self) -> str | None:
        match = PATH.match(self.path)
        return match.group("model") if match else None

    @property
    def api_key(self) -> str | None:
        return next((v for k, v in self.headers.items() if k.lower() == "x-goog-api-key"), None)

    @property
    def prompt(self) -> str:
        """Every text part of every turn, joined."""
        return "\n".join(
            part["text"]
            for content in self.body.get("contents", [])
            for part in content.get("parts", [])
            if "text" in part
        )

    @property
    def images(self) -> list[tuple[str, bytes]]:
        """(mime type, decoded bytes) of every inline image part of every turn."""
        found = []
        for content in self.body.get("contents", []):
            for part in content.get("parts", []):
                blob = part.get("inlineData") or part.get("inline_data")
                if blob:
                    mime = blob.get("mimeType") or blob.get("mime_type") or ""
                    data = blob["data"].replace("-", "+").replace("_", "/")  # google-genai sends URL-safe base64
                    found.append((mime, base64.b64decode(data + "=" * (-len(data) % 4))))
        return found

    @property
    def generation_config(self) -> dict[str, Any]:
        return self.body.get("generationConfig", {})

    @property
    def schema_properties(self) -> set[str]:
        schema = self.generation_config.get("responseSchema") or self.generation_config.get("responseJsonSchema") or {}
        return set(schema.get("properties", {}))


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # JSON-serialisable, or bytes sent as they are
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0  # wait before answering (client timeouts)


Responder = Callable[[RecordedRequest], Reply]


def text_reply(text: str) -> Reply:
    """A 200 whose single candidate holds `text` (the model's raw answer, JSON or not)."""
    return Reply(
        body={
            "candidates": [
                {"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP", "index": 0}
            ],
            "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 1, "totalTokenCount": 2},
            "modelVersion": "fake",
        }
    )


def json_reply(value: Any) -> Reply:
    return text_reply(json.dumps(value, ensure_ascii=False))


def error_reply(
    status: int, message: str = "fake error", retry_after: str | None = None, status_name: str | None = None
) -> Reply:
    names = {
        429: "RESOURCE_EXHAUSTED",
        500: "INTERNAL",
        503: "UNAVAILABLE",
        400: "INVALID_ARGUMENT",
        403: "PERMISSION_DENIED",
    }
    return Reply(
        status=status,
        body={"error": {"code": status, "message": message, "status": status_name or names.get(status, "UNKNOWN")}},
        headers={"Retry-After": retry_after} if retry_after is not None else {},
    )


def input_data(request: RecordedRequest) -> dict[str, Any]:
    """The JSON block of a translation prompt (collectors.translations.translation_prompt)."""
    match = re.search(r"```json\n(.*?)\n```", request.prompt, re.S)
    if not match:
        raise ValueError("no ```json block in the prompt")
    return json.loads(match.group(1))


def translation_answer(request: RecordedRequest) -> dict[str, Any]:
    """Each requested concept as "<lang>:<concept>", with the language's usual descriptor template."""
    from data import reference

    data = input_data(request)
    code = data["language_code"]
    template = reference.language_pack(code).language.descriptor_template
    return {
        "translations": [
            {"concept_id": c["concept_id"], "text": f"{code}:{c['concept']}", "descriptor_template": template}
            for c in data["concepts"]
        ]
    }


def concepts_answer(request: RecordedRequest) -> dict[str, Any]:
    """As many distinct concepts as the App. H prompt asks for ("list N concepts ...")."""
    match = re.search(r"list (\d+) concepts", request.prompt)
    count = int(match.group(1)) if match else 3
    return {
        "concepts": [
            {"name": f"fake concept {chr(ord('a') + i % 26)}{i}", "rationale": f"varies by country ({i})"}
            for i in range(count)
        ]
    }


def default_responder(request: RecordedRequest) -> Reply:
    """Deterministic answers to this project's Gemini requests, told apart by the response schema."""
    properties = request.schema_properties
    if request.model is None:
        return error_reply(404, f"fake server: no route {request.path}", status_name="NOT_FOUND")
    if "translations" in properties:
        return json_reply(translation_answer(request))
    if "concepts" in properties:
        return json_reply(concepts_answer(request))
    if "images" in properties:
        return json_reply(tagging_answer(request))
    return error_reply(400, "fake server: unknown request kind")


def tagging_answer(request: RecordedRequest) -> dict:
    """App. I tagging: every labelled image ("Image N:") is answered with no extra category, so the build's tags are
    each image's own concept, from the Gemini tagger."""
    labels = [part.get("text", "") for part in request.body["contents"][0]["parts"]]
    indexes = [int(m.group(1)) for m in (re.fullmatch(r"Image (\d+):", label) for label in labels) if m]
    return {"images": [{"index": index, "categories": []} for index in indexes]}


class FakeGemini:
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
        assert self._server is not None, "server not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def enqueue(self, *replies: Reply | Responder) -> None:
        """Replies used, in order, by the next requests; then the fallback responder answers."""
        with self._lock:
            self._queue.extend(replies)

    def _next(self, request: RecordedRequest) -> Reply:
        with self._lock:
            self.requests.append(request)
            item = self._queue.popleft() if self._queue else self.fallback
        return item if isinstance(item, Reply) else item(request)

    def start(self) -> FakeGemini:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", 0)))
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    body = {"_raw": raw.decode("utf-8", "replace")}
                request = RecordedRequest(self.path, dict(self.headers.items()), body, time.monotonic())
                reply = fake._next(request)
                if reply.delay_s:
                    time.sleep(reply.delay_s)
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

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-gemini", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeGemini:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
