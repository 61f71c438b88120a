"""The worker-process pool (`data/process_pool.py`): a caller that stops reading early stops the feeding, so the
workers finish the item they hold and take no more (the build's dedup stops at its first failed batch)."""

from __future__ import annotations

import time
from pathlib import Path

from data.process_pool import run_in_processes


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
