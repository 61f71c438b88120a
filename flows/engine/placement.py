"""Local worker processes: how many a CPU-bound step gets, and a large CPU-bound sharded stage's shards in them.

What a benchmark uses of this module is the engine's public interface for running work beside the build's
process: `local_workers` (how many worker processes a CPU-bound step over so many items gets from the build's
`task_runner`) and `run_apart` (one call in a worker process while the caller goes on). The rest serves the runner
(`flows/engine/runner.py`), which alone decides where a stage's shards run, once for a whole build: `LocalPlacement`
puts a large CPU-bound plan's shards into local worker processes, every other plan's into the stage's own process.

A stage's shards run one after another in its own process by default. When its plan is CPU work only (files read,
checked and decoded: `ShardPlan.cpu_bound`) and large enough to pay for the workers, `LocalProcesses` runs them in
worker processes instead (`data/process_pool.py`), as the Dask runner runs them on its workers: each worker rebuilds
the stage's plan once (`Build.write_shard`) and writes its shards' parts straight into the workspace. Each part
depends only on its items, so the table, and every release made from it, is the same bytes wherever its shards ran.
The workers are loky's, fresh interpreters that never import the caller's `__main__`, and a `LocalPlacement` keeps
them up for as long as it is open (the whole build): a stage after the first pays no worker start.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from types import TracebackType
from typing import Any, Protocol

from data.process_pool import Failed, available_cores, run_apart, run_in_processes, warm_workers
from flows.engine.shards import InOrder, MapShards, ShardPlan
from flows.engine.task_runner import DefaultTaskRunnerConfig, TaskRunnerConfig

__all__ = ["LocalPlacement", "LocalProcesses", "local_workers", "pool_size", "run_apart"]


class ShardWriter(Protocol):
    """What a worker needs of the build (`flows/engine/graph.py` `Build`): its config, and writing one shard."""

    @property
    def config(self) -> Any: ...

    def write_shard(self, name: str, index: int) -> int: ...


def pool_size(settings: TaskRunnerConfig) -> int:
    """The local worker processes the build's `task_runner` allows at most: one per core (or `processes`); none but
    the build's own process for a Dask config, whose stages run on its cluster."""
    if not isinstance(settings, DefaultTaskRunnerConfig):
        return 1
    return settings.processes or available_cores()


def local_workers(settings: TaskRunnerConfig, items: int) -> int:
    """How many local worker processes a CPU-bound step over `items` items gets from the build's `task_runner`: one
    per core (or `processes`) from `processes_from_items` items on, else 1 (its own process). A Dask config runs its
    stages on its cluster, so a step run here (`--engine local`) keeps to its process."""
    if not isinstance(settings, DefaultTaskRunnerConfig) or items < settings.processes_from_items:
        return 1
    return pool_size(settings)


class LocalProcesses:
    """A `MapShards` that runs a stage's pending shards in `workers` worker processes on this machine
    (`data/process_pool.py`), each fed the next pending shard as it finishes the last."""

    def __init__(self, build: ShardWriter, workers: int) -> None:
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


def _write_shard(build: ShardWriter, stage: str, index: int) -> int:
    """In a worker: write one shard's part into the workspace (`Build.write_shard`); its index says it is done."""
    build.write_shard(stage, index)
    return index


class LocalPlacement:
    """Where a build's shards run when no cluster runs them (a `Placement`, `flows/engine/shards.py`): worker
    processes for a large CPU-bound plan, as the build's `task_runner` allows, else one after another in the stage's
    process. Open (`with`) for the whole build, it keeps its worker processes up from stage to stage and for the
    release, which runs its own CPU-bound steps in them (`data/process_pool.py` `warm_workers`)."""

    def __init__(self, build: ShardWriter) -> None:
        self.build = build
        self.settings: TaskRunnerConfig = build.config.task_runner
        self._warm: AbstractContextManager[None] | None = None

    def __call__(self, stage: str, plan: ShardPlan[Any]) -> MapShards:
        workers = local_workers(self.settings, len(plan.items))
        if not plan.cpu_bound or workers < 2 or plan.shards < 2:
            return InOrder()
        return LocalProcesses(self.build, workers)

    def __enter__(self) -> LocalPlacement:
        size = pool_size(self.settings)
        self._warm = warm_workers(size) if size > 1 else nullcontext()
        self._warm.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        warm, self._warm = self._warm, None
        if warm is not None:
            warm.__exit__(kind, error, trace)
