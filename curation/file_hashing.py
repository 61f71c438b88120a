"""The bulk hashes of image files on disk (curation/file_dedup.py), decoded in forked worker processes where that
is safe, else in `hash_batch`'s threads.

Why processes: on small images much of the work beside the decode is Pillow's resizes to the thumbnails, and Pillow
13's resamplers hold the GIL. Sampled with `py-spy record --gil` on the `small-crops` corpus of
perf/dedup_vs_imagededup (about 1,000 images of 256-512 px), two hashing threads held the GIL 70% of the time and
reached 1.47x one thread, where two forked processes reach about 1.7x (docs/performance.md, "Near-duplicates against
imagededup"). The pixels are the same either way: each file goes through the same decode (`decode_all`).

Why fork, and only when nothing else runs: a forked worker starts in milliseconds with this process's imports,
where a fresh interpreter (data/process_pool.py's workers) would cost a first call more than the processes save.
But a child forked while another thread holds a lock (logging's, a Prefect task's) can wait on it for ever, so
this process must run no other thread; otherwise, or where the platform cannot fork, the threads are used. A
worker that dies (a decoder crashing in native code on a hostile file) loses no row: its files are decoded again
in threads, as they were before there were workers (so a crash that repeats there ends this process, as it did).
"""

from __future__ import annotations

import multiprocessing
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from functools import partial
from pathlib import Path

from PIL import Image

from curation.image_hashing import Decoded, HashedBatch, decode_all, hash_decoded

#: Below this many files two forks cost more than they save.
FORK_MIN_FILES = 64
#: Each worker gets this many parts, interleaved, so that the workers finish together.
PARTS_PER_WORKER = 4


def read_file(path: str) -> bytes:
    return Path(path).read_bytes()


def _decode_part(paths: list[str]) -> list[Decoded]:
    return decode_all([partial(read_file, path) for path in paths], workers=1)


def can_fork() -> bool:
    """Forking is fast and safe here: Linux, and no other thread in this process."""
    return sys.platform == "linux" and threading.active_count() == 1


def hash_files(
    paths: Sequence[str], workers: int = 2, keep_align: bool = False, meanwhile: Callable[[], object] | None = None
) -> HashedBatch:
    """`hash_batch` of the files at `paths`, the same answer, decoded in `workers` forked processes when
    `can_fork()`. `meanwhile()`, if given, runs in this process while forked workers decode: work the caller may
    need next, done while this process would only wait (the threads leave no such moment, so they skip it)."""
    paths = list(paths)
    loaders = [partial(read_file, path) for path in paths]
    if workers < 2 or len(paths) < FORK_MIN_FILES or not can_fork():
        return hash_decoded(decode_all(loaders, workers), keep_align)
    count = workers * PARTS_PER_WORKER
    parts = [list(range(k, len(paths), count)) for k in range(count)]
    outcomes: dict[int, Decoded] = {}
    Image.preinit()  # Pillow's common decoders, imported once here rather than in every worker
    # A fork pool starts all its workers before its manager thread, so no thread of its own is forked either.
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        futures = [pool.submit(_decode_part, [paths[k] for k in part]) for part in parts]
        if meanwhile is not None:
            meanwhile()
        for part, future in zip(parts, futures, strict=True):
            try:
                outcomes.update(zip(part, future.result(), strict=True))
            except BrokenProcessPool:  # a worker died: its files are decoded again below, in threads
                continue
    missing = [k for k in range(len(paths)) if k not in outcomes]
    outcomes.update(zip(missing, decode_all([loaders[k] for k in missing], workers), strict=True))
    return hash_decoded([outcomes[k] for k in range(len(paths))], keep_align)
