"""HTTP download stage: fetch each search hit's image, check it, store it by sha256, one IMAGES row per hit.

The production counterpart of `collectors.importer` (same rows, same image checks). What it adds:

- asyncio + aiohttp, a global and a per-host concurrency limit, connect/read/request timeouts;
- a body cap enforced while streaming (and early, from Content-Length);
- bodies asked for uncompressed (`Accept-Encoding: identity`) and never inflated by aiohttp: a server that compresses
  anyway is inflated here, a piece at a time, under the same cap (`_Inflater`), so a compression bomb costs at most
  max_bytes of memory and is a `decompression_bomb` row, not a stall that reads as a retryable timeout;
- classified failures (`error` column): dns, connect, timeout, http_<code>, not_an_image, corrupt, truncated,
  too_small, too_large, decompression_bomb, unsupported_encoding, blocked_address, invalid_url, too_many_redirects,
  opted_out;
- retries of transient failures only (timeouts, 408/425/429/5xx) with `data.clients.retry.RetryPolicy`, honouring
  Retry-After, sleeping without holding a connection slot;
- opt-outs honoured (`collectors.optout`, `opted_out` rows naming the rule): robots.txt and TDMRep's tdmrep.json
  before a URL is requested, fetched once per origin per run outside the download slots; X-Robots-Tag and
  `tdm-reservation` headers before a byte of the body is read;
- an SSRF guard (`collectors.ssrf`) checked before every request and every redirect hop, and inside the DNS
  resolver itself;
- a `DownloadJournal` of per-URL results, so a rerun or a crashed run resumes at item granularity.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import threading
import time
import uuid
import zlib
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar, Literal, NotRequired, TypedDict, TypeVar

import aiohttp
import pyarrow as pa
from pydantic import Field, model_validator
from yarl import URL

from collectors.image_check import ImageLimits, ImageRejected, inspect_image
from collectors.optout import (
    OPTED_OUT,
    HostFileCache,
    OptOutChecker,
    OptOutPolicy,
    fetch_host_file,
    is_unreachable_refusal,
    product_token,
)
from collectors.ssrf import AddressPolicy, BlockedAddressError, GuardedResolver, UrlRefused, check_url
from data.clients.retry import (
    TRANSIENT_HTTP_CODES,
    GaveUp,
    RetryCount,
    RetryPolicy,
    RetryVerdict,
    call_with_retries_async,
    parse_retry_after,
)
from data.schemas import IMAGES, STATUS_FAILED, STATUS_OK, FetchedUrl, fetched_url, from_rows, images_row, str_cell
from data.stage import BackendConfig
from data.workspace import BlobStore, Storage, Workspace, fingerprint, sha256_bytes

T = TypeVar("T")

REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})
# Failures decided by the image limits: a rerun under other limits must fetch them again (no blob was kept).
LIMIT_DEPENDENT_ERRORS = frozenset({"too_small", "too_large", "decompression_bomb"})
# Decided by the URL and the address policy, both cheap to decide again and possibly changed: never reused.
NEVER_REUSED_ERRORS = frozenset({"invalid_url", "blocked_address"})
_CHUNK = 64 * 1024
# Inflated bytes per compressed byte above which a body over max_bytes is a bomb rather than a large image: images
# are compressed already, so gzip gains them little; a run of zeros deflates about 1000:1.
BOMB_RATIO = 100


# A fetcher is built for the build's workspace, where this one keeps its journal (`collectors.fetch.Fetcher`).
class HttpDownloadConfig(BackendConfig["Callable[[Workspace], HttpFetcher]"]):
    #: The SSRF-guarded fetcher: the only one that may fetch the URLs of a web search (`web_hits_problem`).
    fetches_web_urls: ClassVar[bool] = True

    backend: Literal["http"] = "http"
    limits: ImageLimits = Field(default_factory=ImageLimits)
    shard_size: int = Field(default=1024, ge=1, description="Hits per resumable part.")
    concurrency: int = Field(default=64, ge=1, description="Requests in flight, all hosts together.")
    per_host_concurrency: int = Field(default=16, ge=1, description="Requests in flight to one host.")
    connect_timeout_s: float = Field(default=10.0, gt=0, description="TCP (and TLS) connect.")
    read_timeout_s: float = Field(default=30.0, gt=0, description="Longest silence while waiting for bytes.")
    request_timeout_s: float = Field(
        default=120.0, gt=0, description="Cap on one request, headers and body: stops servers that trickle bytes."
    )
    max_redirects: int = Field(default=5, ge=0)
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    allow_private_addresses: bool = Field(
        default=False, description="Admit loopback and private-network hosts (tests, intranet mirrors)."
    )
    retry_failed: bool = Field(default=False, description="Fetch again the journaled failures that were transient.")
    user_agent: str = "culturebench/0.1 (+research dataset builder)"
    check_workers: int = Field(
        default=2, ge=1, description="Threads that decode and check images and write blobs, off the event loop."
    )
    opt_out: OptOutPolicy = Field(
        default_factory=OptOutPolicy, description="robots.txt, TDMRep and X-Robots-Tag (`collectors.optout`)."
    )

    @model_validator(mode="after")
    def _agent_name(self) -> HttpDownloadConfig:
        # Recorded as used: the name robots.txt and X-Robots-Tag address us by, from our User-Agent by default.
        if self.opt_out.agent_name is None:
            self.opt_out = self.opt_out.model_copy(update={"agent_name": product_token(self.user_agent)})
        return self

    def build(self) -> Callable[[Workspace], HttpFetcher]:
        return lambda ws: HttpFetcher(self, ws)


def limits_key(limits: ImageLimits) -> str:
    """Journal entries remember the limits they were checked under (see `DownloadJournal`)."""
    return fingerprint(limits)[:16]


def opt_out_key(policy: OptOutPolicy) -> str:
    """... and the opt-out policy: an ok row or a refusal decided under another policy is fetched again."""
    return fingerprint(policy)[:16]


def _utc_now() -> str:
    """The `retrieved_at` of a response: ISO 8601, UTC, to the second (`2026-05-01T10:00:00Z`)."""
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


# -- journal -----------------------------------------------------------------------------------------------------


class JournalRow(TypedDict, total=False):
    """A journaled FetchedUrl without its `url` (the entry names it). Total=False: a journal written before a column
    was added lacks it (the row is read as null there)."""

    status: str
    error: str | None
    detail: str | None
    sha256: str | None
    num_bytes: int | None
    width: int | None
    height: int | None
    format: str | None
    final_url: str | None
    http_status: int | None
    content_type: str | None
    retrieved_at: str | None
    attempts: int
    transient: bool | None


class JournalEntry(TypedDict):
    """A line of a journal file: a URL's result and the keys of the limits and opt-out policy it was decided under."""

    url: str
    limits: str
    row: JournalRow
    opt_out: NotRequired[str]  # absent: journaled before opt-outs were checked


def journal_row(row: FetchedUrl) -> JournalRow:
    """`row` as the journal keeps it: every column but `url`, in the same order."""
    return {
        "status": row["status"],
        "error": row["error"],
        "detail": row["detail"],
        "sha256": row["sha256"],
        "num_bytes": row["num_bytes"],
        "width": row["width"],
        "height": row["height"],
        "format": row["format"],
        "final_url": row["final_url"],
        "http_status": row["http_status"],
        "content_type": row["content_type"],
        "retrieved_at": row["retrieved_at"],
        "attempts": row["attempts"],
        "transient": row["transient"],
    }


class DownloadJournal:
    """Per-URL download results, appended as small atomic JSONL batch files under `<storage>/<prefix>/`.

    Each line is `{"url", "limits", "opt_out", "row"}`: the IMAGES row without `image_id` (a URL's result does not
    depend on which hit asked for it) and the keys of the image limits and the opt-out policy it was decided under.
    Files are named `<time_ns>-<writer>-<seq>.jsonl`: unique per writer, so two processes never clash, and sorted in
    write order, so the newest entry of a URL wins on load. A batch is written when `flush_every` results are
    pending or `flush_interval_s` has passed, and at the end; a crash loses at most the unwritten batch.

    One instance can serve many download calls (one per shard): `load` reads only the files it has not read yet
    and knows this instance's own records, written or not, without reading them back.

    Reuse under other image limits (the downloader decides, see `_plan`): an ok row's stored blob is checked
    again instead of fetched; a too_small/too_large/decompression_bomb failure is fetched again, since its bytes
    were not kept; other failures do not depend on the limits and are reused. Under another opt-out policy (or
    none recorded: journaled before opt-outs were checked), ok rows and `opted_out` refusals are fetched again;
    with `retry_failed`, so are refusals because robots.txt or tdmrep.json was unreachable under fail-closed.
    """

    def __init__(self, storage: Storage, prefix: str, flush_every: int = 64, flush_interval_s: float = 2.0) -> None:
        self.storage = storage
        self.prefix = prefix
        self.flush_every = flush_every
        self.flush_interval_s = flush_interval_s
        self._writer = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self._seq = 0
        self._pending: list[JournalEntry] = []
        self._last_flush = time.monotonic()
        self._lock = threading.Lock()
        self._entries: dict[str, JournalEntry] = {}
        self._read: set[str] = set()  # journal files already merged into _entries (own files included)

    @property
    def folder(self) -> str:
        return self.storage.path(self.prefix)

    def load(self) -> dict[str, JournalEntry]:
        """The newest entry of every journaled URL (a copy)."""
        for name in self.storage.listdir(self.folder):
            if not name.endswith(".jsonl") or name.startswith(".") or name in self._read:
                continue
            self._read.add(name)
            for line in self.storage.read_bytes(f"{self.folder}/{name}").splitlines():
                try:
                    entry: JournalEntry = json.loads(line)
                    self._entries[entry["url"]] = entry
                except (ValueError, KeyError, TypeError):
                    continue  # files are written atomically; a bad line can only come from outside: skip it
        return dict(self._entries)

    def record(self, url: str, row: JournalRow, limits: str, opt_out: str | None = None) -> None:
        entry: JournalEntry = {"url": url, "limits": limits, "row": row}
        if opt_out is not None:
            entry["opt_out"] = opt_out
        with self._lock:
            self._pending.append(entry)
            self._entries[url] = entry
            due = len(self._pending) >= self.flush_every
        if due:
            self.flush()

    def flush_if_due(self) -> None:
        if self._pending and time.monotonic() - self._last_flush >= self.flush_interval_s:
            self.flush()

    def flush(self) -> None:
        with self._lock:
            batch, self._pending = self._pending, []
            self._last_flush = time.monotonic()
            if not batch:
                return
            self._seq += 1
            name = f"{time.time_ns():020d}-{self._writer}-{self._seq:06d}.jsonl"
            self._read.add(name)  # already in _entries
        payload = "".join(json.dumps(e, ensure_ascii=False, separators=(",", ":")) + "\n" for e in batch)
        self.storage.write_bytes(f"{self.folder}/{name}", payload.encode())


# -- one URL -----------------------------------------------------------------------------------------------------


def _empty_row(url: str) -> FetchedUrl:
    """An IMAGES row without `image_id`."""
    return fetched_url(url, STATUS_OK, attempts=0, transient=False)


async def _sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)  # looked up when called, so a test's patch of asyncio.sleep applies


class _Failure(Exception):
    """One attempt's classified failure; `retry_after_s` is the server's Retry-After, when it sent one."""

    def __init__(self, error: str, detail: str, transient: bool = False, retry_after_s: float | None = None) -> None:
        super().__init__(f"{error}: {detail}")
        self.error = error
        self.detail = detail
        self.transient = transient
        self.retry_after_s = retry_after_s


@dataclass
class _Progress:
    total: int
    on_item: Callable[[int, int], None] | None
    done: int = 0

    def advance(self, n: int) -> None:
        self.done += n
        if self.on_item is not None and n:
            self.on_item(self.done, self.total)


@dataclass
class _Fetcher:
    """Everything one download call shares: session, limits, the check thread pool."""

    config: HttpDownloadConfig
    blobs: BlobStore
    session: aiohttp.ClientSession
    executor: concurrent.futures.Executor
    checker: _Checker
    policy: AddressPolicy
    global_slots: asyncio.Semaphore
    opt_out: OptOutChecker
    host_slots: dict[str, asyncio.Semaphore] = field(default_factory=dict)

    def _host_slot(self, url: URL) -> asyncio.Semaphore:
        key = f"{url.host}:{url.port}"
        slot = self.host_slots.get(key)
        if slot is None:
            slot = self.host_slots[key] = asyncio.Semaphore(self.config.per_host_concurrency)
        return slot

    async def _in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    async def fetch_url(self, url: str) -> FetchedUrl:
        """Fetch, retry, check and store one URL; always returns a row, never raises for a network failure."""
        row = _empty_row(url)
        retry = self.config.retry
        try:
            target = check_url(url, self.policy)
        except UrlRefused as exc:
            row.update({"status": STATUS_FAILED, "error": exc.error, "detail": exc.detail})
            return row
        # robots.txt and tdmrep.json, holding no slot: a refused URL is never requested (attempts 0).
        refusal = await self.opt_out.before_request(target)
        if refusal is not None:
            row.update({"status": STATUS_FAILED, "error": OPTED_OUT, "detail": refusal})
            return row
        count = RetryCount()

        async def attempt() -> bytes:
            # What the row says about the response is the last attempt's.
            row.update(
                {
                    "attempts": count.attempts,
                    "final_url": None,
                    "http_status": None,
                    "content_type": None,
                    "retrieved_at": None,
                }
            )
            return await self._request(target, row)

        def classify(exc: Exception) -> RetryVerdict | None:
            return RetryVerdict(exc.transient, exc.retry_after_s) if isinstance(exc, _Failure) else None

        try:
            # The wait holds no slot: other URLs use the connection meanwhile.
            body = await call_with_retries_async(attempt, classify, retry, sleep=_sleep, count=count)
        except GaveUp as gave_up:
            failure = gave_up.cause
            assert isinstance(failure, _Failure)  # classify knows no other
            detail = failure.detail
            if gave_up.too_long:  # waiting less than asked would only be refused again
                detail += f"; Retry-After {failure.retry_after_s:g} s > max_retry_after_s"
            elif failure.transient and gave_up.attempts > 1:
                detail += f" (after {gave_up.attempts} attempts)"
            row.update(
                {"status": STATUS_FAILED, "error": failure.error, "detail": detail, "transient": failure.transient}
            )
            return row
        row["num_bytes"] = len(body)
        try:
            sha, info = await self._in_thread(self.checker, body)
        except ImageRejected as exc:
            row.update({"status": STATUS_FAILED, "error": exc.error, "detail": exc.detail})
            return row
        row.update({"sha256": sha, "width": info[0], "height": info[1], "format": info[2]})
        return row

    async def _request(self, url: URL, row: FetchedUrl) -> bytes:
        """One attempt: follow redirects ourselves so that every hop passes the guard."""
        current = url
        for hop in range(self.config.max_redirects + 1):
            if hop:
                try:
                    current = check_url(current, self.policy)
                except UrlRefused as exc:
                    raise _Failure(exc.error, f"redirect hop {hop}: {exc.detail}") from None
            row["final_url"] = str(current)
            if hop and (refusal := await self.opt_out.before_request(current)) is not None:
                raise _Failure(OPTED_OUT, f"redirect hop {hop}: {refusal}")
            async with self._host_slot(current), self.global_slots:
                outcome = await self._one_request(current, row)
            if isinstance(outcome, bytes):
                return outcome
            current = outcome
        raise _Failure("too_many_redirects", f"more than {self.config.max_redirects} redirects from {url}")

    async def _one_request(self, url: URL, row: FetchedUrl) -> bytes | URL:
        """One HTTP request: the body, or the next URL when it is a redirect."""
        config = self.config
        try:
            async with asyncio.timeout(config.request_timeout_s):
                async with self.session.get(url, allow_redirects=False) as resp:
                    row["http_status"] = resp.status
                    row["content_type"] = resp.headers.get("Content-Type")
                    row["retrieved_at"] = _utc_now()
                    if resp.status in REDIRECT_CODES:
                        location = resp.headers.get("Location")
                        if not location:
                            raise _Failure(f"http_{resp.status}", f"HTTP {resp.status} redirect without Location")
                        try:
                            return url.join(URL(location))
                        except ValueError as exc:
                            raise _Failure("invalid_url", f"bad redirect Location {location!r}: {exc}") from None
                    if not 200 <= resp.status < 300:
                        raise _Failure(
                            f"http_{resp.status}",
                            f"HTTP {resp.status} {resp.reason or ''}".rstrip(),
                            transient=resp.status in TRANSIENT_HTTP_CODES,
                            retry_after_s=parse_retry_after(resp.headers.get("Retry-After")),
                        )
                    refusal = self.opt_out.after_response(resp.headers)
                    if refusal is not None:
                        resp.close()  # not a byte of the body is read
                        raise _Failure(OPTED_OUT, refusal)
                    return await self._read_body(resp)
        except _Failure:
            raise
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise _Failure("timeout", _timeout_detail(exc, config), transient=True) from None
        except aiohttp.ClientConnectorDNSError as exc:
            if isinstance(exc.os_error, BlockedAddressError):
                raise _Failure("blocked_address", str(exc.os_error)) from None
            raise _Failure("dns", f"cannot resolve {url.host}: {exc.os_error}") from None
        except aiohttp.ClientConnectorError as exc:
            raise _Failure("connect", f"cannot connect to {url.host}:{url.port}: {exc.os_error}") from None
        except aiohttp.InvalidURL as exc:
            raise _Failure("invalid_url", f"aiohttp refused the URL: {exc}") from None
        except aiohttp.ClientPayloadError as exc:
            raise _Failure("truncated", f"body ended early: {_short(exc)}") from None
        except aiohttp.ClientError as exc:
            # Server disconnects before a response, malformed status lines or headers: the exchange failed.
            raise _Failure("connect", f"{type(exc).__name__}: {_short(exc)}") from None

    async def _read_body(self, resp: aiohttp.ClientResponse) -> bytes:
        limit = self.config.limits.max_bytes
        declared = resp.content_length  # of the body as sent (compressed, if it is)
        if declared is not None and declared > limit:
            raise _Failure("too_large", f"Content-Length {declared} > max_bytes {limit}")
        encoding = _content_encoding(resp)
        try:
            if encoding is not None:
                return await self._inflate_capped(resp, encoding, limit)
            if declared is not None:
                # The parser never yields more than Content-Length bytes of an uncompressed body: one read.
                return await resp.content.readexactly(declared)
            return await self._stream_capped(resp, limit)
        except asyncio.IncompleteReadError as exc:
            raise _Failure(
                "truncated", f"received {len(exc.partial)} of {declared} bytes declared by Content-Length"
            ) from None
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError) as exc:
            # aiohttp raises these when the connection ends before Content-Length bytes or the last chunk.
            received = resp.content.total_bytes
            raise _Failure(
                "truncated", f"connection closed after {received} bytes{_of(declared)} ({type(exc).__name__})"
            ) from None

    @staticmethod
    async def _inflate_capped(resp: aiohttp.ClientResponse, encoding: str, limit: int) -> bytes:
        """A body the server compressed although we asked for identity: inflate it under the cap."""
        try:
            inflater = _Inflater(encoding, limit)
            async for chunk in resp.content.iter_chunked(_CHUNK):
                inflater.feed(chunk)
        except _Failure:
            resp.close()  # stop now: the connection is closed rather than drained
            raise
        return inflater.finish()

    @staticmethod
    async def _stream_capped(resp: aiohttp.ClientResponse, limit: int) -> bytes:
        """No Content-Length (chunked, or read to the end): count while streaming and stop at the cap."""
        chunks: list[bytes] = []
        size = 0
        async for chunk in resp.content.iter_chunked(_CHUNK):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                resp.close()  # stop now: the connection is closed rather than drained
                raise _Failure("too_large", f"body exceeded max_bytes {limit} while streaming")
        return b"".join(chunks)


def _content_encoding(resp: aiohttp.ClientResponse) -> str | None:
    """The body's Content-Encoding, lower case; None when it is sent as stored."""
    value = resp.headers.get("Content-Encoding", "").strip().lower()
    return None if value in ("", "identity") else value


class _Inflater:
    """Inflates a gzip or deflate body piece by piece, never producing more than `limit` + 1 bytes.

    zlib's `max_length` bounds each call's output, so a bomb is stopped after at most `limit` + 1 inflated bytes
    whatever its ratio. Over the cap, the ratio of inflated to consumed compressed bytes tells a bomb
    (`decompression_bomb`) from a large image (`too_large`). gzip may hold several members (RFC 1952); deflate is
    zlib-wrapped (RFC 1950) or, from some servers, raw, told apart by the first byte as aiohttp does.
    """

    def __init__(self, encoding: str, limit: int) -> None:
        if encoding in ("gzip", "x-gzip"):
            self._wbits: int | None = 16 + zlib.MAX_WBITS
        elif encoding == "deflate":
            self._wbits = None  # decided by the first byte
        else:
            # br, zstd, compress, or a list of stacked codings: refused rather than decoded by another library.
            raise _Failure("unsupported_encoding", f"Content-Encoding {encoding!r} (we asked for identity)")
        self.encoding = encoding
        self.limit = limit
        self._decoder: Any = None
        self._parts: list[bytes] = []
        self._size = 0  # inflated
        self._consumed = 0  # compressed bytes consumed so far
        self._started = False
        self._between = b""  # the start of the next gzip member, when a piece ended inside its magic

    def feed(self, data: bytes) -> None:
        while data:
            if self._decoder is None and self._started:
                if self._wbits is None:
                    return  # deflate holds one stream: bytes after its end are not part of the body
                data, self._between = self._between + data, b""
                if len(data) < 2:
                    self._between = data  # a member's magic split across pieces: wait for the next one
                    return
                if not data.startswith(b"\x1f\x8b"):
                    return  # padding after the last gzip member, not another member
            if self._decoder is None:
                wbits = self._wbits
                if wbits is None:
                    wbits = zlib.MAX_WBITS if data[0] & 0x0F == 8 else -zlib.MAX_WBITS
                self._decoder = zlib.decompressobj(wbits)
                self._started = True
            decoder = self._decoder
            try:
                out = decoder.decompress(data, self.limit - self._size + 1)
            except zlib.error as exc:
                raise _Failure("corrupt", f"Content-Encoding {self.encoding}: bad compressed data ({exc})") from None
            left = len(decoder.unconsumed_tail) + (len(decoder.unused_data) if decoder.eof else 0)
            self._consumed += len(data) - left
            self._size += len(out)
            if self._size > self.limit:
                raise self._over_limit()
            self._parts.append(out)
            # Under the cap, zlib consumed all its input; what is left is the next gzip member, if anything.
            data = decoder.unused_data if decoder.eof else b""
            if decoder.eof:
                self._decoder = None

    def finish(self) -> bytes:
        if self._decoder is not None:
            raise _Failure(
                "truncated", f"Content-Encoding {self.encoding}: the compressed stream ended early ({self._size} bytes)"
            )
        return b"".join(self._parts)

    def _over_limit(self) -> _Failure:
        ratio = self._size / max(1, self._consumed)
        where = f"{self.encoding} body inflates past max_bytes {self.limit} from {self._consumed} compressed bytes"
        if ratio >= BOMB_RATIO:
            return _Failure("decompression_bomb", f"{where} (over {int(ratio)}:1)")
        return _Failure("too_large", where)


class _Verdicts:
    """Image-check verdicts by (sha256, limits key), shared by every download call of this process.

    Identical bytes under identical limits always get the identical verdict, so an image served under many URLs
    (mirrors, CDNs, thumbnails reused across pages, one placeholder page for every missing image) is decoded once.
    Bounded, oldest first out.
    """

    def __init__(self, max_entries: int = 65_536) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple[str, str], tuple[int, int, str] | ImageRejected] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str]) -> tuple[int, int, str] | ImageRejected | None:
        with self._lock:
            return self._entries.get(key)

    def put(self, key: tuple[str, str], verdict: tuple[int, int, str] | ImageRejected) -> None:
        with self._lock:
            self._entries[key] = verdict
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)


_VERDICTS = _Verdicts()


@dataclass
class _Checker:
    """Decode-check then store; runs in the check thread pool (PIL and hashlib release the GIL)."""

    limits: ImageLimits
    blobs: BlobStore
    key: str = ""
    stored: set[str] = field(default_factory=set)  # blobs this call already put: skips the existence check

    def __post_init__(self) -> None:
        self.key = limits_key(self.limits)

    def __call__(self, data: bytes) -> tuple[str, tuple[int, int, str]]:
        sha = sha256_bytes(data)
        verdict = _VERDICTS.get((sha, self.key))
        if verdict is None:
            try:
                info = inspect_image(data, self.limits)
                verdict = (info.width, info.height, info.format)
            except ImageRejected as exc:
                verdict = exc
            _VERDICTS.put((sha, self.key), verdict)
        if isinstance(verdict, ImageRejected):
            raise ImageRejected(verdict.error, verdict.detail)
        if sha not in self.stored:
            self.blobs.put(data, digest=sha)
            self.stored.add(sha)
        return sha, verdict


def _recheck_blob(sha: str | None, limits: ImageLimits, blobs: BlobStore) -> tuple[int, int, str]:
    if sha is None:  # `_plan` rechecks only ok rows whose blob is stored
        raise OSError("no blob to check again")
    info = inspect_image(blobs.get(sha), limits)
    return info.width, info.height, info.format


def _timeout_detail(exc: BaseException, config: HttpDownloadConfig) -> str:
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return f"connect timed out after {config.connect_timeout_s:g} s"
    if isinstance(exc, aiohttp.ServerTimeoutError):
        return f"no bytes for {config.read_timeout_s:g} s (read timeout)"
    return f"request took longer than {config.request_timeout_s:g} s"


def _of(declared: int | None) -> str:
    return f" of {declared} declared by Content-Length" if declared is not None else ""


def _short(exc: BaseException, limit: int = 200) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- the stage ---------------------------------------------------------------------------------------------------


def _plan(
    entry: JournalEntry | None, key: str, config: HttpDownloadConfig, blobs: BlobStore, opt_key: str | None = None
) -> Literal["fetch", "reuse", "recheck"]:
    """What to do with a URL given its journal entry (see `DownloadJournal` for the rules)."""
    if entry is None:
        return "fetch"
    row = entry["row"]
    same_limits = entry.get("limits") == key
    if (row["status"] == STATUS_OK or row.get("error") == OPTED_OUT) and entry.get("opt_out") != opt_key:
        return "fetch"  # decided under another opt-out policy (or before there was one)
    if row.get("error") == OPTED_OUT and config.retry_failed and is_unreachable_refusal(row.get("detail")):
        return "fetch"  # refused because robots.txt/tdmrep.json could not be fetched: worth asking again
    if row["status"] == STATUS_OK:
        sha = row.get("sha256")
        if not sha or sha not in blobs:
            return "fetch"  # the blob store lost it
        return "reuse" if same_limits else "recheck"
    if row["error"] in NEVER_REUSED_ERRORS:
        return "fetch"
    if config.retry_failed and row.get("transient"):
        return "fetch"
    if row["error"] in LIMIT_DEPENDENT_ERRORS and not same_limits:
        return "fetch"
    return "reuse"


def _interleave_hosts(urls: list[str]) -> list[str]:
    """Round-robin over hosts, so a run of one host's URLs does not leave the other slots idle."""
    by_host: dict[str, list[str]] = defaultdict(list)
    for url in urls:
        try:
            host = URL(url).host or ""
        except (ValueError, TypeError):
            host = ""
        by_host[host].append(url)
    queues = list(by_host.values())
    ordered: list[str] = []
    for i in range(max((len(q) for q in queues), default=0)):
        ordered.extend(q[i] for q in queues if i < len(q))
    return ordered


async def download_hits_async(
    hits: Sequence[Mapping[str, object]],
    blobs: BlobStore,
    config: HttpDownloadConfig,
    journal: DownloadJournal | None = None,
    on_item: Callable[[int, int], None] | None = None,
    host_files: HostFileCache | None = None,
) -> pa.Table:
    """Download every hit (`image_id`, `url`); return IMAGES rows, one per hit, in input order.

    `host_files` caches robots.txt and tdmrep.json; pass the same one to every call of a run (one per call if not)."""
    hits_by_url: dict[str, int] = defaultdict(int)
    for hit in hits:
        hits_by_url[str_cell(hit, "url")] += 1  # identical URLs are fetched once
    progress = _Progress(total=len(hits), on_item=on_item)
    key = limits_key(config.limits)
    opt_key = opt_out_key(config.opt_out)
    results: dict[str, FetchedUrl] = {}
    to_fetch: list[str] = []
    to_recheck: list[tuple[str, FetchedUrl]] = []
    journaled = journal.load() if journal is not None else {}
    for url in hits_by_url:
        entry = journaled.get(url)
        action = _plan(entry, key, config, blobs, opt_key)
        if entry is None or action == "fetch":  # (no entry is always "fetch")
            to_fetch.append(url)
        elif action == "reuse":
            results[url] = {**_empty_row(url), **entry["row"], "url": url}  # a column added since: null
        else:
            to_recheck.append((url, {**_empty_row(url), **entry["row"]}))
    progress.advance(sum(hits_by_url[u] for u in results))

    def finish(url: str, row: FetchedUrl) -> None:
        results[url] = row
        if journal is not None and row["error"] not in NEVER_REUSED_ERRORS:
            journal.record(url, journal_row(row), key, opt_key)
        progress.advance(hits_by_url[url])

    with concurrent.futures.ThreadPoolExecutor(config.check_workers, thread_name_prefix="image-check") as pool:
        loop = asyncio.get_running_loop()

        async def recheck(url: str, old: FetchedUrl) -> None:
            row: FetchedUrl = {**old, "url": url}
            try:
                width, height, fmt = await loop.run_in_executor(
                    pool, _recheck_blob, old["sha256"], config.limits, blobs
                )
                row.update(
                    {
                        "status": STATUS_OK,
                        "error": None,
                        "detail": None,
                        "width": width,
                        "height": height,
                        "format": fmt,
                    }
                )
            except ImageRejected as exc:
                row.update({"status": STATUS_FAILED, "error": exc.error, "detail": exc.detail, "transient": False})
            except OSError:
                to_fetch.append(url)  # the stored blob is unreadable or corrupt: fetch the URL again
                return
            finish(url, row)

        await asyncio.gather(*(recheck(url, old) for url, old in to_recheck))
        if to_fetch:
            host_files = host_files if host_files is not None else HostFileCache()
            await _fetch_all(_interleave_hosts(to_fetch), blobs, config, pool, finish, journal, host_files)
    if journal is not None:
        journal.flush()
    rows = [images_row(str_cell(hit, "image_id"), results[str_cell(hit, "url")]) for hit in hits]
    return from_rows(rows, IMAGES)


async def _fetch_all(
    urls: list[str],
    blobs: BlobStore,
    config: HttpDownloadConfig,
    pool: concurrent.futures.Executor,
    finish: Callable[[str, FetchedUrl], None],
    journal: DownloadJournal | None,
    host_files: HostFileCache,
) -> None:
    policy = AddressPolicy(allow_private=config.allow_private_addresses)
    # Our semaphores do the limiting (they are released during retry sleeps); the connector's limits only
    # mirror them. sock_connect/sock_read, not `connect`, which would also count the wait for a pool slot.
    connector = aiohttp.TCPConnector(
        limit=config.concurrency,
        limit_per_host=config.per_host_concurrency,
        resolver=GuardedResolver(policy),
        ttl_dns_cache=60,
    )
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=config.connect_timeout_s, sock_read=config.read_timeout_s)
    # identity: an image is compressed already, and an uncompressed body is capped by its Content-Length alone.
    headers = {"User-Agent": config.user_agent, "Accept": "image/*,*/*;q=0.5", "Accept-Encoding": "identity"}

    def open_session(conn: aiohttp.BaseConnector, request_headers: dict[str, str]) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            connector=conn,
            timeout=timeout,
            headers=request_headers,
            cookie_jar=aiohttp.DummyCookieJar(),  # no state carried between unrelated hosts
            trust_env=False,  # an environment proxy would connect on our behalf, past the resolver's guard
            auto_decompress=False,  # a server may compress anyway: `_Inflater` does it under the body cap
        )

    # robots.txt and tdmrep.json come through a pool of their own, so waiting for them never holds a download slot
    # nor one of the image connector's connections. Unlimited: one origin's slow file must not hold up another's,
    # and there is at most one fetch per file and origin, for at most as many origins as the window has URLs.
    files_connector = aiohttp.TCPConnector(limit=0, resolver=GuardedResolver(policy))
    files_headers = {"User-Agent": config.user_agent, "Accept-Encoding": "identity"}
    async with open_session(connector, headers) as session, open_session(files_connector, files_headers) as files:
        opt_out = OptOutChecker(
            config.opt_out,
            config.opt_out.agent_name or product_token(config.user_agent),
            host_files,
            lambda url: fetch_host_file(files, url, policy, config.max_redirects, config.request_timeout_s),
        )
        fetcher = _Fetcher(
            config=config,
            blobs=blobs,
            session=session,
            executor=pool,
            checker=_Checker(config.limits, blobs),
            policy=policy,
            global_slots=asyncio.Semaphore(config.concurrency),
            opt_out=opt_out,
        )
        # A window of live tasks bounds memory for any input size; it is wide enough that sleeping retries and
        # URLs waiting for a busy host do not starve the global slots.
        window = asyncio.Semaphore(max(4 * config.concurrency, 256))
        tasks: set[asyncio.Task[None]] = set()

        async def one(url: str) -> None:
            try:
                finish(url, await fetcher.fetch_url(url))
            finally:
                window.release()

        flusher = asyncio.create_task(_flush_periodically(journal)) if journal is not None else None
        try:
            for url in urls:
                await window.acquire()
                task = asyncio.create_task(one(url))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            if tasks:
                await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            if flusher is not None:
                flusher.cancel()


async def _flush_periodically(journal: DownloadJournal) -> None:
    """Write a batch every `flush_interval_s` even while few results arrive (slow hosts, long backoffs)."""
    while True:
        await asyncio.sleep(min(1.0, journal.flush_interval_s))
        journal.flush_if_due()


def download_hits(
    hits: Sequence[Mapping[str, object]],
    blobs: BlobStore,
    config: HttpDownloadConfig,
    journal: DownloadJournal | None = None,
    on_item: Callable[[int, int], None] | None = None,
    host_files: HostFileCache | None = None,
) -> pa.Table:
    """Synchronous `download_hits_async`, callable from plain threads (Prefect's task workers) and from code
    that already runs inside an event loop (then a fresh loop runs in a helper thread)."""
    return _run_sync(lambda: download_hits_async(hits, blobs, config, journal, on_item, host_files))


def _run_sync(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    # This thread already runs a loop, which must not be blocked or re-entered: a fresh loop in a helper thread.
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="download-loop") as runner:
        return runner.submit(lambda: asyncio.run(make())).result()


class HttpFetcher:
    """The `http` fetcher: `download_hits` with the build's download journal."""

    def __init__(self, config: HttpDownloadConfig, ws: Workspace) -> None:
        self.config = config
        # Outside the stage folder: a new attempt (say `retry_failed`) still knows every URL already fetched.
        self.journal = DownloadJournal(ws.storage, "files/download_journal")
        # robots.txt and tdmrep.json, fetched once per origin for every shard of the run.
        self.host_files = HostFileCache()

    def fetch(self, hits: Sequence[Mapping[str, object]], blobs: BlobStore) -> pa.Table:
        return download_hits(hits, blobs, self.config, journal=self.journal, host_files=self.host_files)
