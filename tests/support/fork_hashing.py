"""Runs curation.file_hashing.hash_files in a fresh interpreter, where no other thread runs, and says how it went.

    python -m tests.support.fork_hashing LIST_JSON [--kill-worker-on PATH]

LIST_JSON holds the paths. With --kill-worker-on, the worker process given PATH exits at once (as a decoder crashing
in native code would). The last line of stdout is a JSON object: how many process pools were opened, whether the
batch equals hash_batch's in threads column by column, how many times files were decoded again in this process
(after a worker died), and how many rows carry an error.
"""

from __future__ import annotations

import argparse
import json
import os
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import curation.file_hashing as file_hashing
from curation.image_hashing import Decoded, HashedBatch, decode_all, hash_batch

_REAL_DECODE_PART = file_hashing._decode_part
_VICTIM: dict[str, object] = {}  # forked workers inherit it


def _dies_on_the_victim(paths: list[str]) -> list[Decoded]:
    """The worker's function, pickled by name, so it lives at module level."""
    if _VICTIM["path"] in paths and os.getpid() != _VICTIM["parent"]:
        os._exit(3)
    return _REAL_DECODE_PART(paths)


def same(a: HashedBatch, b: HashedBatch) -> bool:
    columns = ("width", "height", "phash", "dhash", "draft_decoded", "align", "chroma")
    arrays = all(np.array_equal(getattr(a, c), getattr(b, c)) for c in columns)
    return arrays and a.errors == b.errors and a.sha256 == b.sha256 and a.pixel_sha256 == b.pixel_sha256


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("paths", type=Path)
    parser.add_argument("--kill-worker-on")
    args = parser.parse_args()
    paths = json.loads(args.paths.read_text())
    opened, parent, fallbacks = [0], os.getpid(), [0]

    def counted(*a: Any, **k: Any) -> ProcessPoolExecutor:
        opened[0] += 1
        return ProcessPoolExecutor(*a, **k)

    def decode_here(loaders: Any, workers: int = 2) -> list[Decoded]:
        if os.getpid() == parent and loaders:  # the files a dead worker held, decoded again in this process
            fallbacks[0] += 1
        return decode_all(loaders, workers)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(file_hashing, "ProcessPoolExecutor", counted)
        patch.setattr(file_hashing, "decode_all", decode_here)
        if args.kill_worker_on:
            _VICTIM.update(path=args.kill_worker_on, parent=os.getpid())
            patch.setattr(file_hashing, "_decode_part", _dies_on_the_victim)
        could_fork = file_hashing.can_fork()
        forked = file_hashing.hash_files(paths, workers=2, keep_align=True)
    threads = hash_batch([partial(file_hashing.read_file, p) for p in paths], 2, keep_align=True)
    errors = sum(e is not None for e in forked.errors)
    answer = {"could_fork": could_fork, "pools": opened[0], "fallbacks": fallbacks[0], "same": same(forked, threads)}
    print(json.dumps({**answer, "errors": errors}))


if __name__ == "__main__":
    main()
