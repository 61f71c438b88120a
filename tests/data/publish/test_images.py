"""The release writers read their image rows from the Arrow table a slice at a time (issue 31): `TableImageRows`
behaves as the list of every row's `ImageRow` did, and makes a row only when the writer reaches it."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from data.publish.image_tables import ImageRow, TableImageRows


def _table(n: int) -> pa.Table:
    return pa.table({"image_id": [f"img{k:05d}" for k in range(n)], "num_bytes": list(range(n))})


def _make(made: list[str]) -> Any:
    def make(meta: dict[str, Any]) -> ImageRow:
        made.append(meta["image_id"])
        return ImageRow(key=meta["image_id"], metadata=meta, load=lambda: b"")

    return make


def test_rows_read_as_the_list_of_every_row() -> None:
    table = _table(10_000)
    rows = TableImageRows(table, _make([]))
    listed = [ImageRow(key=m["image_id"], metadata=m, load=lambda: b"") for m in table.to_pylist()]
    assert len(rows) == len(listed)
    assert [r.metadata for r in rows] == [r.metadata for r in listed]
    for cut in (slice(0, 100), slice(9_950, 20_000), slice(4_000, 4_000), slice(10, 30, 3), slice(-5, None)):
        assert [r.key for r in rows[cut]] == [r.key for r in listed[cut]]
    assert rows[0].key == listed[0].key and rows[-1].key == listed[-1].key
    with pytest.raises(IndexError):
        rows[10_000]


def test_rows_are_made_only_when_reached() -> None:
    made: list[str] = []
    rows = TableImageRows(_table(3 * TableImageRows.CHUNK), _make(made))
    assert made == []
    first = next(iter(rows))
    assert first.key == "img00000"
    assert 0 < len(made) <= TableImageRows.CHUNK
    made.clear()
    assert len(rows[100:200]) == 100 and len(made) == 100
