"""Classified retries and rate limits shared by every remote backend (the downloader, DuckDuckGo, Gemini and the
OpenAI-compatible clients, the OpenAI VLM, Label Studio).

Only transient errors (429, 5xx, timeouts) are retried, with exponential backoff and jitter, honouring
Retry-After. One policy model, one retry loop (`call_with_retries`, and `call_with_retries_async` for coroutines)
and one limiter serve them all; each backend says only what its failures mean (`RetryVerdict`).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import NamedTuple, TypeVar

from pydantic import BaseModel, ConfigDict, Field

TRANSIENT_HTTP_CODES = frozenset({408, 425, 429, 500, 502, 503, 504})
T = TypeVar("T")


class RetryPolicy(BaseModel):
    """How often and how long to retry a transient failure."""

    model_config = ConfigDict(extra="forbid")

    max_attempts: int = Field(default=4, ge=1, description="Attempts in all, the first one included.")
    base_delay_s: float = Field(default=0.5, ge=0, description="Backoff before the 2nd attempt; doubles after.")
    max_delay_s: float = Field(default=30.0, ge=0, description="Cap on one backoff delay.")
    max_retry_after_s: float = Field(
        default=120.0, ge=0, description="Cap on a server's Retry-After; a longer wait is not worth holding a slot."
    )

    def delay(self, failed_attempt: int, retry_after_s: float | None = None, rng: random.Random | None = None) -> float:
        """Seconds to wait after the `failed_attempt`-th attempt (1-based) failed.

        A server's Retry-After wins (capped). Otherwise "full jitter" exponential backoff: uniform in
        [0, min(cap, base * 2**(n-1))], which spreads retries of many clients better than a fixed factor.
        """
        if retry_after_s is not None:
            return min(max(retry_after_s, 0.0), self.max_retry_after_s)
        ceiling = min(self.max_delay_s, self.base_delay_s * 2 ** (failed_attempt - 1))
        return (rng or random).uniform(0.0, ceiling)

    def may_retry(self, failed_attempt: int) -> bool:
        return failed_attempt < self.max_attempts


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Retry-After as seconds: either delta-seconds or an HTTP date (RFC 9110 §10.2.3); None when absent or bad."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


class RateLimiter:
    """A token bucket: at most `rate_per_s` acquisitions per second on average, bursts up to `burst`.

    Thread-safe for sync callers; `acquire_async` waits without blocking the event loop. `rate_per_s=None`
    means unlimited.
    """

    def __init__(self, rate_per_s: float | None, burst: int = 1) -> None:
        if rate_per_s is not None and rate_per_s <= 0:
            raise ValueError("rate_per_s must be positive or None")
        self.rate = rate_per_s
        self.burst = max(1, burst)
        self._tokens = float(self.burst)
        self._stamp = time.monotonic()
        self._lock = threading.Lock()

    def _reserve(self) -> float:
        """Take a token; return how long the caller must wait before using it."""
        if self.rate is None:
            return 0.0
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
            self._stamp = now
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.rate

    def acquire(self) -> None:
        wait = self._reserve()
        if wait > 0:
            time.sleep(wait)

    async def acquire_async(self) -> None:
        wait = self._reserve()
        if wait > 0:
            await asyncio.sleep(wait)


_shared: dict[str, RateLimiter] = {}
_shared_lock = threading.Lock()


def shared_limiter(name: str, rate_per_s: float | None, burst: int = 1) -> RateLimiter:
    """One limiter per (name, rate, burst) in this process, so every caller of one engine shares its budget."""
    key = f"{name}:{rate_per_s}:{burst}"
    with _shared_lock:
        if key not in _shared:
            _shared[key] = RateLimiter(rate_per_s, burst)
        return _shared[key]


# -- the one retry loop ------------------------------------------------------------------------------------------


class RetryVerdict(NamedTuple):
    """What a failed attempt means for the next one: whether it may succeed, and when the server asked to wait."""

    transient: bool
    retry_after_s: float | None = None


@dataclass
class RetryCount:
    """Attempts and transient failures of one logical request, kept across calls (Gemini's re-asks share one)."""

    attempts: int = 0
    failures: int = 0


class GaveUp(Exception):
    """A retried call's last failure, `cause`, once no attempt is left: it was not transient, the retries are
    spent, or (`too_long`) the server asked to wait longer than the policy's `max_retry_after_s`."""

    def __init__(self, cause: Exception, verdict: RetryVerdict, count: RetryCount, too_long: bool) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.verdict = verdict
        self.attempts = count.attempts
        self.too_long = too_long


Classify = Callable[[Exception], "RetryVerdict | None"]
OnRetry = Callable[[Exception, int, float], None]  # (failure, retry number from 1, seconds to wait)


@dataclass
class _Loop:
    """The decision both loops share: after a failure, how long to wait, or give up."""

    policy: RetryPolicy
    classify: Classify
    count: RetryCount
    too_long_fails: bool
    on_retry: OnRetry | None

    def after(self, exc: Exception) -> float:
        verdict = self.classify(exc)
        if verdict is None:
            raise exc  # not a failure this loop knows: the caller's to handle
        too_long = (
            self.too_long_fails
            and verdict.retry_after_s is not None
            and verdict.retry_after_s > self.policy.max_retry_after_s
        )
        if not verdict.transient or too_long or not self.policy.may_retry(self.count.failures + 1):
            raise GaveUp(exc, verdict, self.count, too_long) from None
        self.count.failures += 1
        delay = self.policy.delay(self.count.failures, verdict.retry_after_s)
        if self.on_retry is not None:
            self.on_retry(exc, self.count.failures, delay)
        return delay


def call_with_retries(
    attempt: Callable[[], T],
    classify: Classify,
    policy: RetryPolicy,
    *,
    sleep: Callable[[float], None] = time.sleep,
    count: RetryCount | None = None,
    too_long_fails: bool = True,
    on_retry: OnRetry | None = None,
) -> T:
    """`attempt()`, again after each transient failure while `policy` allows, with its backoff and the server's
    Retry-After (beyond `max_retry_after_s`: given up at once when `too_long_fails`, else waited for at the cap).
    `classify` says what a failure means (None: not ours, raised as it is); the last failure is raised as `GaveUp`.
    `count` (optional) keeps the attempts and failures across calls of one logical request."""
    loop = _Loop(policy, classify, count if count is not None else RetryCount(), too_long_fails, on_retry)
    while True:
        loop.count.attempts += 1
        try:
            return attempt()
        except Exception as exc:  # classified by the caller's rule; an unknown one is raised again
            sleep(loop.after(exc))


async def call_with_retries_async(
    attempt: Callable[[], Awaitable[T]],
    classify: Classify,
    policy: RetryPolicy,
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    count: RetryCount | None = None,
    too_long_fails: bool = True,
    on_retry: OnRetry | None = None,
) -> T:
    """`call_with_retries` for a coroutine: the wait holds nothing (other requests run meanwhile)."""
    loop = _Loop(policy, classify, count if count is not None else RetryCount(), too_long_fails, on_retry)
    while True:
        loop.count.attempts += 1
        try:
            return await attempt()
        except Exception as exc:  # as above
            await sleep(loop.after(exc))
