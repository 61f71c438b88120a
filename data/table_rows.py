"""A table's rows as a sequence of Python objects, made a slice at a time when they are reached.

A list of a million rows as dicts costs gigabytes; the Arrow table they come from costs a fraction of that. A
sharded stage's items (held by the stage's process and by each shard worker) and a release writer's image rows are
read through this.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar, overload

import pyarrow as pa

T = TypeVar("T")


def _as_dict(row: dict[str, Any]) -> Any:
    return row


class TableRows(Sequence[T], Generic[T]):
    """The rows of `table`, each made by `make` from its dict (the dict itself by default)."""

    #: Rows converted to Python at once when iterating.
    CHUNK = 4096

    def __init__(self, table: pa.Table, make: Callable[[dict[str, Any]], T] = _as_dict) -> None:
        self._table = table
        self._make = make

    def __len__(self) -> int:
        return int(self._table.num_rows)

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> list[T]: ...

    def __getitem__(self, index: int | slice) -> T | list[T]:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            rows = [self._make(row) for row in self._table.slice(start, max(0, stop - start)).to_pylist()]
            return rows[::step]
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        return self._make(self._table.slice(index % len(self), 1).to_pylist()[0])

    def window(self, start: int, stop: int) -> TableRows[T]:
        """Rows [start, stop) as rows of their own, made by the same `make`."""
        return TableRows(self._table.slice(start, max(0, stop - start)), self._make)

    def __reduce__(self) -> tuple[Callable[..., TableRows[T]], tuple[Any, ...]]:
        # Through Arrow IPC: a pickled slice of a table carries its whole buffers (pyarrow 26), a window sent to a
        # worker process would carry every row of the table.
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, self._table.schema) as writer:
            writer.write_table(self._table)
        return _from_ipc, (sink.getvalue(), self._make)

    def __iter__(self) -> Iterator[T]:
        for batch in self._table.to_batches(max_chunksize=self.CHUNK):
            yield from (self._make(row) for row in batch.to_pylist())


def _from_ipc(data: pa.Buffer, make: Callable[[dict[str, Any]], T]) -> TableRows[T]:
    return TableRows(pa.ipc.open_stream(data).read_all(), make)
