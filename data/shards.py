"""A sharded stage's plan, and where its shards run.

A stage that works item by item (download, hashing, embedding, inpainting, ...) returns a `ShardPlan` instead of
writing its table: its items, cut into fixed shards, and what to do with one shard. The workspace writes one Parquet
part per shard and finishes the stage; a `MapShards` decides where the shards run: one after another in this
process (`InOrder`), or as tasks on a Dask cluster (`flows/engine/scale_out.py`). Each shard's part depends only on its
items, so the stage's table is the same wherever its shards ran.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

if TYPE_CHECKING:
    from data.workspace import StageStats


@dataclass(frozen=True)
class ShardPlan:
    items: Sequence[Any]
    shard_size: int
    process: Callable[[Sequence[Any]], pa.Table]  # one shard's items -> its rows
    summarize: Callable[[pa.Table], StageStats]  # the whole table -> the stage's counts
    schema: pa.Schema | None = None  # None: the stage's declared schema (the graph fills it in)

    def __post_init__(self) -> None:
        if self.shard_size < 1:
            raise ValueError("shard_size must be >= 1")

    @property
    def shards(self) -> int:
        """How many shards; a stage without items still has one (empty) shard, so it writes an empty table."""
        return max(1, -(-len(self.items) // self.shard_size))

    def chunk(self, index: int) -> Sequence[Any]:
        if not 0 <= index < self.shards:
            raise IndexError(f"shard {index} out of range 0..{self.shards - 1}")
        return self.items[index * self.shard_size : (index + 1) * self.shard_size]

    def attempt_key(self, fingerprint: str) -> str:
        """Finished parts are only reusable when they were cut the same way from the same items."""
        return f"{fingerprint}:shards={self.shard_size}:items={len(self.items)}"


class MapShards(Protocol):
    def __call__(self, stage: str, pending: list[int], run_here: Callable[[int], None]) -> Iterable[int]:
        """Run the `pending` shards of `stage`, yielding each index once its part is written, in any order.
        `run_here(index)` processes and writes one shard in this process."""
        ...


class InOrder:
    """The default: the shards one after another, in the stage's own process."""

    def __call__(self, stage: str, pending: list[int], run_here: Callable[[int], None]) -> Iterator[int]:
        for index in pending:
            run_here(index)
            yield index
