"""The CPU accounting of perf/download_vs_img2dataset.py and the CPU-bound mode of tests/support/fake_image_host.py."""

from __future__ import annotations

import os
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # perf/ is not an installed package

from perf import download_vs_img2dataset as bench  # noqa: E402
from tests.support.fake_image_host import FakeImageHost, FakeImageHostProcess, burn_cpu  # noqa: E402

BUSY = "import time\nend = time.process_time() + {s}\nwhile time.process_time() < end:\n    pass\n"


def spawner(grandchildren: int, busy_s: float) -> list[str]:
    """A python child that runs `grandchildren` python grandchildren one after the other, each busy for `busy_s`."""
    code = (
        "import subprocess, sys\n"
        f"for _ in range({grandchildren}):\n"
        f"    subprocess.run([sys.executable, '-c', {BUSY.format(s=busy_s)!r}], check=True)\n"
    )
    return [sys.executable, "-c", code]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("grandchildren", "busy_s"),
    [(1, 0.3), (6, 0.05)],  # one long grandchild; short ones, each about as long as a few polls
)
def test_measure_counts_the_cpu_of_grandchildren(tmp_path: Path, grandchildren: int, busy_s: float) -> None:
    m = bench.measure(spawner(grandchildren, busy_s), env=dict(os.environ), log=tmp_path / "log", cwd=tmp_path)
    assert m.returncode == 0
    assert m.cpu_s >= 0.2
    assert m.wall_s >= 0.2  # the busy loops run one after the other
    assert m.peak_rss > 0
    # The polled cross-check sees the same work; it can only fall short (by what ran after the last poll).
    assert 0.05 <= m.cpu_polled_s <= m.cpu_s + 0.05


def test_measure_counts_cpu_not_waiting(tmp_path: Path) -> None:
    m = bench.measure(
        [sys.executable, "-c", "import time; time.sleep(0.5)"], env=dict(os.environ), log=tmp_path / "log"
    )
    assert m.returncode == 0
    assert m.wall_s >= 0.5
    assert m.cpu_s < 0.3


def test_measure_reports_the_exit_code(tmp_path: Path) -> None:
    m = bench.measure([sys.executable, "-c", "raise SystemExit(3)"], env=dict(os.environ), log=tmp_path / "log")
    assert m.returncode == 3


def test_burn_cpu_takes_at_least_the_cpu_asked() -> None:
    start = time.thread_time()
    burn_cpu(50)
    assert time.thread_time() - start >= 0.05
    start = time.thread_time()
    burn_cpu(0)
    assert time.thread_time() - start < 0.01


def fetch_together(urls: list[str]) -> float:
    """Seconds for all of `urls` to be fetched, all at once."""

    def get(url: str) -> bytes:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.read()

    start = time.perf_counter()
    with ThreadPoolExecutor(len(urls)) as pool:
        bodies = list(pool.map(get, urls))
    assert all(body.startswith(b"\xff\xd8") for body in bodies)
    return time.perf_counter() - start


def test_cpu_host_process_burns_cpu_per_request_and_serves_one_at_a_time() -> None:
    with FakeImageHostProcess(corpus_size=2, latency_s=0.0, cpu_ms_per_request=100) as server:
        assert server.pid is not None
        host = psutil.Process(server.pid)
        fetch_together([server.url("/img/0/warm")])  # first-request costs out of the way
        before = host.cpu_times()
        wall = fetch_together([server.url("/img/0/a"), server.url("/img/1/b")])
        after = host.cpu_times()
    host_cpu = (after.user + after.system) - (before.user + before.system)
    # 100 ms per request, in the host; cpu_times are in clock ticks (0.01 s), so their float sums carry rounding
    # (CI saw 0.18999999999999995 for 0.19).
    assert host_cpu >= 0.19 - 1e-9
    assert wall >= 0.19  # in parallel the two would take 0.1 s


def test_cpu_host_in_a_thread_serialises_requests() -> None:
    with FakeImageHost(cpu_ms_per_request=100) as server:
        wall = fetch_together([server.url(f"/img/0/t{i}") for i in range(3)])
        assert sum(server.counts.values()) == 3
    assert wall >= 0.29


def test_the_default_host_burns_nothing() -> None:
    with FakeImageHost() as server:
        wall = fetch_together([server.url(f"/img/0/d{i}") for i in range(3)])
    assert server.app.cpu_ms_per_request == 0
    assert wall < 0.29
