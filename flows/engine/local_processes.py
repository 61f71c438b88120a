"""Local worker processes for a large CPU-bound sharded stage: both cores of a laptop, not one.

A stage's shards run one after another in its own process by default. When its plan is CPU work only (files read,
checked and decoded: `ShardPlan.cpu_bound`) and large enough to pay for starting workers (a few seconds each, the
imports and the plan's inputs), `LocalProcesses` runs them in worker processes instead (`shard_worker.py`), as
the Dask runner runs them on its workers: each worker rebuilds the stage's plan once (`Build.write_shard`) and
writes its shards' parts straight into the workspace. Each part depends only on its items, so the table, and every
release made from it, is the same bytes wherever its shards ran.

Each worker is a fresh interpreter, not a fork: the stage may run inside a Prefect task, whose process holds
threads (its API client, its logging), and a forked child can inherit one of their locks held. Nor is it
multiprocessing's spawn, which imports the caller's `__main__` again: a script without a main guard would start
its build over in every worker.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import cloudpickle

from flows.engine.shard_worker import HEADER, receive, send
from flows.engine.shards import InOrder, MapShards, ShardPlan
from flows.engine.task_runner import DefaultTaskRunnerConfig

if TYPE_CHECKING:
    from flows.engine.graph import Build


def available_cores() -> int:
    """The cores this process may run on (a container's CPU set, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


class LocalProcesses:
    """A `MapShards` that runs a stage's pending shards in `workers` worker processes on this machine, each fed the
    next pending shard as it finishes the last."""

    def __init__(self, build: Build[Any], workers: int) -> None:
        self.build = build
        self.workers = workers

    def __call__(self, stage: str, pending: list[int], run_here: Callable[[int], object]) -> Iterator[int]:
        if not pending:
            return
        todo: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        for index in pending:
            todo.put(index)
        results: queue.SimpleQueue[tuple[str, int, Any]] = queue.SimpleQueue()
        # The graph's stages hold lambdas: the build travels by value, as it does to Dask workers.
        pickled = cloudpickle.dumps(self.build)
        workers = [
            threading.Thread(target=_feed_worker, args=(pickled, stage, todo, results), daemon=True)
            for _ in range(min(self.workers, len(pending)))
        ]
        for worker in workers:
            todo.put(None)  # one stop per worker, after every shard
            worker.start()
        failures: list[tuple[int, BaseException]] = []
        for _ in pending:
            outcome, index, value = results.get()
            if outcome == "done":
                yield index
            else:  # the other shards go on: their parts are kept for the retry
                failures.append((index, value))
        for worker in workers:
            worker.join()
        if failures:
            index, first = min(failures, key=lambda failure: failure[0])
            first.add_note(f"{len(failures)} of {len(pending)} shards of {stage} failed (first: shard {index})")
            raise first


def _feed_worker(
    pickled_build: bytes,
    stage: str,
    todo: queue.SimpleQueue[int | None],
    results: queue.SimpleQueue[tuple[str, int, Any]],
) -> None:
    """Start one worker process and hand it shards until none are left. A worker that dies, or cannot start, fails
    its shard and every shard this feeder takes after it (the stage fails anyway; the parts written are kept for
    the retry), so each pending shard gets exactly one outcome and the stage never waits on a dead worker."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # a script's own path included
    proc: subprocess.Popen[bytes] | None = None
    index: int | None = None
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "flows.engine.shard_worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
        )
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(HEADER.pack(len(pickled_build)) + pickled_build)
        while (index := todo.get()) is not None:
            send(proc.stdin, (stage, index))
            answer = receive(proc.stdout)
            if answer is None:
                raise RuntimeError(f"a shard worker of {stage} exited with {proc.wait()} during shard {index}")
            results.put(answer)
            index = None
    except Exception as exc:
        if index is not None:
            results.put(("failed", index, exc))
        while (left := todo.get()) is not None:  # up to this feeder's stop: the other feeders take the rest
            failed = f"shard {left} of {stage} not run: a worker failed ({type(exc).__name__}: {exc})"
            results.put(("failed", left, RuntimeError(failed)))
    finally:
        if proc is not None:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait()


def local_shards(build: Build[Any], plan: ShardPlan[Any]) -> MapShards:
    """Where a stage's shards run when no cluster was named: worker processes for a large CPU-bound plan (as the
    build's `task_runner` allows), else one after another in the stage's process."""
    settings = build.config.task_runner
    if not isinstance(settings, DefaultTaskRunnerConfig):  # a Dask build run stage by stage here (`--engine local`)
        return InOrder()
    workers = settings.processes or available_cores()
    if not plan.cpu_bound or workers < 2 or plan.shards < 2 or len(plan.items) < settings.processes_from_items:
        return InOrder()
    return LocalProcesses(build, workers)
