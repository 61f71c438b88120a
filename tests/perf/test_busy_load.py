"""perf/busy_load.py: N busy processes for a while or until stopped, none left behind, one JSON line at the end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.paths import REPO_ROOT
from tests.support.readiness import tree_cpu_ticks

SCRIPT = str(REPO_ROOT / "perf" / "busy_load.py")


def children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    if int(stat.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (OSError, IndexError):
                continue
    return found


def busy_children(pid: int) -> list[int]:
    """The children of `pid` running perf/busy_load.py's spin (multiprocessing's resource tracker aside)."""
    found = []
    for child in children(pid):
        try:
            if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                found.append(child)
        except OSError:
            continue  # gone meanwhile
    return found


def test_it_runs_for_its_seconds_and_reports_them() -> None:
    done = subprocess.run(
        [sys.executable, SCRIPT, "--processes", "2", "--seconds", "1"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["benchmark"] == "busy_load" and report["processes"] == 2 and report["seconds"] >= 1.0
    assert len(report["load_at_start"]) == len(report["load_at_end"]) == 3


def test_sigterm_stops_its_busy_processes_and_still_reports() -> None:
    run = subprocess.Popen([sys.executable, SCRIPT, "--processes", "2"], stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while len(busy_children(run.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        spinning = busy_children(run.pid)
        assert len(spinning) == 2
        before = {pid: tree_cpu_ticks(pid) for pid in spinning}
        time.sleep(1.0)
        assert all((tree_cpu_ticks(pid) or 0) > (before[pid] or 0) for pid in spinning)  # busy, not sleeping
        run.send_signal(signal.SIGTERM)
        out, _ = run.communicate(timeout=60)
    finally:
        run.kill()
    assert run.returncode == 0
    assert json.loads(out.splitlines()[-1])["processes"] == 2
    assert not [pid for pid in spinning if os.path.exists(f"/proc/{pid}")]


def test_a_bad_count_is_one_usage_line() -> None:
    done = subprocess.run([sys.executable, SCRIPT, "--processes", "0"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--processes: must be above 0" in done.stderr and done.stdout == ""
