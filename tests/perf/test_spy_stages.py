"""perf/spy_stages.py: py-spy's raw stacks shared out to the build's stages, with self and inclusive times."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO_ROOT

DRIVER = 'process 10:"python perf/build_scale.py --images 1m"'
HASHES = 'process 11:"python perf/build_scale.py --child /tmp/spec.json --names image_hashes"'
WORKER = 'process 12:"python -m data.process_worker"'
RELEASE = 'process 13:"python perf/build_scale.py --child /tmp/spec.json --names release"'

STACKS = [
    # a stage's worker process counts towards the stage that started it
    f"{DRIVER};{HASHES};{WORKER};<module> (data/process_worker.py:5);decode (curation/hashes.py:10) 30",
    f"{DRIVER};{HASHES};{WORKER};<module> (data/process_worker.py:5);decode (curation/hashes.py:12) 10",
    f"{DRIVER};{HASHES};run (flows/stage.py:3);phash (curation/hashes.py:40) 20",
    # recursion counts once per stack in the inclusive time
    f"{DRIVER};{RELEASE};walk (data/tree.py:1);walk (data/tree.py:1);write (data/tar.py:9) 8",
    f"{DRIVER};corpus (perf/build_scale.py:100) 4",
    "a line that is not a stack",
]


def run(tmp_path: Path, *args: str) -> dict:
    profile = tmp_path / "build.raw"
    profile.write_text("\n".join(STACKS) + "\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "perf" / "spy_stages.py"), str(profile), *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_samples_go_to_the_stage_whose_child_process_ran_them(tmp_path: Path) -> None:
    stages = run(tmp_path, "--rate", "10")["stages"]
    assert list(stages) == ["image_hashes", "release", "driver"]  # most sampled first
    assert stages["image_hashes"]["sampled_s"] == 6.0
    assert stages["release"]["sampled_s"] == 0.8
    assert stages["driver"]["sampled_s"] == 0.4


def test_self_time_is_per_function_across_its_lines(tmp_path: Path) -> None:
    hashes = run(tmp_path, "--rate", "10")["stages"]["image_hashes"]
    top = hashes["self"][0]
    assert top["function"] == "decode (curation/hashes.py)"
    assert top["s"] == 4.0 and abs(top["share"] - 40 / 60) < 1e-3


def test_inclusive_time_counts_a_recursive_function_once(tmp_path: Path) -> None:
    release = run(tmp_path, "--rate", "10")["stages"]["release"]
    inclusive = {row["function"]: row["s"] for row in release["inclusive"]}
    assert inclusive["walk (data/tree.py)"] == 0.8
    assert inclusive["write (data/tar.py)"] == 0.8


def test_top_limits_the_functions_listed(tmp_path: Path) -> None:
    hashes = run(tmp_path, "--rate", "10", "--top", "1")["stages"]["image_hashes"]
    assert len(hashes["self"]) == 1 and len(hashes["inclusive"]) == 1


def test_within_keeps_only_the_stacks_through_a_function(tmp_path: Path) -> None:
    stages = run(tmp_path, "--rate", "10", "--within", "phash")["stages"]
    assert list(stages) == ["image_hashes"]
    assert stages["image_hashes"]["sampled_s"] == 2.0


def test_a_missing_profile_or_a_bad_rate_is_one_line_and_no_traceback(tmp_path: Path) -> None:
    script = str(REPO_ROOT / "perf" / "spy_stages.py")
    (tmp_path / "empty.raw").write_text("", encoding="utf-8")
    for args, named in (
        ([str(tmp_path / "missing.raw")], "missing.raw"),
        ([str(tmp_path)], str(tmp_path)),  # a folder
        ([str(tmp_path / "empty.raw"), "--rate", "0"], "--rate"),
    ):
        done = subprocess.run([sys.executable, script, *args], capture_output=True, text=True)
        assert done.returncode == 2 and "Traceback" not in done.stderr
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith("spy_stages.py: error:") and named in last
    empty = subprocess.run([sys.executable, script, str(tmp_path / "empty.raw")], capture_output=True, text=True)
    assert empty.returncode == 0 and json.loads(empty.stdout.strip().splitlines()[-1])["stages"] == {}
