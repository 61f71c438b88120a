"""The one retry loop (data/clients/retry.py `call_with_retries`, `call_with_retries_async`): transient failures
are tried again under the policy with its backoff and the server's Retry-After; anything else, spent retries or a
wait beyond the cap end in `GaveUp` holding the last failure; an unknown exception passes through untouched."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from data.clients.retry import (
    GaveUp,
    RetryCount,
    RetryPolicy,
    RetryVerdict,
    call_with_retries,
    call_with_retries_async,
)


class Flaky(Exception):
    def __init__(self, transient: bool, retry_after_s: float | None = None) -> None:
        super().__init__(f"transient={transient}")
        self.verdict = RetryVerdict(transient, retry_after_s)


def classify(exc: Exception) -> RetryVerdict | None:
    return exc.verdict if isinstance(exc, Flaky) else None


def failing(failures: list[Exception], value: str = "ok") -> Callable[[], str]:
    """An attempt that raises each of `failures` in turn, then returns `value`."""
    left = list(failures)

    def attempt() -> str:
        if left:
            raise left.pop(0)
        return value

    return attempt


POLICY = RetryPolicy(max_attempts=3, base_delay_s=1.0, max_delay_s=4.0, max_retry_after_s=10.0)


def test_transient_failures_are_tried_again_with_the_servers_wait() -> None:
    waits: list[float] = []
    count = RetryCount()
    value = call_with_retries(
        failing([Flaky(True, 2.5), Flaky(True)]), classify, POLICY, sleep=waits.append, count=count
    )
    assert value == "ok" and count.attempts == 3 and count.failures == 2
    assert waits[0] == 2.5 and 0.0 <= waits[1] <= 2.0  # Retry-After first, then full-jitter backoff (base * 2)


def test_a_lasting_failure_gives_up_after_the_policys_attempts() -> None:
    waits: list[float] = []
    with pytest.raises(GaveUp) as gave_up:
        call_with_retries(failing([Flaky(True)] * 5), classify, POLICY, sleep=waits.append)
    assert gave_up.value.attempts == 3 and len(waits) == 2 and gave_up.value.verdict.transient


def test_a_failure_that_is_not_transient_gives_up_at_once() -> None:
    waits: list[float] = []
    with pytest.raises(GaveUp) as gave_up:
        call_with_retries(failing([Flaky(False)]), classify, POLICY, sleep=waits.append)
    assert gave_up.value.attempts == 1 and not waits and not gave_up.value.too_long


def test_a_wait_beyond_the_cap_gives_up_or_is_held_to_the_cap() -> None:
    with pytest.raises(GaveUp) as gave_up:
        call_with_retries(failing([Flaky(True, 60.0)]), classify, POLICY, sleep=lambda s: None)
    assert gave_up.value.too_long and gave_up.value.attempts == 1
    waits: list[float] = []
    assert call_with_retries(failing([Flaky(True, 60.0)]), classify, POLICY, sleep=waits.append, too_long_fails=False)
    assert waits == [10.0]


def test_an_unknown_exception_passes_through_untouched() -> None:
    with pytest.raises(KeyError):
        call_with_retries(failing([KeyError("x")]), classify, POLICY, sleep=lambda s: None)


def test_a_count_carries_over_the_calls_of_one_request() -> None:
    count = RetryCount()
    call_with_retries(failing([Flaky(True)]), classify, POLICY, sleep=lambda s: None, count=count)
    with pytest.raises(GaveUp) as gave_up:  # one failure left of the policy's two retries
        call_with_retries(failing([Flaky(True)] * 3), classify, POLICY, sleep=lambda s: None, count=count)
    assert gave_up.value.attempts == 4 and count.failures == 2


def test_the_async_loop_decides_as_the_sync_one() -> None:
    waits: list[float] = []
    left = [Flaky(True, 1.5), Flaky(False)]

    async def attempt() -> str:
        if left:
            raise left.pop(0)
        return "ok"

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    with pytest.raises(GaveUp) as gave_up:
        asyncio.run(call_with_retries_async(attempt, classify, POLICY, sleep=sleep))
    assert gave_up.value.attempts == 2 and waits == [1.5] and not gave_up.value.verdict.transient
