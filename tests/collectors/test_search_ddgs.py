"""The DuckDuckGo image searcher: the REAL `DDGS().images` runs; only its network layer is faked.

Two fakes: at the engine (`DuckduckgoImages._get_vqd` / `.request`, as in the notes' snippet), and one level lower at
ddgs' `HttpClient.request`, so that the status codes DDG uses to throttle (403/202) go through ddgs' own code.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
from ddgs.engines.duckduckgo_images import DuckduckgoImages
from ddgs.exceptions import DDGSException, TimeoutException
from ddgs.http_client import HttpClient
from pydantic import TypeAdapter

from collectors import search_ddgs
from collectors.search import SearchConfig, SearchError, SearchHit, SearchQuery, search_rows
from collectors.search_ddgs import DdgsSearchConfig, DdgsSearcher
from data.clients.retry import RetryPolicy
from data.reference import default_pack

FAST_RETRY = RetryPolicy(max_attempts=3, base_delay_s=0.001, max_delay_s=0.002)


def results_for(query: str, n: int = 5) -> list[dict[str, Any]]:
    """DDG's i.js items; titles hold no query word, so ddgs' re-ranking keeps this order."""
    slug = "".join(ch for ch in query if ch.isalnum())
    return [
        {
            "title": f"picture {i}",
            "image": f"http://127.0.0.1:9/{slug}/img{i}.jpg",
            "thumbnail": f"http://127.0.0.1:9/{slug}/th{i}.jpg",
            "url": f"http://example.test/{slug}/page{i}",
            "height": 480 + i,
            "width": 640 + i,
            "source": "Bing",
        }
        for i in range(n)
    ]


def make_query(country: str = "Japan", concept: str = "train", concept_id: int = 1, lang: str = "eng") -> SearchQuery:
    return SearchQuery(
        concept_id=concept_id,
        concept=concept,
        country=country,
        query=f"{concept} {country}",
        query_lang=lang,
        language_code="en",
        region=default_pack().country_by_name()[country].ddg_region,
    )


def config(**overrides: Any) -> DdgsSearchConfig:
    base = {"retry": FAST_RETRY, "requests_per_second": 1000.0, "prefect_concurrency_limit": None}
    return DdgsSearchConfig(**{**base, **overrides})


@dataclass
class FakeEngine:
    """Answers DuckduckgoImages.request: `answer(params)` gives a JSON body, None (non-200) or raises."""

    answer: Callable[[dict[str, Any]], str | None]
    calls: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def queries(self, text: str) -> int:
        return sum(1 for c in self.calls if c["q"] == text)


@pytest.fixture(autouse=True)
def fresh_canary(tmp_path: Path) -> Iterator[None]:
    search_ddgs.reset_canary_cache()
    yield
    search_ddgs.reset_canary_cache()


@contextlib.contextmanager
def fake_engine(answer: Callable[[dict[str, Any]], str | None]) -> Iterator[FakeEngine]:
    fake = FakeEngine(answer)

    def request(engine: DuckduckgoImages, method: str, url: str, params: dict[str, Any], **kwargs: Any) -> str | None:
        with fake.lock:
            fake.calls.append(dict(params))
        return fake.answer(params)

    with (
        mock.patch.object(DuckduckgoImages, "_get_vqd", return_value="fake-vqd"),
        mock.patch.object(DuckduckgoImages, "request", new=request),
    ):
        yield fake


def body(items: list[dict[str, Any]]) -> str:
    return json.dumps({"results": items})


@dataclass
class FakeResponse:
    status_code: int
    content: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return self.content.decode()

    @property
    def _resp(self) -> SimpleNamespace:  # ddgs' Response keeps primp's response here, headers and all
        return SimpleNamespace(headers=self.headers)


@contextlib.contextmanager
def fake_http(answer: Callable[[str, str, dict[str, Any]], FakeResponse]) -> Iterator[list[str]]:
    """Fakes ddgs' HttpClient.request: the real engine code (vqd extraction, status handling) runs on top."""
    seen: list[str] = []

    def request(client: HttpClient, method: str, url: str, params: dict[str, Any] | None = None, **kw: Any) -> Any:
        seen.append(f"{url} q={(params or {}).get('q')}")
        return answer(method, url, params or {})

    with mock.patch.object(HttpClient, "request", new=request):
        yield seen


# -- results and parameters ---------------------------------------------------------------------------------------


def test_results_are_mapped_to_hits_and_the_region_is_sent(tmp_path: Path) -> None:
    query = make_query("Japan", "train")
    with fake_engine(lambda params: body(results_for(params["q"]))) as fake:
        hits = DdgsSearcher(config(safesearch="off")).search(query, 3)

    expected = results_for(query.query)[:3]
    assert hits == [
        SearchHit(
            url=r["image"], source_page=r["url"], title=r["title"], width=r["width"], height=r["height"], region="jp-jp"
        )
        for r in expected
    ]
    assert len(fake.calls) == 1
    sent = fake.calls[0]
    assert sent["q"] == "train Japan" and sent["l"] == "jp-jp" == query.region
    assert sent["vqd"] == "fake-vqd" and sent["p"] == "-1"  # safesearch off


def test_results_without_image_url_are_dropped_and_sizes_checked(tmp_path: Path) -> None:
    items = results_for("x", 3)
    items[0]["image"] = ""
    items[1]["width"], items[1]["height"] = "not a number", None
    with fake_engine(lambda params: body(items)):
        hits = DdgsSearcher(config()).search(make_query(), 10)
    assert [h.url for h in hits] == [items[1]["image"], items[2]["image"]]
    assert hits[0].width is None and hits[0].height is None and hits[1].width == items[2]["width"]


# -- retries and failure classes ----------------------------------------------------------------------------------


def test_an_empty_answer_is_retried_with_backoff_then_succeeds(tmp_path: Path) -> None:
    answers = iter([body([]), body(results_for("a"))])
    sleeps: list[float] = []
    with fake_engine(lambda params: next(answers)) as fake:
        hits = DdgsSearcher(config(), sleep=sleeps.append).search(make_query(), 10)
    assert len(hits) == 5 and len(fake.calls) == 2
    assert len(sleeps) == 1 and 0 <= sleeps[0] <= FAST_RETRY.base_delay_s  # full-jitter backoff after attempt 1


def test_persistent_empty_answer_with_a_healthy_canary_is_no_results(tmp_path: Path) -> None:
    def answer(params: dict[str, Any]) -> str:
        return body(results_for("dog")) if params["q"] == "dog" else body([])

    searcher = DdgsSearcher(config(), sleep=lambda s: None)
    with fake_engine(answer) as fake:
        with pytest.raises(SearchError) as first:
            searcher.search(make_query("Japan", "train"), 10)
        with pytest.raises(SearchError) as second:
            searcher.search(make_query("Kenya", "food", 2), 10)
    assert first.value.kind == "no_results" == second.value.kind
    assert first.value.detail.startswith("3 attempts") and "#3 empty answer" in first.value.detail
    assert "canary 'dog' has results" in first.value.detail
    assert fake.queries("train Japan") == 3 and fake.queries("food Kenya") == 3
    # The canary ran once (with the canary region) and its verdict served the second query too.
    assert fake.queries("dog") == 1 and [c["l"] for c in fake.calls if c["q"] == "dog"] == ["us-en"]
    assert "ago" in second.value.detail


def test_canary_verdict_expires_after_its_ttl(tmp_path: Path) -> None:
    now = [1000.0]
    searcher = DdgsSearcher(config(canary_ttl_s=60), sleep=lambda s: None, clock=lambda: now[0])
    with fake_engine(lambda params: body(results_for("dog")) if params["q"] == "dog" else None) as fake:
        for step in (0, 30, 61):  # within the TTL, then past it
            now[0] += step
            with pytest.raises(SearchError):
                searcher.search(make_query(), 10)
    assert fake.queries("dog") == 2


def test_persistent_empty_answer_with_an_empty_canary_is_blocked(tmp_path: Path) -> None:
    # None: what the engine returns for a non-200 answer, DDG's way of throttling.
    with fake_engine(lambda params: None) as fake, pytest.raises(SearchError) as caught:
        DdgsSearcher(config(), sleep=lambda s: None).search(make_query(), 10)
    assert caught.value.kind == "blocked"
    assert "canary 'dog' failed too: empty answer" in caught.value.detail
    assert fake.queries("dog") == 1


@pytest.mark.parametrize("status", [403, 202])
def test_a_throttling_status_is_blocked_and_honours_retry_after(status: int, tmp_path: Path) -> None:
    def answer(method: str, url: str, params: dict[str, Any]) -> FakeResponse:
        if url == "https://duckduckgo.com":
            return FakeResponse(200, b'<script>vqd="4-123";</script>')
        return FakeResponse(status, b"", headers={"retry-after": "7"})

    sleeps: list[float] = []
    with fake_http(answer) as seen, pytest.raises(SearchError) as caught:
        DdgsSearcher(config(), sleep=sleeps.append).search(make_query(), 10)
    assert caught.value.kind == "blocked"
    assert f"#3 HTTP {status} from duckduckgo.com/i.js" in caught.value.detail
    assert sleeps == [7.0, 7.0]  # the server's Retry-After, not the tiny test backoff
    assert not any("q=dog" in s for s in seen)  # the status is proof enough: no canary


def test_a_page_without_vqd_token_is_an_engine_error(tmp_path: Path) -> None:
    no_token = FakeResponse(200, b"<html>no token here</html>")
    with fake_http(lambda method, url, params: no_token) as seen, pytest.raises(SearchError) as caught:
        DdgsSearcher(config(), sleep=lambda s: None).search(make_query(), 10)
    assert caught.value.kind == "engine_error" and "no vqd token" in caught.value.detail
    assert len([s for s in seen if s.startswith("https://duckduckgo.com ")]) == 3  # every attempt tried again


def test_a_server_error_status_is_an_engine_error(tmp_path: Path) -> None:
    def answer(method: str, url: str, params: dict[str, Any]) -> FakeResponse:
        return FakeResponse(200, b'vqd="1-2"') if url == "https://duckduckgo.com" else FakeResponse(502)

    with fake_http(answer), pytest.raises(SearchError) as caught:
        DdgsSearcher(config(), sleep=lambda s: None).search(make_query(), 10)
    assert caught.value.kind == "engine_error" and "HTTP 502 from duckduckgo.com/i.js" in caught.value.detail


def test_a_timeout_is_retried_then_reported_as_timeout(tmp_path: Path) -> None:
    def answer(params: dict[str, Any]) -> str:
        raise TimeoutException("operation timed out")

    with fake_engine(answer) as fake, pytest.raises(SearchError) as caught:
        DdgsSearcher(config(timeout_s=2.5), sleep=lambda s: None).search(make_query(), 10)
    assert caught.value.kind == "timeout" and "timed out after 2.5s" in caught.value.detail
    assert len(fake.calls) == 3 and caught.value.detail.startswith("3 attempts")


def test_a_block_seen_once_makes_the_failure_blocked(tmp_path: Path) -> None:
    statuses = iter([403, 200, 200])

    def answer(method: str, url: str, params: dict[str, Any]) -> FakeResponse:
        if url == "https://duckduckgo.com":
            return FakeResponse(200, b'vqd="1-2"')
        return FakeResponse(next(statuses), body([]).encode())

    with fake_http(answer) as seen, pytest.raises(SearchError) as caught:
        DdgsSearcher(config(), sleep=lambda s: None).search(make_query(), 10)
    assert caught.value.kind == "blocked" and "#1 HTTP 403" in caught.value.detail
    assert "#2 empty answer (HTTP 200)" in caught.value.detail
    assert not any("q=dog" in s for s in seen)


def test_proxy_credentials_never_reach_the_detail_or_the_config_dump(tmp_path: Path) -> None:
    proxy = "http://alice:s3cret@proxy.test:3128"

    def answer(params: dict[str, Any]) -> str:
        raise DDGSException(f"ProxyError: cannot connect through {proxy}")

    cfg = config(proxy=proxy)
    with fake_engine(answer), pytest.raises(SearchError) as caught:
        DdgsSearcher(cfg, sleep=lambda s: None).search(make_query(), 10)
    assert caught.value.kind == "engine_error" and "ProxyError" in caught.value.detail
    assert "s3cret" not in str(caught.value) and "alice" not in str(caught.value)
    assert "s3cret" not in cfg.model_dump_json() and "s3cret" not in repr(cfg)
    with pytest.raises(ValueError, match="DDGS_PROXY"):
        DdgsSearchConfig.model_validate_json(cfg.model_dump_json())  # a masked proxy is refused, not used


# -- rate limit and concurrency -----------------------------------------------------------------------------------


class RecordingLimiter:
    def __init__(self, events: list[str]) -> None:
        self.events = events

    def acquire(self) -> None:
        self.events.append("acquire")


def test_every_attempt_and_the_canary_wait_for_the_rate_limiter(tmp_path: Path) -> None:
    events: list[str] = []

    def answer(params: dict[str, Any]) -> str:
        events.append(f"request {params['q']}")
        return body([])

    searcher = DdgsSearcher(config(), limiter=RecordingLimiter(events), sleep=lambda s: None)  # type: ignore[arg-type]
    with fake_engine(answer), pytest.raises(SearchError):
        searcher.search(make_query(), 10)
    assert events == ["acquire", "request train Japan"] * 3 + ["acquire", "request dog"]


def test_the_shared_limiter_spaces_searches(tmp_path: Path) -> None:
    rate = 25.0  # searches per second; a rate no other test uses, so this bucket starts full
    searcher = DdgsSearcher(config(requests_per_second=rate))
    stamps: list[float] = []

    def answer(params: dict[str, Any]) -> str:
        stamps.append(time.monotonic())
        return body(results_for(params["q"]))

    with fake_engine(answer):
        for i in range(6):
            searcher.search(make_query(concept_id=i), 10)
    # A bucket of one token: the 2nd..6th searches each waited ~1/rate (lower bound only; no upper bound). Counted
    # from the 2nd: the first request's connection setup delays its arrival, and on a slow machine by more than
    # the slack of the bound.
    assert stamps[-1] - stamps[1] >= 4 / rate * 0.9


def test_search_rows_concurrent_keeps_input_order_and_records_failures(tmp_path: Path) -> None:
    countries = ["Japan", "Kenya", "Spain", "USA"]
    queries = [make_query(c, f"thing{i}", i) for c in countries for i in range(3)]
    failing = {"thing1 Kenya", "thing2 USA"}
    rng = random.Random(0)

    def answer(params: dict[str, Any]) -> str:
        time.sleep(rng.uniform(0, 0.01))  # scramble the finishing order
        if params["q"] in failing:
            raise RuntimeError("engine exploded")
        return body(results_for(params["q"], 2))

    searcher = DdgsSearcher(config(), sleep=lambda s: None)
    with fake_engine(answer):
        parallel = search_rows(searcher, queries, 2, concurrency=4)
        sequential = search_rows(searcher, queries, 2)
    assert parallel.equals(sequential)
    rows = parallel.to_pylist()
    assert [(r["query"], r["rank"]) for r in rows] == [  # 1-based: rank 1 is ddgs' first hit
        (q.query, rank) for q in queries for rank in ((None,) if q.query in failing else (1, 2))
    ]
    failed = [r for r in rows if r["status"] == "failed"]
    assert {r["query"] for r in failed} == failing
    assert {r["error"] for r in failed} == {"engine_error"} and all("engine exploded" in r["detail"] for r in failed)
    assert {r["searcher"] for r in rows} == {"ddgs:duckduckgo"}


def test_search_rows_threads_see_the_callers_context(tmp_path: Path) -> None:
    """Prefect's run context is a context variable; pool threads must see it for `prefect_slot` to apply."""
    run = contextvars.ContextVar("run", default=None)

    class ContextSearcher:
        name = "context"

        def search(self, query: SearchQuery, max_results: int) -> list[SearchHit]:
            return [SearchHit(url=f"http://x.test/{run.get()}/{threading.current_thread().name}")]

    token = run.set("flow-run-1")
    try:
        rows = search_rows(ContextSearcher(), [make_query(concept_id=i) for i in range(4)], 1, concurrency=2)
    finally:
        run.reset(token)
    urls = rows["url"].to_pylist()
    assert all(u.startswith("http://x.test/flow-run-1/search") for u in urls)  # ran in the pool, saw the context


def test_search_config_union_builds_the_ddgs_searcher(tmp_path: Path) -> None:
    adapter = TypeAdapter(SearchConfig)
    cfg = adapter.validate_python({"backend": "ddgs", "engine": "bing"})
    assert isinstance(cfg, DdgsSearchConfig) and cfg.max_results == 10 and cfg.concurrency == 2
    searcher = cfg.build()
    assert isinstance(searcher, DdgsSearcher) and searcher.name == "ddgs:bing"
    assert adapter.validate_python({"backend": "local", "root": str(tmp_path)}).concurrency == 1
    with pytest.raises(ValueError, match="expected tags: 'local', 'ddgs'"):  # the union is the list of backends
        adapter.validate_python({"backend": "google"})
    with pytest.raises(ValueError):
        adapter.validate_python({"backend": "ddgs", "engine": "google"})
