"""A shard's blobs are flushed to disk once, together, not with two fsyncs each (issue 31)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from data import workspace
from data.workspace import BlobStore, Storage


def test_blobs_in_a_deferred_block_sync_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fsyncs: list[int] = []
    syncs: list[str] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        fsyncs.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    monkeypatch.setattr(workspace, "_sync_filesystem", syncs.append)
    blobs = BlobStore(Storage(str(tmp_path)), "blobs")
    with blobs.storage.deferred_sync():
        with blobs.storage.deferred_sync():  # nested: the outer block syncs
            digests = [blobs.put(bytes([i]) * 300) for i in range(20)]
        assert not syncs
    assert fsyncs == [] and syncs == [blobs.storage.root]
    assert [blobs.get(d) for d in digests] == [bytes([i]) * 300 for i in range(20)]
    assert not list(tmp_path.rglob(".tmp-*"))
    blobs.put(b"after" * 100)  # outside a block: each write is synced again (file and folder)
    assert len(fsyncs) == 2


def test_a_failed_block_does_not_sync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    syncs: list[str] = []
    monkeypatch.setattr(workspace, "_sync_filesystem", syncs.append)
    storage = Storage(str(tmp_path))
    with pytest.raises(RuntimeError), storage.deferred_sync():
        storage.write_bytes(storage.path("a"), b"x")
        raise RuntimeError("shard failed")
    assert not syncs
    storage.write_bytes(storage.path("b"), b"y")  # the thread is no longer deferring


def test_sync_filesystem_runs(tmp_path: Path) -> None:
    workspace._sync_filesystem(str(tmp_path))


def test_a_block_that_wrote_nothing_under_a_root_not_made_yet_syncs_without_error(tmp_path: Path) -> None:
    """A shard whose hits were all refused writes no blob, so its store's folder may not exist (seen in CI)."""
    storage = Storage(str(tmp_path / "ws" / "b"))
    with storage.deferred_sync():
        pass
    assert not (tmp_path / "ws").exists()
