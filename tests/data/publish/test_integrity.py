"""Release immutability under races and tampering, versions, machine paths, and workspaces and releases on an
object store (moto's S3 server on 127.0.0.1, through s3fs)."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest
import s3fs
from moto.server import ThreadedMotoServer
from pydantic import ValidationError

from data.publish.folder import ReleaseExistsError, ReleaseResult
from data.publish.release import ReleaseConfig, ReleaseWriter
from data.stage import stats_from_table
from data.workspace import Storage, Workspace, sha256_bytes
from flows.engine.shards import ShardPlan, run_sharded, write_shard
from flows.xcm.config import Build3XCMConfig

FILES = {"a/data.parquet": b"rows", "README.md": b"card"}


def _write(root: str, version: str = "1.0.0", files: dict[str, bytes] = FILES) -> ReleaseWriter:
    writer = ReleaseWriter(ReleaseConfig(root=root, version=version), "x")
    for rel, data in files.items():
        writer.write_bytes(rel, data)
    return writer


def _commit(writer: ReleaseWriter, **more: str) -> ReleaseResult:
    """Commit with the least manifest the writer accepts: its name and version (`ReleaseManifest`)."""
    return writer.commit({"name": writer.name, "version": writer.version, **more})


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_version_that_appears_while_staging_is_never_written_into(tmp_path: Path) -> None:
    writer = _write(str(tmp_path))
    rival = tmp_path / "x" / "1.0.0"  # another writer published meanwhile, with other content
    rival.mkdir(parents=True)
    (rival / "README.md").write_bytes(b"another card")
    with pytest.raises(ReleaseExistsError, match=r"README\.md"):
        _commit(writer)
    assert _tree(rival) == {"README.md": b"another card"}  # nothing was moved into it
    assert not list((tmp_path / "x").glob(".staging-*"))


def test_an_identical_version_that_appears_while_staging_is_unchanged(tmp_path: Path) -> None:
    first = _write(str(tmp_path))
    second = _write(str(tmp_path))  # staged before the first one published
    assert _commit(first, by="first").status == "created"
    result = _commit(second, by="second")
    assert result.status == "unchanged" and result.manifest["by"] == "first"
    assert "a" in os.listdir(tmp_path / "x" / "1.0.0") and len(os.listdir(tmp_path / "x")) == 1


def test_a_release_whose_files_were_replaced_on_disk_is_not_unchanged(tmp_path: Path) -> None:
    """The manifest still lists the old hashes; the bytes on disk are what counts."""
    _commit(_write(str(tmp_path)))
    (tmp_path / "x" / "1.0.0" / "a" / "data.parquet").write_bytes(b"other rows")
    with pytest.raises(ReleaseExistsError, match=r"a/data\.parquet"):
        _commit(_write(str(tmp_path)))
    (tmp_path / "x" / "1.0.0" / "a" / "data.parquet").write_bytes(b"rows")
    (tmp_path / "x" / "1.0.0" / "a" / "extra.parquet").write_bytes(b"slipped in")
    with pytest.raises(ReleaseExistsError, match=r"a/extra\.parquet"):
        _commit(_write(str(tmp_path)))


def test_an_identical_rebuild_writes_nothing_under_the_release_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only release root holding the identical version: the rebuild compares and succeeds."""
    _commit(_write(str(tmp_path)))
    before = _tree(tmp_path)

    def read_only(self: Storage, path: str, data: bytes) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", path)

    monkeypatch.setattr(Storage, "write_bytes", read_only)
    writer = _write(str(tmp_path))
    assert _commit(writer).status == "unchanged"
    writer.abort()
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("version", ["1.0.0-..", "1.0.0-", "1.0.0-01", "1.0.0-a..b", "1.0.0+", "01.0.0", "1.0"])
def test_invalid_versions_are_refused(version: str) -> None:
    with pytest.raises(ValidationError):
        ReleaseConfig(version=version)


@pytest.mark.parametrize("version", ["1.0.0", "0.1.0-demo", "1.0.0-rc.1", "1.0.0-0.3.7", "1.0.0-x-y.z+build.5"])
def test_semantic_versions_are_accepted(version: str) -> None:
    assert ReleaseConfig(version=version).version == version


def test_the_manifest_names_local_files_by_name_and_hash_never_by_path(tmp_path: Path) -> None:
    weights = tmp_path / "machine-specific" / "open_clip_vit_b32.safetensors"
    weights.parent.mkdir()
    weights.write_bytes(b"weights")
    config = Build3XCMConfig(
        search={"backend": "local", "root": str(tmp_path / "corpus")},
        image_dedup={"embedding": {"embedder": {"pretrained": str(weights)}}},
        release={"root": str(tmp_path / "releases")},
    )
    text = json.dumps(config.released_config())
    assert str(tmp_path) not in text and "releases" not in text
    released = config.released_config()
    assert released["image_dedup"]["embedding"]["embedder"]["pretrained"] == (
        f"open_clip_vit_b32.safetensors (local file, sha256 {sha256_bytes(b'weights')})"
    )
    assert released["search"]["root"] == "corpus (local path)"
    assert "root" not in released["release"]


# -- an object store ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def bucket(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> str:
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    name = "cb-" + request.node.name.replace("_", "-")[:40].lower().strip("-")
    s3fs.S3FileSystem(skip_instance_cache=True).mkdir(name)
    return name


SCHEMA = pa.schema([pa.field("item", pa.int64(), nullable=False), pa.field("error", pa.string())])


def _rows(items: list[int]) -> pa.Table:
    return pa.Table.from_pylist([{"item": i, "error": None} for i in items], schema=SCHEMA)


def test_a_sharded_stage_sees_the_parts_other_processes_wrote_to_s3(bucket: str) -> None:
    """The orchestrator lists the stage folder (s3fs caches that listing), then workers, with their own
    filesystem instances, write the parts: the orchestrator must still find them all."""
    root = f"s3://{bucket}/workspace"
    orchestrator = Workspace(root, "b1")
    worker = Workspace(root, "b1")
    worker.storage.fs = s3fs.S3FileSystem(skip_instance_cache=True)  # another process's view of the bucket
    plan = ShardPlan(list(range(10)), 3, lambda chunk: _rows(list(chunk)), lambda t: stats_from_table("s", t), SCHEMA)

    def on_workers(stage: str, pending: list[int], run_here: Callable[[int], None]) -> Iterator[int]:
        for index in pending:
            write_shard(worker, stage, "fp", plan, index)
            yield index

    marker = run_sharded(orchestrator, "s", "fp", plan, map_shards=on_workers)
    assert marker.rows == 10 and marker.parts == 4
    assert orchestrator.read_table("s")["item"].to_pylist() == list(range(10))
    assert worker.is_current("s", "fp")


def test_a_release_on_s3_is_published_once_and_compared_after(bucket: str) -> None:
    root = f"s3://{bucket}/releases"
    assert _commit(_write(root), by="first").status == "created"
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    published = sorted(p.split("/x/1.0.0/", 1)[1] for p in fs.find(f"{bucket}/releases/x/1.0.0"))
    assert published == ["README.md", "a/data.parquet", "manifest.json"]
    assert not fs.exists(f"{bucket}/releases/x/1.0.0.publishing")  # the lock is gone
    assert _commit(_write(root), by="second").status == "unchanged"
    with pytest.raises(ReleaseExistsError, match=r"README\.md"):
        _commit(_write(root, files={**FILES, "README.md": b"another card"}))
