"""Local worker processes for a large CPU-bound sharded stage: both cores of a laptop, not one.

A stage's shards run one after another in its own process by default. When its plan is CPU work only (files read,
checked and decoded: `ShardPlan.cpu_bound`) and large enough to pay for starting workers (a few seconds each, the
imports and the plan's inputs), `LocalProcesses` runs them in worker processes instead (`data/process_pool.py`), as
the Dask runner runs them on its workers: each worker rebuilds the stage's plan once (`Build.write_shard`) and
writes its shards' parts straight into the workspace. Each part depends only on its items, so the table, and every
release made from it, is the same bytes wherever its shards ran.

Each worker is a fresh interpreter, not a fork (why: `data/process_pool.py`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from data.process_pool import Failed, available_cores, run_in_processes
from flows.engine.shards import InOrder, MapShards, ShardPlan
from flows.engine.task_runner import DefaultTaskRunnerConfig, TaskRunnerConfig

if TYPE_CHECKING:
    from flows.engine.graph import Build


class LocalProcesses:
    """A `MapShards` that runs a stage's pending shards in `workers` worker processes on this machine
    (`data/process_pool.py`), each fed the next pending shard as it finishes the last."""

    def __init__(self, build: Build[Any], workers: int) -> None:
        self.build = build
        self.workers = workers

    def __call__(self, stage: str, pending: list[int], run_here: Callable[[int], object]) -> Iterator[int]:
        # The graph's stages hold lambdas: the build travels by value (cloudpickle), as it does to Dask workers.
        write = functools.partial(_write_shard, self.build, stage)
        failures: list[tuple[int, BaseException]] = []
        for _, outcome in run_in_processes(write, pending, self.workers, lambda index: f"shard {index} of {stage}"):
            if isinstance(outcome, Failed):  # the other shards go on: their parts are kept for the retry
                failures.append((outcome.item, outcome.error))
            else:
                yield outcome
        if failures:
            index, first = min(failures, key=lambda failure: failure[0])
            first.add_note(f"{len(failures)} of {len(pending)} shards of {stage} failed (first: shard {index})")
            raise first


def _write_shard(build: Build[Any], stage: str, index: int) -> int:
    """In a worker: write one shard's part into the workspace (`Build.write_shard`); its index says it is done."""
    build.write_shard(stage, index)
    return index


def local_workers(settings: TaskRunnerConfig, items: int) -> int:
    """How many local worker processes a CPU-bound step over `items` items gets from the build's `task_runner`: one
    per core (or `processes`) from `processes_from_items` items on, else 1 (its own process). A Dask config runs its
    stages on its cluster, so a step run here (`--engine local`) keeps to its process."""
    if not isinstance(settings, DefaultTaskRunnerConfig):
        return 1
    workers = settings.processes or available_cores()
    return workers if items >= settings.processes_from_items else 1


def local_shards(build: Build[Any], plan: ShardPlan[Any]) -> MapShards:
    """Where a stage's shards run when no cluster was named: worker processes for a large CPU-bound plan (as the
    build's `task_runner` allows), else one after another in the stage's process."""
    workers = local_workers(build.config.task_runner, len(plan.items))
    if not plan.cpu_bound or workers < 2 or plan.shards < 2:
        return InOrder()
    return LocalProcesses(build, workers)
