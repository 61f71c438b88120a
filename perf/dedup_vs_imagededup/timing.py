"""What the dedup benchmark times besides the two tools: the decode floor and the cold start.

- Decode floor: the time to only read and decode the same files with the same reduced decode our hashing uses
  (`curation.image_thumbnails.decode_reduced`: JPEGs in DCT-scaled draft mode, PNGs in full), in a thread pool of the
  same size. No deduplicator that decodes this way can be faster; how far ours is above it is what our own work
  (thumbnails, hashes, pairs, alignment) costs.
- Cold start, each in fresh processes of this interpreter: `culturebench --help`; and a user's first call,
  `import curation.file_dedup` then `dedup_files(paths)` three times. The first call's overhead is the first call's
  time minus the median of the two that follow: what a user pays once per process (lazy imports, OpenCV's
  start, thread pools). The first answer is the process's wall time up to the end of the first call.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_FIRST_CALL = """
import json, sys, time
start = time.perf_counter()
from curation.file_dedup import dedup_files
imported = time.perf_counter()
paths = json.loads(sys.stdin.read())
calls = []
for _ in range(3):
    t = time.perf_counter()
    dedup_files(paths, workers={workers})
    calls.append(time.perf_counter() - t)
print(json.dumps({{"import_seconds": imported - start, "calls": calls}}))
"""


def _decode_one(path: str) -> None:
    from curation.image_thumbnails import decode_reduced

    decode_reduced(Path(path).read_bytes())


def decode_floor_seconds(paths: list[str], workers: int) -> float:
    """One pass of reading and decoding every file as our hashing does, in `workers` threads (undecodable files
    cost what their failed decode costs)."""

    def attempt(path: str) -> None:
        with contextlib.suppress(Exception):  # the floor times the attempt, as hashing does
            _decode_one(path)

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        list(pool.map(attempt, paths))
    return time.perf_counter() - start


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _first_call_once(paths: list[str], workers: int) -> dict[str, float]:
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _FIRST_CALL.format(workers=workers)],
        input=json.dumps(paths),
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
    )
    process_seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"the cold-start process failed (rc {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    first, *warm = found["calls"]
    return {
        "import_seconds": found["import_seconds"],
        "first_call_seconds": first,
        "warm_call_seconds": statistics.median(warm),
        "first_call_overhead_seconds": first - statistics.median(warm),
        "process_seconds": process_seconds,
        # From the command to the first answer: interpreter start, import and first call (the two later calls
        # taken off), comparable with one imagededup process.
        "first_answer_seconds": process_seconds - sum(warm),
    }


def first_call(paths: list[str], workers: int, processes: int = 3) -> dict[str, float]:
    """Per figure, the median over `processes` fresh processes of: the import of curation.file_dedup, its first
    call on `paths`, the median of the two calls after it, the first call's overhead over those, and the whole
    process's wall time (interpreter start included)."""
    runs = [_first_call_once(paths, workers) for _ in range(processes)]
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


def culturebench_command() -> list[str]:
    """The installed console script next to this interpreter, else the module it runs."""
    script = Path(sys.executable).with_name("culturebench")
    if script.exists():
        return [str(script)]
    found = shutil.which("culturebench")
    return [found] if found else [sys.executable, "-c", "from flows.cli import app; app()"]


def help_seconds(repeats: int = 5) -> dict[str, object]:
    """Wall time of `culturebench --help` in fresh processes: the median, and every run."""
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        proc = subprocess.run([*culturebench_command(), "--help"], capture_output=True, env=_env(), cwd=ROOT)
        runs.append(time.perf_counter() - start)
        if proc.returncode != 0:
            raise RuntimeError(f"culturebench --help failed (rc {proc.returncode}): {proc.stderr.decode()[-2000:]}")
    return {"median_seconds": statistics.median(runs), "runs": runs}
