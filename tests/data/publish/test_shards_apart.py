"""A release's image shards written in worker processes (issue 43): each Parquet shard, with the tars that start
among its rows, goes to one worker. The files must be those of the one-process writer, byte for byte, also where
a tar runs past its Parquet shard; a failing shard fails the write only after the others are done."""

from __future__ import annotations

import hashlib
import pickle
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import data.process_pool
from data.publish.folder import ImmutableFolder
from data.publish.image_tables import (
    ImageRow,
    ShardLimits,
    TableImageRows,
    _plan_shards,
    write_image_shards,
)

SCHEMA = pa.schema(
    [
        pa.field("image_id", pa.string(), nullable=False),
        pa.field("num_bytes", pa.int64(), nullable=False),
        pa.field("note", pa.string()),
    ]
)
LIMITS = ShardLimits(row_group_size=3, max_shard_bytes=200_000, max_shard_images=7)


def _image(image_id: str, size: int, fail: bool) -> bytes:
    if fail:
        raise OSError(f"{image_id} unreadable")
    return hashlib.sha256(image_id.encode()).digest() * (size // 32)


def _row(meta: dict[str, Any]) -> ImageRow:
    fail = meta["note"] == "fail"
    return ImageRow(
        key=meta["image_id"],
        metadata=meta,
        load=lambda: _image(meta["image_id"], meta["num_bytes"], fail),
        embed=meta["note"] != "url-only",
    )


def _table(count: int, seed: int, fail_at: int | None = None) -> pa.Table:
    rng = random.Random(seed)
    notes = [rng.choice([None, "kept", "url-only"]) for _ in range(count)]
    if fail_at is not None:
        notes[fail_at] = "fail"
    return pa.table(
        {
            "image_id": [f"img{k:04d}" for k in range(count)],
            "num_bytes": [32 * rng.randint(200, 1500) for _ in range(count)],
            "note": notes,
        },
        schema=SCHEMA,
    )


def _write(root: Path, rows: Any, workers: int) -> tuple[ImmutableFolder, dict[str, list[str]]]:
    folder = ImmutableFolder.at(str(root / "release"), "apart", "0.1.0")
    return folder, write_image_shards(folder, "images", rows, SCHEMA, LIMITS, workers=workers)


def _on_disk(folder: ImmutableFolder) -> dict[str, bytes]:
    staged = Path(folder.staging)
    return {str(p.relative_to(staged)): p.read_bytes() for p in sorted(staged.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("seed", [1, 2])
def test_shards_in_workers_are_the_one_process_shards(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    table = _table(90, seed)
    sizes = [
        n if note != "url-only" else 0
        for n, note in zip(table["num_bytes"].to_pylist(), table["note"].to_pylist(), strict=True)
    ]
    plan = list(_plan_shards(sizes, LIMITS.max_shard_bytes))
    tar_plan = list(_plan_shards(sizes, LIMITS.max_shard_bytes, LIMITS.max_shard_images))
    boundaries = {stop for _, stop in plan[:-1]}
    assert len(plan) >= 3
    assert any(start < b < stop for start, stop in tar_plan for b in boundaries), "no tar crosses a Parquet shard"
    calls = []
    real = data.process_pool.run_in_processes

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(len(args[1]))
        return real(*args, **kwargs)

    monkeypatch.setattr(data.process_pool, "run_in_processes", spy)
    alone, alone_written = _write(tmp_path / "alone", TableImageRows(table, _row), workers=1)
    assert calls == []
    apart, apart_written = _write(tmp_path / "apart", TableImageRows(table, _row), workers=2)
    assert calls == [len(plan)]  # one worker item per Parquet shard
    listed, _ = _write(tmp_path / "listed", list(TableImageRows(table, _row)), workers=2)  # a plain list of rows
    assert apart_written == alone_written
    assert len(alone_written["webdataset"]) > len(plan)
    assert apart.files == alone.files == listed.files and apart.sizes == alone.sizes
    assert _on_disk(apart) == _on_disk(alone) == _on_disk(listed)


def test_a_failing_shard_fails_the_write_after_the_others(tmp_path: Path) -> None:
    table = _table(90, 1, fail_at=40)
    with pytest.raises(OSError, match="img0040 unreadable"):
        _write(tmp_path, TableImageRows(table, _row), workers=2)
    staged = next((tmp_path / "release").parent.glob(".staging-*"))
    written = sorted(str(p.relative_to(staged)) for p in staged.rglob("*") if p.is_file())
    # The other shards were finished (their workers were not cut off mid-file); the failing one left nothing.
    assert written and all(".tmp-" not in name for name in written)
    good, _ = _write(tmp_path / "good", TableImageRows(_table(90, 1), _row), workers=1)
    failing = [rel for rel in good.files if rel not in written]
    assert any(rel.endswith(".parquet") for rel in failing)


def test_a_window_of_table_rows_pickles_its_own_rows_only() -> None:
    rows = TableImageRows(_table(20_000, 3), _row)
    whole, window = len(pickle.dumps(rows)), len(pickle.dumps(rows.window(100, 200)))
    assert window * 50 < whole, (window, whole)
    again = pickle.loads(pickle.dumps(rows.window(100, 200)))
    assert [r.key for r in again] == [r.key for r in rows[100:200]]
