"""perf/dedup_cold_ab.py times two trees' fresh first calls, interleaved, and ends with one JSON line."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.paths import REPO_ROOT


def test_the_cold_ab_times_both_trees_and_ends_with_one_json_line() -> None:
    command = [sys.executable, "perf/dedup_cold_ab.py", ".", ".", "--rounds", "2", "--bases", "8", "--seed", "4"]
    proc = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT, timeout=300, check=True)
    lines = proc.stdout.strip().splitlines()
    figures = json.loads(lines[-1])
    assert [len(figures["runs"][name]) for name in ("before", "after")] == [2, 2]
    for name in ("before", "after"):
        assert all(len(calls) == 2 and all(t > 0 for t in calls) for calls in figures["runs"][name])
    expected = figures["after_first_call_median_s"] / figures["before_first_call_median_s"]
    assert abs(figures["first_call_ratio"] - expected) < 1e-12
    assert any(line.startswith("first call: before") for line in lines)
