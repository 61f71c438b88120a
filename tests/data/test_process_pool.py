"""The worker-process pool (`data/process_pool.py`): a caller that stops reading early stops the feeding, so the
workers finish the item they hold and take no more (the build's dedup stops at its first failed batch); `run_apart`
runs one call in a worker while the caller goes on (the assembly's RQ3)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from data.process_pool import run_apart, run_in_processes


def test_a_caller_that_stops_early_stops_the_workers_taking_items(tmp_path: Path) -> None:
    done = tmp_path / "done"
    done.mkdir()

    def slow(item: int) -> int:
        time.sleep(0.3)
        (done / str(item)).touch()
        return item

    outcomes = run_in_processes(slow, list(range(20)), 2)
    first = next(outcomes)
    outcomes.close()
    time.sleep(1.5)  # long enough for a worker to run several more items, were it still fed
    ran = sorted(int(p.name) for p in done.iterdir())
    assert first[1] in ran and len(ran) <= 4  # the first, the one in the other worker's hands, at most one each more


def test_a_call_apart_runs_in_another_process_while_the_caller_goes_on(tmp_path: Path) -> None:
    started = tmp_path / "started"

    def work() -> int:
        started.touch()
        time.sleep(1.0)
        return os.getpid()

    begun = time.perf_counter()
    result = run_apart(work, "a test call")
    assert time.perf_counter() - begun < 0.5  # it returned at once
    deadline = time.monotonic() + 30
    while not started.exists():  # the worker started the call while this process waited for nothing
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert result() != os.getpid()


def test_a_call_apart_raises_its_error_in_the_caller() -> None:
    def broken() -> int:
        raise ValueError("no such concept")

    with pytest.raises(ValueError, match="no such concept"):
        run_apart(broken, "a failing call")()
