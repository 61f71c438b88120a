"""Classified retries and rate limits shared by every remote backend (downloader, DuckDuckGo, Gemini).

Only transient errors (429, 5xx, timeouts) are retried, with exponential backoff and jitter, honouring
Retry-After. One policy model and one limiter serve all three backends.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from pydantic import BaseModel, ConfigDict, Field

TRANSIENT_HTTP_CODES = frozenset({408, 425, 429, 500, 502, 503, 504})


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
