"""DuckDuckGo image search through `ddgs` (3XCM paper §3.2.1: top-10 DuckDuckGo images per query).

ddgs has no retry and reports every failure as one `DDGSException`: an empty answer and a block (DDG answers
403/202 when it throttles) both read "No results found.". So each attempt records the HTTP status of every request
the engine made, and a persistent empty answer is checked with a canary query that always has results: if the
canary is empty too, the engine is blocking us. Failures end as `SearchError(kind, detail)` with kind `no_results`,
`blocked`, `timeout` or `engine_error`, which `search_rows` turns into a row; a search never aborts the build.

Ranking note: `DDGS.images` re-ranks DDG's list (results whose title holds a query word first, ddgs'
SimpleFilterRanker), so `rank` is ddgs' order (1 = its first hit), which may differ from the order on
duckduckgo.com.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypedDict

from pydantic import Field, SecretStr, field_validator, model_validator

from collectors.search_types import SearchError, SearchHit, SearchQuery
from data.clients.concurrency import prefect_slot
from data.clients.retry import (
    GaveUp,
    RateLimiter,
    RetryPolicy,
    RetryVerdict,
    call_with_retries,
    parse_retry_after,
    shared_limiter,
)
from data.provenance import scrub
from data.reference import ReferencePack
from data.stage import BackendConfig, require

logger = logging.getLogger(__name__)

# How DDG (and Bing behind it) answer a client they throttle or refuse; any other non-200 is an engine error.
BLOCKING_HTTP_CODES = frozenset({202, 403, 418, 429})
Kind = Literal["ok", "empty", "blocked", "timeout", "engine_error"]
#: DuckDuckGo's image licence filter (ddgs `license_image`, DDG's `f=...,license:<value>`), as DDG names them.
LicenseFilter = Literal["Public", "Share", "ShareCommercially", "Modify", "ModifyCommercially"]


class DdgsSearchConfig(BackendConfig["DdgsSearcher"]):
    #: Its hits are web URLs: only the SSRF-guarded HTTP downloader may fetch them (`collectors.fetch`).
    web_hits: ClassVar[bool] = True

    backend: Literal["ddgs"] = "ddgs"
    max_results: int = Field(default=10, ge=1, description="Top-k per query (paper §3.2.1: top 10).")
    safesearch: Literal["on", "moderate", "off"] = "moderate"
    engine: Literal["duckduckgo", "bing", "auto"] = Field(
        default="duckduckgo", description="ddgs image backend; `auto` tries both in random order."
    )
    timeout_s: float = Field(default=10.0, gt=0, description="Per HTTP request.")
    proxy: SecretStr | None = Field(
        default=None, description="http/https/socks5 proxy URL; kept secret (may hold credentials). Or DDGS_PROXY."
    )
    requests_per_second: float = Field(
        default=0.5, gt=0, description="Searches per second across this process (each is ~2 HTTP requests)."
    )
    concurrency: int = Field(default=2, ge=1, description="Queries in flight at once in this process.")
    prefect_concurrency_limit: str | None = Field(
        default="duckduckgo",
        description="Prefect global concurrency limit held per request inside a Prefect run (all workers share it).",
    )
    retry: RetryPolicy = Field(default_factory=lambda: RetryPolicy(max_attempts=4, base_delay_s=2.0, max_delay_s=60.0))
    skip_identical_native_query: bool = Field(
        default=True,
        description="English-speaking countries get no 'nav' query: it would repeat the 'eng' one.",
    )
    canary_query: str = Field(
        default="dog", description="Always has results: if it is empty too, an empty answer means we are blocked."
    )
    canary_region: str = "us-en"
    canary_ttl_s: float = Field(default=300.0, ge=0, description="How long a canary verdict is reused.")
    license_filter: LicenseFilter | None = Field(
        default=None,
        description="DuckDuckGo's licence filter (ddgs `license_image`): Public, Share, ShareCommercially, Modify or "
        "ModifyCommercially; null: none (the paper's setting). Recorded on every hit (`license_filter`). Only the "
        "duckduckgo engine applies it (ddgs' bing backend ignores it). The canary query runs without it.",
    )

    @model_validator(mode="after")
    def _filter_needs_duckduckgo(self) -> DdgsSearchConfig:
        # ddgs 9.x's bing image backend drops `license_image` silently: its hits would be recorded as filtered.
        if self.license_filter is not None and self.engine != "duckduckgo":
            raise ValueError(
                f"license_filter needs engine: duckduckgo; ddgs' bing image backend ignores it (engine: {self.engine})"
            )
        return self

    @field_validator("proxy")
    @classmethod
    def _not_masked(cls, value: SecretStr | None) -> SecretStr | None:
        # A config that went through JSON (a deployment's parameters) carries the mask, not the proxy.
        if value is not None and set(value.get_secret_value()) == {"*"}:
            raise ValueError("proxy is a masked secret; set the DDGS_PROXY environment variable on the worker instead")
        return value

    def build(self) -> DdgsSearcher:
        return DdgsSearcher(self)

    def missing_input(self) -> tuple[str, ...]:
        """Nothing: a web search needs no folder."""
        return ()

    def with_default_root(self, root: str) -> DdgsSearchConfig:
        """This search: it reads no folder."""
        return self

    def url_publisher(self) -> Callable[[str], str]:
        """Web hits are published as the engine returned them."""
        return lambda url: url


@dataclass
class _Request:
    target: str  # host + path, never the query string
    status: int | None = None
    error: str | None = None
    retry_after_s: float | None = None


class DdgsImage(TypedDict, total=False):
    """One result of `DDGS.images`, as ddgs gives it: `image` is the image's URL, `url` the page it is on."""

    title: str
    image: str
    thumbnail: str
    url: str
    height: int | str
    width: int | str
    source: str


@dataclass
class _Attempt:
    kind: Kind
    detail: str
    results: list[DdgsImage] = field(default_factory=list)
    retry_after_s: float | None = None


class _NotAnswered(Exception):
    """An attempt without results, for the retry loop."""

    def __init__(self, attempt: _Attempt) -> None:
        super().__init__(attempt.detail)
        self.attempt = attempt


@dataclass
class _Canary:
    healthy: bool
    detail: str
    checked_at: float


# Per process: one canary verdict per engine set-up, so a burst of empty answers costs one probe.
_canary_cache: dict[tuple[str, str, str, str], _Canary] = {}
_canary_lock = threading.Lock()


def reset_canary_cache() -> None:
    with _canary_lock:
        _canary_cache.clear()


class DdgsSearcher:
    """The `Searcher` for DuckDuckGo images; thread-safe (a fresh `DDGS` client per attempt)."""

    def __init__(
        self,
        config: DdgsSearchConfig,
        limiter: RateLimiter | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ddgs = require("ddgs", "search")
        self._exceptions = require("ddgs.exceptions", "search")
        self.config = config
        self.name = f"ddgs:{config.engine}"
        self._limiter = limiter or shared_limiter("ddgs", config.requests_per_second)
        self._sleep = sleep
        self._clock = clock
        self._secrets = [config.proxy.get_secret_value()] if config.proxy else []

    def check(self, pack: ReferencePack) -> None:
        """Nothing to check: the engine is asked for the build's own queries."""

    def search(self, query: SearchQuery, max_results: int) -> list[SearchHit]:
        policy = self.config.retry
        attempts: list[_Attempt] = []

        def attempt() -> _Attempt:
            answer = self._attempt(query.query, query.region, max_results, self.config.license_filter)
            if answer.kind != "ok":
                attempts.append(answer)
                logger.info(
                    "ddgs %s attempt %d/%d: %s", query.query_id, len(attempts), policy.max_attempts, answer.kind
                )
                raise _NotAnswered(answer)
            return answer

        def classify(exc: Exception) -> RetryVerdict | None:
            # Every kind is tried again (a block may lift, an empty answer may be the engine's hiccup), with the
            # engine's Retry-After waited for at the policy's cap.
            return RetryVerdict(True, exc.attempt.retry_after_s) if isinstance(exc, _NotAnswered) else None

        try:
            answer = call_with_retries(attempt, classify, policy, sleep=self._sleep, too_long_fails=False)
            return _hits(answer.results, query.region, self.config.license_filter)[:max_results]
        except GaveUp:
            pass  # every attempt is in `attempts`
        tried = "; ".join(f"#{n} {a.detail}" for n, a in enumerate(attempts, start=1))
        summary = f"{len(attempts)} attempts ({self.name}, region {query.region}): {tried}"
        if any(a.kind == "blocked" for a in attempts):
            raise SearchError("blocked", summary)
        last = attempts[-1].kind
        if last != "empty":
            raise SearchError(last, summary)
        canary = self._canary()
        kind = "no_results" if canary.healthy else "blocked"
        raise SearchError(kind, f"{summary}; {canary.detail}")

    # -- one request to the engine ----------------------------------------------------------------------------

    def _attempt(self, text: str, region: str, max_results: int, license_filter: str | None = None) -> _Attempt:
        """One `DDGS.images` call under the Prefect slot and the rate limit, classified from what it saw."""
        exc_mod = self._exceptions
        with prefect_slot(self.config.prefect_concurrency_limit):
            self._limiter.acquire()
            client = self._ddgs.DDGS(
                proxy=self.config.proxy.get_secret_value() if self.config.proxy else None,
                timeout=self.config.timeout_s,
            )
            requests = _record_requests(client, self.config.engine)
            try:
                results = client.images(
                    text,
                    region=region,
                    safesearch=self.config.safesearch,
                    max_results=max_results,
                    backend=self.config.engine,
                    license_image=license_filter,
                )
            except exc_mod.TimeoutException as exc:
                return _Attempt("timeout", f"timed out after {self.config.timeout_s:g}s ({self._redact(exc)})")
            except exc_mod.DDGSException as exc:
                return self._classify_failure(exc, requests)
            except Exception as exc:  # ddgs catches engine errors itself; anything else must not abort the build
                return _Attempt("engine_error", f"{type(exc).__name__}: {self._redact(exc)}")
        if any(r.get("image") for r in results):
            return _Attempt("ok", "", results=results)
        return _Attempt("empty", "empty answer" + _http_note(requests))

    def _classify_failure(self, exc: Exception, requests: list[_Request]) -> _Attempt:
        blocked = [r for r in requests if r.status in BLOCKING_HTTP_CODES]
        if blocked:
            retry_after = max((r.retry_after_s for r in blocked if r.retry_after_s is not None), default=None)
            last = blocked[-1]
            return _Attempt("blocked", f"HTTP {last.status} from {last.target}", retry_after_s=retry_after)
        if any(r.error == "TimeoutException" for r in requests):
            return _Attempt("timeout", f"timed out after {self.config.timeout_s:g}s")
        message = self._redact(exc)
        failed = [r for r in requests if r.status is not None and r.status != 200]
        if failed:
            return _Attempt("engine_error", f"HTTP {failed[-1].status} from {failed[-1].target}")
        if "vqd" in message.lower():
            return _Attempt("engine_error", "no vqd token in DuckDuckGo's page")
        if message.strip() == "No results found.":
            return _Attempt("empty", "empty answer" + _http_note(requests))
        return _Attempt("engine_error", message[:300])

    # -- canary -----------------------------------------------------------------------------------------------

    def _canary(self) -> _Canary:
        """Whether the engine answers a query that always has results; one probe per TTL per process."""
        c = self.config
        key = (c.engine, c.safesearch, c.canary_query, c.canary_region)
        with _canary_lock:  # held while probing so that concurrent queries wait for one probe
            cached = _canary_cache.get(key)
            now = self._clock()
            if cached is not None and now - cached.checked_at <= c.canary_ttl_s:
                age = now - cached.checked_at
                return _Canary(cached.healthy, f"{cached.detail} ({age:.0f}s ago)", cached.checked_at)
            attempt = self._attempt(c.canary_query, c.canary_region, 1)
            healthy = attempt.kind == "ok"
            verdict = "has results" if healthy else f"failed too: {attempt.detail}"
            _canary_cache[key] = _Canary(healthy, f"canary {c.canary_query!r} {verdict}", now)
            return _canary_cache[key]

    def _redact(self, value: object) -> str:
        """Error text without the proxy or any user:password in a URL."""
        text = scrub(str(value), self._secrets, mask="<proxy>") or ""
        return re.sub(r"([a-z][a-z0-9+.-]*://)[^/@\s]+@", r"\1***@", text, flags=re.IGNORECASE)


def _record_requests(client: Any, engine: str) -> list[_Request]:  # a ddgs.DDGS
    """Wrap each engine's HTTP client so this attempt sees every status code (ddgs drops non-200 answers).

    Uses ddgs' engine cache (`_get_engines`, 9.x): the engines made here are the ones `images` reuses.
    Without it (another ddgs version) nothing is recorded and the canary alone tells empty from blocked.
    """
    log: list[_Request] = []
    try:
        engines = client._get_engines("images", engine)
    except Exception:  # private API; degrade to canary-only classification
        return log
    for instance in engines:
        http = getattr(instance, "http_client", None)
        if http is None or not callable(getattr(http, "request", None)):
            continue
        http.request = _recording(http.request, log)
    return log


def _recording(request: Callable[..., Any], log: list[_Request]) -> Callable[..., Any]:
    def wrapper(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        entry = _Request(target=re.sub(r"^[a-z]+://", "", str(url)).split("?", 1)[0])
        log.append(entry)
        try:
            response = request(method, url, *args, **kwargs)
        except Exception as exc:
            entry.error = type(exc).__name__
            raise
        entry.status = getattr(response, "status_code", None)
        headers = getattr(getattr(response, "_resp", None), "headers", None) or {}
        with contextlib.suppress(AttributeError):  # headers of an unexpected type: no Retry-After then
            entry.retry_after_s = parse_retry_after(headers.get("retry-after") or headers.get("Retry-After"))
        return response

    return wrapper


def _http_note(requests: list[_Request]) -> str:
    statuses = sorted({r.status for r in requests if r.status is not None})
    return f" (HTTP {', '.join(map(str, statuses))})" if statuses else ""


def _hits(results: list[DdgsImage], region: str, license_filter: str | None) -> list[SearchHit]:
    """ddgs image dicts (title, image, thumbnail, url, height, width, source) as hits: url is the image itself.
    Each records the region and licence filter it was searched with; DDG declares no licence (`unknown`)."""
    hits = []
    for r in results:
        if not r.get("image"):
            continue
        hits.append(
            SearchHit(
                url=r["image"],
                source_page=r.get("url") or None,
                title=r.get("title") or None,
                width=_int(r.get("width")),
                height=_int(r.get("height")),
                region=region,
                license_filter=license_filter,
            )
        )
    return hits


def _int(value: object) -> int | None:
    try:
        number = int(value)  # type: ignore[call-overload]  # any value: what int() refuses is caught below
    except (TypeError, ValueError):
        return None
    return number if 0 < number < 2**31 else None
