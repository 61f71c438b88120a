"""Workspace: content-addressed blobs, atomic writes, completion markers; and shard-level resume, which the engine
runs on the workspace's parts (`flows/engine/shards.py`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pyarrow as pa
import pytest

from data.stage import stats_from_table
from data.workspace import Workspace, sha256_bytes
from flows.engine.shards import ShardPlan, run_sharded, write_shard

SCHEMA = pa.schema([pa.field("item", pa.int64(), nullable=False), pa.field("status", pa.string()),
                    pa.field("error", pa.string())])  # fmt: skip


def plan(items: list[int], shard_size: int, process: Callable[[Sequence[int]], pa.Table]) -> ShardPlan:
    return ShardPlan(items, shard_size, process, lambda t: stats_from_table("s", t), SCHEMA)


class SimulatedCrash(BaseException):
    """Stands in for a kill: not an Exception, so no handler in the pipeline may swallow it."""


def _table(items: list[int]) -> pa.Table:
    return pa.Table.from_pylist(
        [{"item": i, "status": "ok" if i % 3 else "failed", "error": None if i % 3 else "bad"} for i in items],
        schema=SCHEMA,
    )


def test_blobs_are_content_addressed_and_idempotent(workspace_root: Path) -> None:
    ws = Workspace(str(workspace_root), "b1")
    digest = ws.blobs.put(b"hello")
    assert digest == sha256_bytes(b"hello")
    assert ws.blobs.put(b"hello") == digest
    assert ws.blobs.get(digest) == b"hello"
    assert digest in ws.blobs
    Path(ws.blobs.path(digest)).write_bytes(b"tampered")
    with pytest.raises(OSError, match="corrupt"):
        ws.blobs.get(digest)


def test_atomic_write_leaves_nothing_on_failure(workspace_root: Path) -> None:
    ws = Workspace(str(workspace_root), "b1")
    target = ws.storage.path("tables", "x", "file.bin")
    with pytest.raises(RuntimeError), ws.storage.open_atomic(target) as handle:
        handle.write(b"half")
        raise RuntimeError("crash mid-write")
    assert not ws.storage.exists(target)
    assert ws.storage.listdir(ws.storage.path("tables", "x")) == []


def test_invalid_build_ids_are_refused(workspace_root: Path) -> None:
    for bad in ("", "../escape", ".hidden", "a/b"):
        with pytest.raises(ValueError):
            Workspace(str(workspace_root), bad)


def test_stage_marker_and_stats(workspace_root: Path) -> None:
    ws = Workspace(str(workspace_root), "b1")
    table = _table(list(range(6)))
    ws.write_stage("s", "fp1", table, SCHEMA, stats_from_table("s", table))
    assert ws.is_current("s", "fp1") and not ws.is_current("s", "fp2")
    stats = ws.stats("s")
    assert (stats.rows_in, stats.kept, stats.dropped, stats.dropped_by_reason) == (6, 4, 2, {"bad": 2})
    assert ws.read_table("s").equals(table)


def test_marker_digest_is_the_markers_digest_and_follows_a_rewritten_marker(workspace_root: Path) -> None:
    ws = Workspace(str(workspace_root), "b1")
    assert ws.marker_digest("s") is None  # not complete
    first = _table(list(range(6)))
    ws.write_stage("s", "fp1", first, SCHEMA, stats_from_table("s", first))
    marker = ws.marker("s")
    assert marker is not None and ws.marker_digest("s") == marker.digest()
    assert ws.marker_digest("s") == marker.digest()  # asked again: the remembered answer is the same
    other = _table(list(range(7)))
    ws.write_stage("s", "fp1", other, SCHEMA, stats_from_table("s", other))
    rewritten = ws.marker("s")
    assert rewritten is not None and rewritten.digest() != marker.digest()
    assert ws.marker_digest("s") == rewritten.digest()


def test_schema_mismatch_is_reported(workspace_root: Path) -> None:
    ws = Workspace(str(workspace_root), "b1")
    wrong = pa.table({"other": [1]})
    with pytest.raises(ValueError, match="do not match schema"):
        ws.write_stage("s", "fp", wrong, SCHEMA, stats_from_table("s", wrong))


def test_sharded_stage_resumes_after_a_crash(workspace_root: Path) -> None:
    ws = Workspace(str(workspace_root), "b1")
    items = list(range(10))
    processed: list[list[int]] = []

    def crash_on_third(chunk):
        if chunk[0] == 6 and not any(c[0] == 6 for c in processed):
            processed.append(list(chunk))
            raise SimulatedCrash("killed")
        processed.append(list(chunk))
        return _table(list(chunk))

    def run():
        return run_sharded(ws, "s", "fp", plan(items, 3, crash_on_third))

    with pytest.raises(SimulatedCrash):
        run()
    assert ws.marker("s") is None  # not complete
    first_attempt = len(processed)
    marker = run()
    resumed = processed[first_attempt:]
    assert [c[0] for c in resumed] == [6, 9]  # shards 0-1 were finished and are not redone
    assert marker.rows == 10 and marker.parts == 4
    assert ws.read_table("s")["item"].to_pylist() == items


def test_a_changed_fingerprint_discards_stale_parts(workspace_root: Path) -> None:
    ws = Workspace(str(workspace_root), "b1")
    calls = []

    def process(chunk):
        calls.append(chunk[0])
        return _table(list(chunk))

    run_sharded(ws, "s", "fp1", plan(list(range(9)), 3, process))
    run_sharded(ws, "s", "fp2", plan(list(range(4)), 3, process))
    assert calls == [0, 3, 6, 0, 3]
    assert ws.read_table("s")["item"].to_pylist() == [0, 1, 2, 3]


def test_parts_cut_with_another_shard_size_are_not_reused(workspace_root: Path) -> None:
    ws = Workspace(str(workspace_root), "b1")
    calls: list[list[int]] = []
    crash = [True]

    def process(chunk):
        calls.append(list(chunk))
        if len(calls) == 2 and crash.pop():
            raise SimulatedCrash("stop after one part")
        return _table(list(chunk))

    with pytest.raises(SimulatedCrash):
        run_sharded(ws, "s", "fp", plan(list(range(6)), 2, process))
    calls.clear()
    crash.append(False)
    run_sharded(ws, "s", "fp", plan(list(range(6)), 3, process))
    assert calls == [[0, 1, 2], [3, 4, 5]]  # the old 2-item part was discarded, not mistaken for shard 0
    assert ws.read_table("s")["item"].to_pylist() == list(range(6))


def test_shards_finishing_out_of_order_give_the_same_table(workspace_root: Path) -> None:
    """Where shards run is the mapper's choice (a Dask cluster finishes them in any order); the table is not."""

    def reversed_order(stage: str, pending: list[int], run_here: Callable[[int], None]) -> Iterator[int]:
        for index in reversed(pending):
            run_here(index)
            yield index

    progress: list[tuple[int, int]] = []
    items = list(range(10))
    in_order = run_sharded(Workspace(str(workspace_root), "a"), "s", "fp", plan(items, 3, lambda c: _table(list(c))))
    backwards = Workspace(str(workspace_root), "b")
    marker = run_sharded(
        backwards,
        "s",
        "fp",
        plan(items, 3, lambda c: _table(list(c))),
        on_progress=lambda *p: progress.append(p),
        map_shards=reversed_order,
    )
    assert marker == in_order
    assert backwards.read_table("s")["item"].to_pylist() == items
    assert progress == [(0, 10), (1, 10), (4, 10), (7, 10), (10, 10)]  # the last shard holds one item


def test_a_mapper_that_skips_a_shard_fails_the_stage(workspace_root: Path) -> None:
    ws = Workspace(str(workspace_root), "b1")

    def lossy(stage: str, pending: list[int], run_here: Callable[[int], None]) -> Iterator[int]:
        for index in pending[1:]:
            run_here(index)
            yield index

    with pytest.raises(RuntimeError, match=r"shards \[0\] have no part"):
        run_sharded(ws, "s", "fp", plan(list(range(6)), 3, lambda c: _table(list(c))), map_shards=lossy)
    assert ws.marker("s") is None


def test_a_shard_of_a_restarted_attempt_is_not_written(workspace_root: Path) -> None:
    """A late shard (say, from a Dask worker) of an attempt the stage was since restarted under is refused."""
    ws = Workspace(str(workspace_root), "b1")
    old = plan(list(range(6)), 3, lambda c: _table(list(c)))
    run_sharded(ws, "s", "fp-old", old)
    run_sharded(ws, "s", "fp-new", plan(list(range(4)), 3, lambda c: _table(list(c))))
    with pytest.raises(RuntimeError, match="restarted with another config"):
        write_shard(ws, "s", "fp-old", old, 1)
    assert ws.read_table("s")["item"].to_pylist() == [0, 1, 2, 3]


def test_a_folder_removed_after_a_write_is_made_again_by_the_next(tmp_path: Path) -> None:
    """Storage makes each local folder once per process (a blob store writes a million files into a few thousand
    folders); a folder removed since is made again, not a FileNotFoundError."""
    import shutil

    from data.workspace import Storage

    storage = Storage(str(tmp_path / "root"))
    first = f"{tmp_path}/root/ab/cd/one"
    storage.write_bytes(first, b"1")
    shutil.rmtree(tmp_path / "root" / "ab")
    storage.write_bytes(f"{tmp_path}/root/ab/cd/two", b"2")
    assert (tmp_path / "root" / "ab" / "cd" / "two").read_bytes() == b"2"
    assert not (tmp_path / "root" / "ab" / "cd" / "one").exists()
    assert [p.name for p in (tmp_path / "root" / "ab" / "cd").iterdir()] == ["two"]  # no temporary file left
