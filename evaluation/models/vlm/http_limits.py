"""HTTP requests with a whole-request deadline and a capped body, for the remote evaluation backends.

An HTTP client's timeout bounds each socket operation, so a server that sends a byte before each read times out
keeps a request open for as long as it likes. `request_deadline` gives the requests a thread makes inside it one
end time; the network backend of the client's connection pools (`bound_by_deadlines`) gives every connect, read
and write only the time left until then. `read_capped` reads a streamed body up to a size, inflating gzip and
deflate under the same cap.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
import time
import zlib
from collections.abc import Iterator
from typing import Any

_deadline = threading.local()
_WRITE_SLICE = 64 << 10  # a request body is sent in slices, each within the time left


class DeadlinePassed(TimeoutError):
    """The request's deadline passed between two pieces of its body."""


@contextlib.contextmanager
def request_deadline(seconds: float) -> Iterator[None]:
    """Every HTTP request this thread makes inside ends within `seconds` from now, body included."""
    previous = getattr(_deadline, "end", None), getattr(_deadline, "seconds", None)
    _deadline.end, _deadline.seconds = time.monotonic() + seconds, seconds
    try:
        yield
    finally:
        _deadline.end, _deadline.seconds = previous


def _time_left(timeout: float | None, expired: type[Exception]) -> float | None:
    """`timeout`, shortened to the time left before this thread's deadline; `expired` once it has passed."""
    end: float | None = getattr(_deadline, "end", None)
    if end is None:
        return timeout
    left = end - time.monotonic()
    if left <= 0:
        raise expired(f"the request's deadline of {_deadline.seconds:g} s passed")
    return left if timeout is None else min(timeout, left)


def _deadline_timeouts(expired: type[Exception]) -> Any:
    """Within it, a timeout of the socket that the deadline shortened says so (not just "timed out")."""

    @contextlib.contextmanager
    def named() -> Iterator[None]:
        try:
            yield
        except expired:
            end = getattr(_deadline, "end", None)
            if end is not None and end - time.monotonic() < 0.05:
                raise expired(f"the request's deadline of {_deadline.seconds:g} s passed") from None
            raise

    return named()


class _DeadlineStream:
    """A connection's network stream whose every operation ends by the deadline of the thread that uses it."""

    def __init__(self, stream: Any, errors: Any) -> None:
        self._stream, self._errors = stream, errors

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        with _deadline_timeouts(self._errors.ReadTimeout):
            data: bytes = self._stream.read(max_bytes, _time_left(timeout, self._errors.ReadTimeout))
            return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        with _deadline_timeouts(self._errors.WriteTimeout):
            for start in range(0, len(buffer), _WRITE_SLICE):
                left = _time_left(timeout, self._errors.WriteTimeout)
                self._stream.write(buffer[start : start + _WRITE_SLICE], left)

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
        with _deadline_timeouts(self._errors.ConnectTimeout):
            left = _time_left(timeout, self._errors.ConnectTimeout)
            return _DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, left), self._errors)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _DeadlineBackend:
    """A connection pool's network backend whose connections keep to the deadline (`_DeadlineStream`)."""

    def __init__(self, backend: Any, errors: Any) -> None:
        self._backend, self._errors = backend, errors

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, **options: Any) -> Any:
        with _deadline_timeouts(self._errors.ConnectTimeout):
            left = _time_left(timeout, self._errors.ConnectTimeout)
            return _DeadlineStream(self._backend.connect_tcp(host, port, timeout=left, **options), self._errors)

    def connect_unix_socket(self, path: str, timeout: float | None = None, **options: Any) -> Any:
        with _deadline_timeouts(self._errors.ConnectTimeout):
            left = _time_left(timeout, self._errors.ConnectTimeout)
            return _DeadlineStream(self._backend.connect_unix_socket(path, timeout=left, **options), self._errors)

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def bound_by_deadlines(http_client: Any) -> bool:
    """Give the connection pools of an httpx (or httpx2) client the deadline-keeping network backend; False when
    the client has none we know (then only the pauses between body chunks are checked)."""
    transports = [getattr(http_client, "_transport", None), *getattr(http_client, "_mounts", {}).values()]
    patched = False
    for transport in transports:
        pool: Any = getattr(transport, "_pool", None)  # httpcore's pool: not None where it has a backend
        backend = getattr(pool, "_network_backend", None)
        if backend is None:
            continue
        if not isinstance(backend, _DeadlineBackend):
            # httpcore or httpcore2: its ReadTimeout/WriteTimeout/ConnectTimeout are what the client maps.
            errors = importlib.import_module(type(pool).__module__.split(".")[0])
            pool._network_backend = _DeadlineBackend(backend, errors)
        patched = True
    return patched


class ResponseTooLarge(ValueError):
    """An answer's body beyond the cap: the rest is not read."""


def read_capped(response: Any, limit: int) -> bytes:
    """The body of a streamed httpx response, decoded, refused (`ResponseTooLarge`) beyond `limit` bytes: by its
    Content-Length before a byte is read, else while streaming (gzip/deflate inflated under the same cap). The
    deadline is checked between chunks too."""
    declared = (response.headers.get("content-length") or "").strip()
    encoding = (response.headers.get("content-encoding") or "").strip().lower()
    if encoding in ("", "identity") and declared.isdigit() and int(declared) > limit:
        raise ResponseTooLarge(f"Content-Length {declared} > max_response_bytes {limit}")
    if encoding not in ("", "identity", "gzip", "x-gzip", "deflate"):
        raise ValueError(f"an answer in content-encoding {encoding!r}, which is not read")
    inflater = None if encoding in ("", "identity") else zlib.decompressobj(zlib.MAX_WBITS | 32)
    chunks: list[bytes] = []
    size = 0
    for raw in response.iter_raw():
        pending = raw
        while pending:
            if inflater is None:
                piece, pending = pending, b""
            else:
                piece = inflater.decompress(pending, limit - size + 1)
                pending = inflater.unconsumed_tail
            size += len(piece)
            if size > limit:
                raise ResponseTooLarge(f"the answer exceeded max_response_bytes {limit} while streaming")
            chunks.append(piece)
        _time_left(None, DeadlinePassed)
    if inflater is not None:
        chunks.append(inflater.flush())
        if size + len(chunks[-1]) > limit:
            raise ResponseTooLarge(f"the answer exceeded max_response_bytes {limit} while streaming")
    return b"".join(chunks)
