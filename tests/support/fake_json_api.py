"""The server half shared by the fake JSON APIs of the tests (fake_openai.py, fake_gemini.py): a threaded HTTP
server on 127.0.0.1 that records every POST (path, headers, JSON body, arrival time) and answers from a scriptable
queue of replies, then from a fallback responder. Each fake adds its own request properties, replies and routes.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Generic, Self, TypeVar


@dataclass
class JsonRequest:
    """One recorded request; each fake subclasses it with properties for its API."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    received_at: float  # time.monotonic()


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # JSON-serialisable, or bytes sent as they are
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0  # wait before answering (client timeouts)


RequestT = TypeVar("RequestT", bound=JsonRequest)


class ScriptedJsonServer(Generic[RequestT]):
    """A threaded HTTP server; use as a context manager (or start()/stop()), one per test."""

    thread_name = "fake-json-api"
    url_suffix = ""  # appended to base_url (e.g. "/v1")

    def __init__(self, request_type: type[RequestT], fallback: Callable[[RequestT], Reply]) -> None:
        self.request_type = request_type
        self.fallback = fallback
        self.requests: list[RequestT] = []
        self._queue: deque[Reply | Callable[[RequestT], Reply]] = deque()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """What a client takes as its base URL."""
        assert self._server is not None, "server not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}{self.url_suffix}"

    def enqueue(self, *replies: Reply | Callable[[RequestT], Reply]) -> None:
        """Replies used, in order, by the next requests; then the fallback responder answers."""
        with self._lock:
            self._queue.extend(replies)

    def reject(self, path: str) -> Reply | None:
        """A reply for a path the fake does not serve, sent without recording the request; None serves it."""
        return None

    def _next(self, request: RequestT) -> Reply:
        with self._lock:
            self.requests.append(request)
            item = self._queue.popleft() if self._queue else self.fallback
        return item if isinstance(item, Reply) else item(request)

    def start(self) -> Self:
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
                rejected = fake.reject(self.path)
                if rejected is not None:
                    self._send(rejected)
                    return
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    body = {"_raw": raw.decode("utf-8", "replace")}
                request = fake.request_type(self.path, dict(self.headers.items()), body, time.monotonic())
                reply = fake._next(request)
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                self._send(reply)

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name=self.thread_name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
