"""Hashing files in forked processes gives hash_batch's answer, row for row, and forks only where that is safe.

- On a corpus of JPEGs, PNGs and an undecodable file, the forked path's batch equals the threads' (every column),
  in a fresh interpreter (tests/support/fork_hashing.py), where no other thread runs.
- A worker that dies loses no row: its files are decoded again in threads, and the answer is the same.
- With another thread running, or below FORK_MIN_FILES files, or one worker, no process is forked.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from functools import partial
from pathlib import Path

import pytest

import curation.file_hashing as file_hashing
from curation.file_hashing import FORK_MIN_FILES, can_fork, hash_files, read_file
from curation.image_hashing import HashedBatch, hash_batch
from perf.dedup_vs_imagededup.corpus import generate_corpus
from tests.support.fork_hashing import same
from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="hash_files forks only on Linux")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    root = tmp_path_factory.mktemp("corpus")
    paths = generate_corpus(root / "c", seed=5, bases=24, workers=1, mix="small-crops").paths()
    broken = root / "broken.jpg"
    broken.write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    assert len(paths) + 1 >= FORK_MIN_FILES
    return sorted([*paths, str(broken)])


def _in_a_fresh_interpreter(corpus: list[str], tmp_path: Path, *options: str) -> dict[str, object]:
    listing = tmp_path / "paths.json"
    listing.write_text(json.dumps(corpus))
    command = [sys.executable, "-m", "tests.support.fork_hashing", str(listing), *options]
    proc = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT, timeout=300, check=True)
    answer: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return answer


def test_the_forked_hashes_are_the_threads_hashes(corpus: list[str], tmp_path: Path) -> None:
    answer = _in_a_fresh_interpreter(corpus, tmp_path)
    # One error: the broken file is a row.
    assert answer == {"could_fork": True, "pools": 1, "fallbacks": 0, "same": True, "errors": 1}


def test_a_worker_that_dies_loses_no_row(corpus: list[str], tmp_path: Path) -> None:
    answer = _in_a_fresh_interpreter(corpus, tmp_path, "--kill-worker-on", corpus[len(corpus) // 2])
    assert answer == {"could_fork": True, "pools": 1, "fallbacks": 1, "same": True, "errors": 1}


def test_no_fork_beside_another_thread_or_for_a_few_files(corpus: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    def no_pool(*args: object, **kwargs: object) -> None:
        raise AssertionError("hash_files forked")

    monkeypatch.setattr(file_hashing, "ProcessPoolExecutor", no_pool)

    def threads(paths: list[str]) -> HashedBatch:
        return hash_batch([partial(read_file, p) for p in paths], 2, keep_align=True)

    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert not can_fork()
        assert same(hash_files(corpus, workers=2, keep_align=True), threads(corpus))
    finally:
        stop.set()
        other.join()
    # From here forking would be allowed, so only the size and worker rules keep the pool closed.
    monkeypatch.setattr(file_hashing, "can_fork", lambda: True)
    few = corpus[: FORK_MIN_FILES - 1]
    assert same(hash_files(few, workers=2, keep_align=True), threads(few))
    assert same(hash_files(corpus, workers=1, keep_align=True), threads(corpus))
