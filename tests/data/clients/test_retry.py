"""The shared retry policy, Retry-After parsing and the token-bucket limiter."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from data.clients.concurrency import prefect_slot
from data.clients.retry import RateLimiter, RetryPolicy, parse_retry_after, shared_limiter


def test_backoff_is_full_jitter_under_a_growing_capped_ceiling() -> None:
    policy = RetryPolicy(base_delay_s=0.5, max_delay_s=3.0)
    rng = random.Random(7)
    for attempt, ceiling in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 3.0), (9, 3.0)]:
        delays = [policy.delay(attempt, rng=rng) for _ in range(400)]
        assert all(0.0 <= d <= ceiling for d in delays)
        # Jitter spreads the delays over the whole window rather than clustering at the ceiling.
        assert min(delays) < 0.2 * ceiling and max(delays) > 0.8 * ceiling


def test_retry_after_wins_but_is_capped() -> None:
    policy = RetryPolicy(max_retry_after_s=10)
    assert policy.delay(1, retry_after_s=4) == 4
    assert policy.delay(1, retry_after_s=600) == 10
    assert policy.delay(1, retry_after_s=-3) == 0


def test_attempt_budget() -> None:
    policy = RetryPolicy(max_attempts=3)
    assert [policy.may_retry(n) for n in (1, 2, 3)] == [True, True, False]


def test_parse_retry_after_seconds_and_http_date() -> None:
    now = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after("120") == 120
    assert parse_retry_after(format_datetime(now + timedelta(seconds=30), usegmt=True), now=now) == 30
    assert parse_retry_after(format_datetime(now - timedelta(seconds=30), usegmt=True), now=now) == 0
    for bad in (None, "", "soon", "-5"):
        assert parse_retry_after(bad) is None


def test_rate_limiter_spaces_acquisitions_across_threads() -> None:
    limiter = RateLimiter(rate_per_s=20, burst=1)
    stamps: list[float] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(3):
            limiter.acquire()
            with lock:
                stamps.append(time.monotonic())

    threads = [threading.Thread(target=worker) for _ in range(4)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # 12 acquisitions at 20/s with a burst of 1 need at least 11 intervals of 50 ms.
    assert time.monotonic() - start >= 11 / 20 * 0.95
    assert len(stamps) == 12


def test_rate_limiter_async_and_unlimited() -> None:
    async def take(limiter: RateLimiter, n: int) -> float:
        start = time.monotonic()
        for _ in range(n):
            await limiter.acquire_async()
        return time.monotonic() - start

    assert asyncio.run(take(RateLimiter(rate_per_s=50, burst=2), 6)) >= 4 / 50 * 0.95
    assert asyncio.run(take(RateLimiter(rate_per_s=None), 1000)) < 1.0
    with pytest.raises(ValueError):
        RateLimiter(rate_per_s=0)


def test_shared_limiter_is_one_per_engine_and_rate() -> None:
    assert shared_limiter("test-engine", 1.0) is shared_limiter("test-engine", 1.0)
    assert shared_limiter("test-engine", 1.0) is not shared_limiter("test-engine", 2.0)


def test_prefect_slot_is_a_no_op_outside_a_run(monkeypatch: pytest.MonkeyPatch) -> None:
    import data.clients.concurrency

    def no_server(name: str) -> bool:
        raise AssertionError("outside a Prefect run the server must not be asked")

    monkeypatch.setattr(data.clients.concurrency, "_limit_exists", no_server)
    entered = False
    with prefect_slot("duckduckgo"):
        entered = True
    assert entered


def test_prefect_slot_holds_a_global_limit_slot_inside_a_run(prefect: object) -> None:
    from prefect import flow, get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate

    with get_client(sync_client=True) as client:
        client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name="test-engine-slot", limit=2))

    def active(name: str) -> int:
        with get_client(sync_client=True) as client:
            return client.read_global_concurrency_limit_by_name(name).active_slots

    @flow
    def hold() -> tuple[int, int]:
        with prefect_slot("test-engine-slot"):
            during = active("test-engine-slot")
        with prefect_slot("no-such-limit"):  # a missing limit is skipped, not an error
            pass
        return during, active("test-engine-slot")

    assert hold() == (1, 0)
