"""A fault-injecting image host on 127.0.0.1, for the downloader's tests and its benchmark.

Runs an aiohttp.web server either in a background thread (`FakeImageHost`, for tests) or in its own process
(`FakeImageHostProcess`, for the benchmark, so that it does not share a GIL with the measured client). Every
request is counted per path and timestamped; `latency_s` delays every response. `cpu_ms_per_request` makes the
host CPU-bound, as a slow real host is: each request first burns that much CPU synchronously in the event loop
(`burn_cpu`), so requests are served one at a time and the host competes for the same cores as its clients.

Routes (`<n>` picks a corpus image, modulo the corpus size; `<tag>` only makes URLs distinct; `?unique=1` on a
route that serves a corpus image makes its bytes distinct per path, with a JPEG comment):

    /img/<n>/<tag>                 200, a corpus JPEG
    /status/<code>/<tag>           that status, a short text body
    /flaky/<fails>/<n>/<tag>       500 for the first <fails> hits of this path, then the image
    /429/<n>/<tag>                 429 with Retry-After on the first hit of this path, then the image
    /html/<tag>                    an HTML page served as image/jpeg
    /truncated/<n>/<tag>           Content-Length of the whole image, half of it sent, connection closed
    /cut/<n>/<tag>                 the first half of a JPEG with a matching Content-Length
    /slow/<n>/<tag>                the image after `slow_s` seconds of silence
    /tiny/<tag>                    an 8x8 PNG
    /bomb/<tag>                    a PNG header claiming 100000 x 100000 pixels
    /big/<kib>/<tag>?declared=0|1  <kib> KiB (JPEG signature, then filler), with or without Content-Length
    /encoded/<n>/<tag>?encoding=E  a corpus JPEG with Content-Encoding E (gzip, deflate, raw-deflate, gzip-cut: a
                                   gzip stream cut short, or any other name, then sent as is), whatever the
                                   request's Accept-Encoding says
    /gzip-bomb/<mib>/<tag>         <mib> MiB (a JPEG signature, then zeros) gzip-compressed to about 1/1000 of that;
                                   ?honour=1 serves it uncompressed, with its Content-Length, to a client whose
                                   Accept-Encoding does not name gzip; ?encoding=deflate for a deflate bomb
    /redirect/<hops>/<n>/<tag>     302 chains of <hops> hops ending at /img/<n>/<tag>
    /redirect-to?url=<url>         302 to any URL
    /xheaders/<n>/<tag>?H=V&...    a corpus JPEG with every query parameter H=V as a response header (repeat H for
                                   several headers; `unique` is not one); ?kib=<k> serves <k> KiB (JPEG signature,
                                   then filler, with Content-Length) instead of the image
    /robots.txt                    `robots_txt` with `robots_status` after `robots_delay_s`; 404 when None
    /.well-known/tdmrep.json       `tdmrep_json` with `tdmrep_status`; 404 when None
    /_stats (GET), /_reset (POST)  request counts as JSON; forget counts and first hits

`FakeImageHost.overrides[path] = (status, headers)` answers an image route with another status, or adds headers.

Each request's headers are kept per path (`FakeImageHost.request_headers`). The two site files are counted apart, in
`meta_counts`, and not in `counts` nor `max_in_flight`, so that those mean image requests only.

Run as a script to serve in the foreground: `python tests/support/fake_image_host.py --corpus 300 --latency 0.05
[--cpu-ms-per-request 2]` prints `PORT <n>` on stdout once it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import hashlib
import io
import json
import os
import struct
import subprocess
import sys
import threading
import time
import zlib
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from aiohttp import web
from multidict import CIMultiDict
from PIL import Image


def make_jpeg(seed: int, target_bytes: int | None = None, size: tuple[int, int] | None = None) -> bytes:
    """A deterministic photo-like JPEG (gradients + noise); near `target_bytes` when given."""
    rng = np.random.default_rng(seed)
    if size is None:
        # Pixels grow with the target so that moderate qualities reach it: ~0.3 byte per pixel at q75.
        pixels = max(64 * 64, int((target_bytes or 60_000) / 0.3))
        width = int((pixels * 4 / 3) ** 0.5)
        size = (width, max(64, width * 3 // 4))
    width, height = size
    small = rng.integers(0, 256, (max(2, height // 32), max(2, width // 32), 3), dtype=np.uint8)
    base = np.asarray(Image.fromarray(small).resize((width, height), Image.Resampling.BILINEAR), dtype=np.int16)
    noise = rng.integers(-12, 13, (height, width, 1), dtype=np.int16)
    image = Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8))
    best = b""
    for quality in (92, 85, 75, 65, 50, 35, 20):
        out = io.BytesIO()
        image.save(out, "JPEG", quality=quality)
        best = out.getvalue()
        if target_bytes is None or len(best) <= target_bytes:
            break
    return best


def make_corpus(count: int, seed: int = 0, min_kib: int = 20, max_kib: int = 120) -> list[bytes]:
    """`count` distinct JPEGs of varied size, the same for the same arguments in any process."""
    rng = np.random.default_rng(seed)
    targets = rng.integers(min_kib * 1024, max_kib * 1024, count)
    return [make_jpeg(seed * 1_000_003 + i, int(t)) for i, t in enumerate(targets)]


def tiny_png(side: int = 8) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (side, side), (200, 30, 30)).save(out, "PNG")
    return out.getvalue()


def bomb_png(width: int = 100_000, height: int = 100_000) -> bytes:
    """A valid PNG header announcing a huge canvas; a decoder would allocate width x height pixels."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)  # 1-bit grayscale
    idat = zlib.compress(b"\x00" * 1024)
    padding = chunk(b"tEXt", b"Comment\x00" + b"p" * 1024)  # above any sensible min_bytes
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + padding + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def compress(data: bytes, encoding: str) -> bytes:
    """`data` as a server sends it under Content-Encoding `encoding`; raw-deflate is the headerless form some send."""
    wbits = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS, "raw-deflate": -zlib.MAX_WBITS}[encoding]
    packer = zlib.compressobj(9, zlib.DEFLATED, wbits)
    return packer.compress(data) + packer.flush()


BOMB_HEAD = b"\xff\xd8\xff\xe0"  # a JPEG signature: the body looks like an image until it is inflated


@functools.lru_cache(maxsize=8)
@functools.lru_cache(maxsize=4)
def compression_bomb(mib: int, encoding: str = "gzip") -> bytes:
    """BOMB_HEAD then `mib` MiB of zeros, compressed (about 1 KiB per MiB), built a block at a time; once per size
    and encoding (building 64 MiB takes longer than a test's read timeout on a busy machine)."""
    wbits = 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
    packer = zlib.compressobj(9, zlib.DEFLATED, wbits)
    block = bytes(1 << 20)
    parts = [packer.compress(BOMB_HEAD)]
    parts.extend(packer.compress(block) for _ in range(mib))
    parts.append(packer.flush())
    return b"".join(parts)


def burn_cpu(ms: float) -> None:
    """Busy for `ms` milliseconds of this thread's CPU time (hashing), without yielding to anything."""
    if ms <= 0:
        return
    end = time.thread_time() + ms / 1000
    digest = b"burn"
    while time.thread_time() < end:
        for _ in range(64):
            digest = hashlib.sha256(digest).digest()


META_PATHS = ("/robots.txt", "/.well-known/tdmrep.json")  # the site files of `collectors.optout`, counted apart

HTML_PAGE = b"<!DOCTYPE html><html><head><title>Not found</title></head><body>" + b"x" * 2048 + b"</body></html>"


class _App:
    """Handlers and counters; shared by the thread and the process runners."""

    def __init__(
        self,
        corpus: Sequence[bytes],
        latency_s: float,
        retry_after_s: int,
        slow_s: float,
        robots_txt: str | None = None,
        robots_status: int = 200,
        robots_delay_s: float = 0.0,
        tdmrep_json: str | None = None,
        tdmrep_status: int = 200,
        cpu_ms_per_request: float = 0.0,
    ) -> None:
        self.corpus = list(corpus) or [make_jpeg(0, size=(320, 240))]
        self.latency_s = latency_s
        self.cpu_ms_per_request = cpu_ms_per_request
        self.retry_after_s = retry_after_s
        self.slow_s = slow_s
        self.robots_txt = robots_txt
        self.robots_status = robots_status
        self.robots_delay_s = robots_delay_s
        self.tdmrep_json = tdmrep_json
        self.tdmrep_status = tdmrep_status
        self.meta_counts: Counter[str] = Counter()
        self.counts: Counter[str] = Counter()
        self.times: dict[str, list[float]] = defaultdict(list)
        self.request_headers: dict[str, list[dict[str, str]]] = defaultdict(list)
        self.in_flight = 0
        self.max_in_flight = 0
        self.tiny = tiny_png()
        self.bomb = bomb_png()
        # path -> (status, extra headers): a 404 for a page that went, an `X-Robots-Tag` added later, ...
        self.overrides: dict[str, tuple[int, dict[str, str]]] = {}

    def image(self, request: web.Request) -> bytes:
        data = self.corpus[int(request.match_info["n"]) % len(self.corpus)]
        if request.query.get("unique") == "1" and data.startswith(b"\xff\xd8"):
            # A JPEG comment naming the path right after the SOI marker: distinct bytes, the same pixels.
            note = request.path.encode()[:60000]
            data = data[:2] + b"\xff\xfe" + struct.pack(">H", len(note) + 2) + note + data[2:]
        return data

    def build(self) -> web.Application:
        app = web.Application(middlewares=[self._count])
        app.router.add_get("/img/{n:\\d+}/{tag}", self.img)
        app.router.add_get("/status/{code:\\d+}/{tag}", self.status)
        app.router.add_get("/flaky/{fails:\\d+}/{n:\\d+}/{tag}", self.flaky)
        app.router.add_get("/429/{n:\\d+}/{tag}", self.rate_limited)
        app.router.add_get("/html/{tag}", self.html)
        app.router.add_get("/truncated/{n:\\d+}/{tag}", self.truncated)
        app.router.add_get("/cut/{n:\\d+}/{tag}", self.cut)
        app.router.add_get("/slow/{n:\\d+}/{tag}", self.slow)
        app.router.add_get("/tiny/{tag}", self.tiny_image)
        app.router.add_get("/bomb/{tag}", self.bomb_image)
        app.router.add_get("/big/{kib:\\d+}/{tag}", self.big)
        app.router.add_get("/encoded/{n:\\d+}/{tag}", self.encoded)
        app.router.add_get("/gzip-bomb/{mib:\\d+}/{tag}", self.gzip_bomb)
        app.router.add_get("/redirect/{hops:\\d+}/{n:\\d+}/{tag}", self.redirect)
        app.router.add_get("/redirect-to", self.redirect_to)
        app.router.add_get("/xheaders/{n:\\d+}/{tag}", self.xheaders)
        app.router.add_get(META_PATHS[0], self.robots)
        app.router.add_get(META_PATHS[1], self.tdmrep)
        app.router.add_get("/_stats", self.stats)
        app.router.add_post("/_reset", self.reset)
        return app

    @web.middleware
    async def _count(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.path.startswith("/_"):
            return await handler(request)
        # Blocks the event loop: the single-threaded host serves nothing else meanwhile.
        burn_cpu(self.cpu_ms_per_request)
        if request.path in META_PATHS:
            self.meta_counts[request.path] += 1
            self.times[request.path].append(time.monotonic())
            self.request_headers[request.path].append(dict(request.headers))
            return await handler(request)
        self.counts[request.path] += 1
        self.times[request.path].append(time.monotonic())
        self.request_headers[request.path].append(dict(request.headers))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.latency_s:
                await asyncio.sleep(self.latency_s)
            if request.path in self.overrides:
                status, headers = self.overrides[request.path]
                if status != 200:
                    return web.Response(status=status, text="no image here", headers=headers)
                response = await handler(request)
                response.headers.update(headers)
                return response
            return await handler(request)
        finally:
            self.in_flight -= 1

    async def img(self, request: web.Request) -> web.Response:
        return web.Response(body=self.image(request), content_type="image/jpeg")

    async def status(self, request: web.Request) -> web.Response:
        return web.Response(status=int(request.match_info["code"]), text="no image here")

    async def flaky(self, request: web.Request) -> web.Response:
        if self.counts[request.path] <= int(request.match_info["fails"]):
            return web.Response(status=500, text="try again")
        return web.Response(body=self.image(request), content_type="image/jpeg")

    async def rate_limited(self, request: web.Request) -> web.Response:
        if self.counts[request.path] == 1:
            return web.Response(status=429, text="slow down", headers={"Retry-After": str(self.retry_after_s)})
        return web.Response(body=self.image(request), content_type="image/jpeg")

    async def html(self, request: web.Request) -> web.Response:
        return web.Response(body=HTML_PAGE, content_type="image/jpeg")

    async def truncated(self, request: web.Request) -> web.StreamResponse:
        data = self.image(request)
        response = web.StreamResponse(headers={"Content-Type": "image/jpeg"})
        response.content_length = len(data)
        await response.prepare(request)
        await response.write(data[: len(data) // 2])
        # Close mid-body: the client sees fewer bytes than Content-Length announced.
        if request.transport is not None:
            request.transport.close()
        return response

    async def cut(self, request: web.Request) -> web.Response:
        data = self.image(request)
        return web.Response(body=data[: len(data) // 2], content_type="image/jpeg")

    async def slow(self, request: web.Request) -> web.Response:
        await asyncio.sleep(self.slow_s)
        return web.Response(body=self.image(request), content_type="image/jpeg")

    async def tiny_image(self, request: web.Request) -> web.Response:
        return web.Response(body=self.tiny, content_type="image/png")

    async def bomb_image(self, request: web.Request) -> web.Response:
        return web.Response(body=self.bomb, content_type="image/png")

    async def big(self, request: web.Request) -> web.StreamResponse:
        total = int(request.match_info["kib"]) * 1024
        response = web.StreamResponse(headers={"Content-Type": "image/jpeg"})
        if request.query.get("declared", "1") == "1":
            response.content_length = total
        else:
            response.enable_chunked_encoding()
        await response.prepare(request)
        block = b"\xff\xd8\xff\xe0" + b"\x00" * (64 * 1024 - 4)
        sent = 0
        try:
            while sent < total:
                piece = block[: min(len(block), total - sent)]
                await response.write(piece)
                sent += len(piece)
            await response.write_eof()
        except (ConnectionError, RuntimeError):
            pass  # the client hung up once it had seen enough: that is the point
        return response

    async def encoded(self, request: web.Request) -> web.Response:
        # Sent as a plain body with the header set by hand: aiohttp's own compression would honour Accept-Encoding.
        encoding = request.query.get("encoding", "gzip")
        data = self.image(request)
        if encoding in ("gzip", "deflate", "raw-deflate"):
            body = compress(data, encoding)
        elif encoding == "gzip-cut":
            body = compress(data, "gzip")[: len(data) // 4]  # the compressed stream stops early
        else:
            body = data
        header = {"raw-deflate": "deflate", "gzip-cut": "gzip"}.get(encoding, encoding)
        return web.Response(body=body, headers={"Content-Type": "image/jpeg", "Content-Encoding": header})

    async def gzip_bomb(self, request: web.Request) -> web.StreamResponse:
        mib, encoding = int(request.match_info["mib"]), request.query.get("encoding", "gzip")
        accepted = request.headers.get("Accept-Encoding", "").lower()
        if request.query.get("honour") == "1" and encoding not in accepted:
            # What a well-behaved server does for `identity`: the same content, uncompressed.
            total = len(BOMB_HEAD) + (mib << 20)
            response = web.StreamResponse(headers={"Content-Type": "image/jpeg"})
            response.content_length = total
            await response.prepare(request)
            try:
                await response.write(BOMB_HEAD)
                block = bytes(64 * 1024)
                for _ in range((mib << 20) // len(block)):
                    await response.write(block)
                await response.write_eof()
            except (ConnectionError, RuntimeError):
                pass  # the client hung up once it had seen enough
            return response
        headers = {"Content-Type": "image/jpeg", "Content-Encoding": encoding}
        return web.Response(body=compression_bomb(mib, encoding), headers=headers)

    async def redirect(self, request: web.Request) -> web.Response:
        hops, n, tag = (request.match_info[k] for k in ("hops", "n", "tag"))
        target = f"/img/{n}/{tag}" if int(hops) <= 1 else f"/redirect/{int(hops) - 1}/{n}/{tag}"
        raise web.HTTPFound(target)

    async def redirect_to(self, request: web.Request) -> web.Response:
        raise web.HTTPFound(request.query["url"])

    async def xheaders(self, request: web.Request) -> web.Response:
        headers = CIMultiDict((k, v) for k, v in request.query.items() if k not in ("unique", "kib"))
        if "kib" in request.query:
            body = b"\xff\xd8\xff\xe0" + b"\x00" * (int(request.query["kib"]) * 1024 - 4)
        else:
            body = self.image(request)
        headers["Content-Type"] = "image/jpeg"
        return web.Response(body=body, headers=headers)

    async def robots(self, request: web.Request) -> web.Response:
        if self.robots_delay_s:
            await asyncio.sleep(self.robots_delay_s)
        return self._site_file(self.robots_txt, self.robots_status, "text/plain")

    async def tdmrep(self, request: web.Request) -> web.Response:
        return self._site_file(self.tdmrep_json, self.tdmrep_status, "application/json")

    @staticmethod
    def _site_file(text: str | None, status: int, content_type: str) -> web.Response:
        if status != 200:
            return web.Response(status=status, text="unavailable")
        if text is None:
            return web.Response(status=404, text="not found")
        return web.Response(text=text, content_type=content_type)

    async def stats(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"counts": dict(self.counts), "meta_counts": dict(self.meta_counts), "max_in_flight": self.max_in_flight}
        )

    async def reset(self, request: web.Request) -> web.Response:
        self.counts.clear()
        self.meta_counts.clear()
        self.times.clear()
        self.request_headers.clear()
        self.max_in_flight = 0
        return web.json_response({"ok": True})


class FakeImageHost:
    """The server in a background thread of this process; use as a context manager."""

    def __init__(
        self,
        corpus: Sequence[bytes] = (),
        latency_s: float = 0.0,
        retry_after_s: int = 1,
        slow_s: float = 5.0,
        cpu_ms_per_request: float = 0.0,
        **site_files: Any,
    ) -> None:
        """`site_files`: robots_txt, robots_status, robots_delay_s, tdmrep_json, tdmrep_status (see `_App`)."""
        self.app = _App(corpus, latency_s, retry_after_s, slow_s, cpu_ms_per_request=cpu_ms_per_request, **site_files)
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    @property
    def counts(self) -> Counter[str]:
        return self.app.counts

    @property
    def meta_counts(self) -> Counter[str]:
        """Requests for /robots.txt and /.well-known/tdmrep.json (not in `counts`)."""
        return self.app.meta_counts

    @property
    def times(self) -> dict[str, list[float]]:
        return self.app.times

    @property
    def request_headers(self) -> dict[str, list[dict[str, str]]]:
        """Per path, the headers of every request, in arrival order."""
        return self.app.request_headers

    @property
    def corpus(self) -> list[bytes]:
        return self.app.corpus

    @property
    def max_in_flight(self) -> int:
        """Most requests the server was handling at once."""
        return self.app.max_in_flight

    @property
    def overrides(self) -> dict[str, tuple[int, dict[str, str]]]:
        """path -> (status, extra headers) for image routes: set one to answer 404, or add `X-Robots-Tag`."""
        return self.app.overrides

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def start(self) -> FakeImageHost:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fake-image-host", daemon=True)
        self._thread.start()
        self.port = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)
        return self

    async def _start(self) -> int:
        self._runner = web.AppRunner(self.app.build(), access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        return site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def stop(self) -> None:
        if self._loop is None:
            return
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._loop.close()
        self._loop = None

    def __enter__(self) -> FakeImageHost:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class FakeImageHostProcess:
    """The server in a child process (its own GIL), started with this file as a script."""

    def __init__(
        self,
        corpus_size: int = 300,
        seed: int = 0,
        latency_s: float = 0.05,
        retry_after_s: int = 1,
        cpu_ms_per_request: float = 0.0,
    ) -> None:
        self.args = [
            f"--corpus={corpus_size}",
            f"--seed={seed}",
            f"--latency={latency_s}",
            f"--retry-after={retry_after_s}",
            f"--cpu-ms-per-request={cpu_ms_per_request}",
        ]
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def start(self, timeout_s: float = 120.0) -> FakeImageHostProcess:
        """Start the host and wait for its `PORT` line: `timeout_s` on an idle machine, longer on a busy one, and
        not at all once it has exited (`tests/support/readiness.py`)."""
        from tests.support.readiness import wait_until_ready  # here: the host itself runs as a script, from its folder

        self._proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), *self.args], stdout=subprocess.PIPE
        )
        assert self._proc.stdout is not None
        stdout = self._proc.stdout.fileno()
        os.set_blocking(stdout, False)  # a poll reads what is there; the wait, not a read, decides how long
        said = bytearray()

        def port_line() -> bool:
            with contextlib.suppress(BlockingIOError):
                said.extend(os.read(stdout, 4096))  # b"" once it has exited: the wait sees the process end
            first, newline, _ = bytes(said).partition(b"\n")
            if newline and first.startswith(b"PORT "):
                self.port = int(first.split()[1])
                return True
            return False

        try:
            wait_until_ready("the fake image host", port_line, timeout_s, process=self._proc, poll_s=0.05)
        except BaseException:
            self.stop()
            raise
        return self

    def _call(self, method: str, path: str) -> dict:
        import urllib.request

        request = urllib.request.Request(self.url(path), method=method)
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def counts(self) -> dict[str, int]:
        return self._call("GET", "/_stats")["counts"]

    def reset(self) -> None:
        self._call("POST", "/_reset")

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def __enter__(self) -> FakeImageHostProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _serve(args: argparse.Namespace) -> None:
    app = _App(
        make_corpus(args.corpus, args.seed),
        args.latency,
        args.retry_after,
        args.slow,
        cpu_ms_per_request=args.cpu_ms_per_request,
    )

    async def main() -> None:
        runner = web.AppRunner(app.build(), access_log=None, handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", args.port, backlog=1024)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        print(f"PORT {port}", flush=True)
        await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Serve a fault-injecting image host on 127.0.0.1.")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--corpus", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--retry-after", type=int, default=1)
    parser.add_argument("--slow", type=float, default=5.0)
    parser.add_argument(
        "--cpu-ms-per-request",
        type=float,
        default=0.0,
        help="CPU milliseconds burnt per request in the event loop: a single-threaded, CPU-bound host.",
    )
    _serve(parser.parse_args())
