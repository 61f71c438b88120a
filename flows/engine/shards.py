"""Sharded stages: a stage's plan, where its shards run, and how the engine runs them into the workspace.

A stage that works item by item (download, hashing, embedding, inpainting, ...) returns a `ShardPlan` instead of its
table: its items, cut into fixed shards, and what to do with one shard. `run_sharded` runs the pending shards, has
the workspace write one Parquet part per shard, and finishes the stage; a `MapShards` runs them: one after another
in this process (`InOrder`), in local worker processes (`flows/engine/placement.py`), or as tasks on a Dask cluster
(`flows/engine/scale_out.py`). Which one a stage's plan gets is a build's `Placement`, decided once for the whole
build by the runner (`flows/engine/runner.py`); a build run without one runs every shard in order, here. Each
shard's part depends only on its items, so the stage's table is the same wherever its shards ran.

The workspace only stores: it writes, lists and collects parts and keeps the marker. What an attempt is (its key:
the stage's fingerprint, how its items were cut, the digests of its inputs), which shards are pending, and the
stage's counts are decided here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import pyarrow as pa

from data.stage_stats import StageStats
from data.workspace import StageMarker, Workspace, fingerprint, part_name

Item = TypeVar("Item")


@dataclass(frozen=True)
class ShardPlan(Generic[Item]):
    items: Sequence[Item]
    shard_size: int
    process: Callable[[Sequence[Item]], pa.Table]  # one shard's items -> its rows
    summarize: Callable[[pa.Table], StageStats]  # the whole table -> the stage's counts
    schema: pa.Schema | None = None  # None: the stage's declared schema (the graph fills it in)
    # Shards of CPU work only (no network, no GPU): a large plan may run them in local worker processes.
    cpu_bound: bool = False

    def __post_init__(self) -> None:
        if self.shard_size < 1:
            raise ValueError("shard_size must be >= 1")

    @property
    def shards(self) -> int:
        """How many shards; a stage without items still has one (empty) shard, so it writes an empty table."""
        return max(1, -(-len(self.items) // self.shard_size))

    def chunk(self, index: int) -> Sequence[Item]:
        if not 0 <= index < self.shards:
            raise IndexError(f"shard {index} out of range 0..{self.shards - 1}")
        return self.items[index * self.shard_size : (index + 1) * self.shard_size]

    def attempt_key(self, fingerprint: str) -> str:
        """Finished parts are only reusable when they were cut the same way from the same items."""
        return f"{fingerprint}:shards={self.shard_size}:items={len(self.items)}"


def attempt_key(key: str, inputs: Mapping[str, str] | None = None) -> str:
    """The key of an attempt at a stage: `key` (its fingerprint, or a plan's `attempt_key`) and the digests of the
    upstream stages it is computed from. Files of an attempt with another key are stale."""
    return f"{key}:inputs={fingerprint(dict(inputs or {}))[:16]}"


class MapShards(Protocol):
    def __call__(self, stage: str, pending: list[int], run_here: Callable[[int], object]) -> Iterable[int]:
        """Run the `pending` shards of `stage`, yielding each index once its part is written, in any order.
        `run_here(index)` processes and writes one shard in this process."""
        ...


class InOrder:
    """The default: the shards one after another, in the stage's own process."""

    def __call__(self, stage: str, pending: list[int], run_here: Callable[[int], object]) -> Iterator[int]:
        for index in pending:
            run_here(index)
            yield index


class Placement(Protocol):
    def __call__(self, stage: str, plan: ShardPlan[Any]) -> MapShards:
        """Where the shards of `stage`, planned as `plan`, run: the `MapShards` that runs them."""
        ...


def in_order(stage: str, plan: ShardPlan[Any]) -> MapShards:
    """The placement of a build run without one: every shard in the stage's own process."""
    return InOrder()


def run_sharded(
    ws: Workspace,
    stage: str,
    fingerprint: str,
    plan: ShardPlan[Any],
    *,
    inputs: Mapping[str, str] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    map_shards: MapShards | None = None,
    finalize: Callable[[StageStats], StageStats] | None = None,
) -> StageMarker:
    """Run a sharded stage: one Parquet part per shard, then the stage's stats and marker.

    Parts that already exist from an attempt with the same key are kept, so a crashed stage resumes at its
    unfinished shards and never redoes finished ones. `inputs`: the upstream digests the stage is computed from
    (part of the attempt's key, recorded by the marker). `map_shards` decides where the pending shards run
    (default: in order, here); `on_progress` gets (items done, items) as shards finish; `finalize` may add to the
    stats before they are written (the engine notes repaired files).
    """
    ws.begin_attempt(stage, attempt_key(plan.attempt_key(fingerprint), inputs))
    done = set(ws.parts(stage))
    pending = [index for index in range(plan.shards) if part_name(index) not in done]
    items_done = len(plan.items) - sum(len(plan.chunk(index)) for index in pending)
    if on_progress is not None:
        on_progress(items_done, len(plan.items))
    runner = map_shards or InOrder()
    for index in runner(stage, pending, lambda i: write_shard(ws, stage, fingerprint, plan, i, inputs=inputs)):
        items_done += len(plan.chunk(index))
        if on_progress is not None:
            on_progress(items_done, len(plan.items))
    # The parts are read once: for the stage's counts, and for the records the marker keeps of them.
    table, files = ws.collect_parts(stage, plan.shards)
    stats = plan.summarize(table)
    if finalize is not None:
        stats = finalize(stats)
    return ws.finish(stage, fingerprint, stats, files, plan.shards, inputs)


def write_shard(
    ws: Workspace,
    stage: str,
    fingerprint: str,
    plan: ShardPlan[Any],
    index: int,
    *,
    inputs: Mapping[str, str] | None = None,
) -> int:
    """Process one shard and write its part; returns its rows. Any process that sees the workspace may call it
    (a Dask worker does), but only inside the attempt that `run_sharded` began: a shard of an attempt that was
    since restarted with another config must not land among the new parts."""
    attempt = ws.attempt(stage)
    if attempt is None:
        raise RuntimeError(f"stage {stage!r} has no attempt under way; shard {index} not written")
    if attempt != attempt_key(plan.attempt_key(fingerprint), inputs):
        raise RuntimeError(f"stage {stage!r} was restarted with another config; shard {index} not written")
    if plan.schema is None:
        raise TypeError(f"stage {stage!r}: the shard plan has no schema")
    return ws.write_part(stage, index, plan.process(plan.chunk(index)), plan.schema).rows
