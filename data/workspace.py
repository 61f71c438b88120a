"""The build workspace: one folder per build id under an fsspec root.

Layout::

    <root>/<build_id>/
        blobs/<sha[:2]>/<sha[2:4]>/<sha256>      content-addressed image bytes
        tables/<stage>/part-00000.parquet ...    a stage's output, written part by part
        tables/<stage>/_attempt.json             fingerprint of the attempt that wrote the parts
        tables/<stage>/_stats.json               counts kept and dropped by reason
        tables/<stage>/_SUCCESS                  completion marker (fingerprint, rows)
        files/...                                other stage files (demo corpus, figures)

Every write goes to a temporary name first and is renamed into place, so a crash never leaves a half-written
file under a final name. A stage whose `_SUCCESS` fingerprint matches is not run again; a stage that crashed
keeps its finished parts and resumes from the first missing one.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, Field

from data.shards import InOrder, MapShards, ShardPlan

SUCCESS = "_SUCCESS"
ATTEMPT = "_attempt.json"
STATS = "_stats.json"


class StageStats(BaseModel):
    """Per-stage counters (design brief: kept, dropped, dropped by reason)."""

    stage: str
    rows_in: int = 0
    kept: int = 0
    dropped: int = 0
    dropped_by_reason: dict[str, int] = Field(default_factory=dict)
    extra: dict[str, Any] = Field(default_factory=dict)

    def reasons_text(self) -> str:
        """Drop reasons as one readable cell, e.g. `too_small: 2, not_an_image: 1`."""
        return ", ".join(f"{k}: {v}" for k, v in self.dropped_by_reason.items()) or "-"


class StageMarker(BaseModel):
    stage: str
    fingerprint: str
    rows: int
    parts: int


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


_hashes: dict[tuple[str, int, int], str] = {}


def file_sha256(path: Path) -> str:
    """sha256 of the file, cached per (path, size, mtime) in this process; ~0.6 s/GB here, small next to loading
    the same bytes into a model, and it tells two same-sized fine-tunes apart (a name or size would not)."""
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _hashes:
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 22), b""):
                digest.update(chunk)
        _hashes[key] = digest.hexdigest()
    return _hashes[key]


def fingerprint(*parts: Any) -> str:
    """A stable hash of JSON-serialisable parts (configs, upstream fingerprints, versions)."""
    payload = json.dumps(parts, sort_keys=True, default=_json_default, ensure_ascii=False)
    return hashlib.sha256(payload.encode()).hexdigest()


def _json_default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(f"cannot fingerprint {type(value).__name__}")


class Storage:
    """Atomic file operations on an fsspec filesystem."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.fs, self.root = fsspec.core.url_to_fs(self.url)
        self.root = self.root.rstrip("/")

    def path(self, *parts: str) -> str:
        return "/".join([self.root, *[p.strip("/") for p in parts if p]])

    def exists(self, path: str) -> bool:
        return self.fs.exists(path)

    @contextmanager
    def open_atomic(self, path: str) -> Iterator[IO[bytes]]:
        """Write to `path` through a temporary sibling that is renamed into place on success."""
        parent = path.rsplit("/", 1)[0]
        self.fs.makedirs(parent, exist_ok=True)
        tmp = f"{parent}/.tmp-{uuid.uuid4().hex}-{path.rsplit('/', 1)[-1]}"
        try:
            with self.fs.open(tmp, "wb") as handle:
                yield handle
            self.fs.mv(tmp, path)
        except BaseException:
            if self.fs.exists(tmp):
                self.fs.rm(tmp)
            raise

    def write_bytes(self, path: str, data: bytes) -> None:
        with self.open_atomic(path) as handle:
            handle.write(data)

    def read_bytes(self, path: str) -> bytes:
        with self.fs.open(path, "rb") as handle:
            return handle.read()

    def write_json(self, path: str, value: Any) -> None:
        self.write_bytes(path, (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode())

    def read_json(self, path: str) -> Any:
        return json.loads(self.read_bytes(path))

    def write_parquet(self, path: str, table: pa.Table, row_group_size: int | None = None) -> None:
        with self.open_atomic(path) as handle:
            pq.write_table(table, handle, row_group_size=row_group_size, compression="zstd")

    def read_parquet(self, path: str) -> pa.Table:
        with self.fs.open(path, "rb") as handle:
            return pq.read_table(handle)

    def listdir(self, path: str) -> list[str]:
        if not self.fs.exists(path):
            return []
        return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(path, detail=False))

    def rm(self, path: str) -> None:
        if self.fs.exists(path):
            self.fs.rm(path, recursive=True)


class BlobStore:
    """Content-addressed store for image bytes, keyed by sha256."""

    def __init__(self, storage: Storage, prefix: str) -> None:
        self.storage = storage
        self.prefix = prefix

    def path(self, sha256: str) -> str:
        return self.storage.path(self.prefix, sha256[:2], sha256[2:4], sha256)

    def put(self, data: bytes, digest: str | None = None) -> str:
        """Store `data`; `digest` is its sha256 when the caller has already computed it (it is not hashed twice)."""
        digest = digest or sha256_bytes(data)
        path = self.path(digest)
        if not self.storage.exists(path):  # idempotent: the same bytes always land at the same key
            self.storage.write_bytes(path, data)
        return digest

    def get(self, sha256: str) -> bytes:
        data = self.storage.read_bytes(self.path(sha256))
        if sha256_bytes(data) != sha256:
            raise OSError(f"blob {sha256} is corrupt in the store")
        return data

    def size(self, sha256: str) -> int:
        return int(self.storage.fs.size(self.path(sha256)))

    def __contains__(self, sha256: str) -> bool:
        return self.storage.exists(self.path(sha256))


class Workspace:
    """The workspace of one build."""

    def __init__(self, root: str, build_id: str) -> None:
        if not build_id or "/" in build_id or build_id.startswith("."):
            raise ValueError(f"invalid build id {build_id!r}")
        self.build_id = build_id
        self.storage = Storage(f"{root.rstrip('/')}/{build_id}")
        self.blobs = BlobStore(self.storage, "blobs")

    @property
    def url(self) -> str:
        return self.storage.url

    def file_path(self, *parts: str) -> str:
        return self.storage.path("files", *parts)

    def stage_dir(self, stage: str) -> str:
        return self.storage.path("tables", stage)

    # -- completion -------------------------------------------------------------------------------------------

    def marker(self, stage: str) -> StageMarker | None:
        path = f"{self.stage_dir(stage)}/{SUCCESS}"
        if not self.storage.exists(path):
            return None
        return StageMarker(**self.storage.read_json(path))

    def is_done(self, stage: str, fingerprint: str) -> bool:
        marker = self.marker(stage)
        return marker is not None and marker.fingerprint == fingerprint

    def stats(self, stage: str) -> StageStats:
        return StageStats(**self.storage.read_json(f"{self.stage_dir(stage)}/{STATS}"))

    # -- tables -----------------------------------------------------------------------------------------------

    def read_table(self, stage: str) -> pa.Table:
        marker = self.marker(stage)
        if marker is None:
            raise FileNotFoundError(f"stage {stage!r} has not completed in build {self.build_id!r}")
        tables = [self.storage.read_parquet(f"{self.stage_dir(stage)}/{name}") for name in self._parts(stage)]
        return pa.concat_tables(tables)

    def _parts(self, stage: str) -> list[str]:
        return [
            n for n in self.storage.listdir(self.stage_dir(stage)) if n.startswith("part-") and n.endswith(".parquet")
        ]

    def _begin(self, stage: str, fingerprint: str) -> None:
        """Start or resume an attempt: parts from an attempt with another fingerprint are stale."""
        attempt_path = f"{self.stage_dir(stage)}/{ATTEMPT}"
        if self.storage.exists(attempt_path) and self.storage.read_json(attempt_path).get("fingerprint") == fingerprint:
            return
        self.storage.rm(self.stage_dir(stage))
        self.storage.write_json(attempt_path, {"stage": stage, "fingerprint": fingerprint})

    def _finish(self, stage: str, fingerprint: str, stats: StageStats, rows: int, parts: int) -> StageMarker:
        self.storage.write_json(f"{self.stage_dir(stage)}/{STATS}", stats.model_dump(mode="json"))
        marker = StageMarker(stage=stage, fingerprint=fingerprint, rows=rows, parts=parts)
        self.storage.write_json(f"{self.stage_dir(stage)}/{SUCCESS}", marker.model_dump(mode="json"))
        return marker

    def write_stage(
        self,
        stage: str,
        fingerprint: str,
        table: pa.Table,
        schema: pa.Schema,
        stats: StageStats,
        extra_tables: dict[str, tuple[pa.Table, pa.Schema]] | None = None,
    ) -> StageMarker:
        """Write a whole stage output (plus named side tables) in one part and mark the stage complete."""
        self._begin(stage, fingerprint)
        for name, (side, side_schema) in (extra_tables or {}).items():
            self.storage.write_parquet(f"{self.stage_dir(stage)}/{name}.parquet", _conform(side, side_schema))
        table = _conform(table, schema)
        self.storage.write_parquet(f"{self.stage_dir(stage)}/{_part_name(0)}", table)
        return self._finish(stage, fingerprint, stats, table.num_rows, 1)

    def read_extra_table(self, stage: str, name: str) -> pa.Table:
        if self.marker(stage) is None:
            raise FileNotFoundError(f"stage {stage!r} has not completed in build {self.build_id!r}")
        return self.storage.read_parquet(f"{self.stage_dir(stage)}/{name}.parquet")

    def run_sharded(
        self,
        stage: str,
        fingerprint: str,
        plan: ShardPlan,
        on_progress: Callable[[int, int], None] | None = None,
        map_shards: MapShards | None = None,
    ) -> StageMarker:
        """Run a sharded stage: one Parquet part per shard, then the stage's stats and marker.

        Parts that already exist from an attempt with the same fingerprint are kept, so a crashed stage resumes
        at its unfinished shards and never redoes finished ones. `map_shards` decides where the pending shards run
        (default: in order, here); `on_progress` gets (items done, items) as shards finish.
        """
        self._begin(stage, plan.attempt_key(fingerprint))
        done = set(self._parts(stage))
        pending = [index for index in range(plan.shards) if _part_name(index) not in done]
        items_done = len(plan.items) - sum(len(plan.chunk(index)) for index in pending)
        if on_progress is not None:
            on_progress(items_done, len(plan.items))
        runner = map_shards or InOrder()
        for index in runner(stage, pending, lambda i: self.write_shard(stage, fingerprint, plan, i)):
            items_done += len(plan.chunk(index))
            if on_progress is not None:
                on_progress(items_done, len(plan.items))
        parts = [_part_name(index) for index in range(plan.shards)]
        written = self._parts(stage)
        missing = sorted(set(parts) - set(written))
        if missing:
            raise RuntimeError(f"stage {stage!r}: shards {[int(n[5:10]) for n in missing]} have no part after running")
        for name in set(written) - set(parts):  # from a longer item list
            self.storage.rm(f"{self.stage_dir(stage)}/{name}")
        table = pa.concat_tables([self.storage.read_parquet(f"{self.stage_dir(stage)}/{n}") for n in parts])
        return self._finish(stage, fingerprint, plan.summarize(table), table.num_rows, plan.shards)

    def write_shard(self, stage: str, fingerprint: str, plan: ShardPlan, index: int) -> int:
        """Process one shard and write its part; returns its rows. Any process that sees the workspace may call it
        (a Dask worker does), but only inside the attempt that `run_sharded` began: a shard of an attempt that was
        since restarted with another config must not land among the new parts."""
        attempt = self.storage.read_json(f"{self.stage_dir(stage)}/{ATTEMPT}")["fingerprint"]
        if attempt != plan.attempt_key(fingerprint):
            raise RuntimeError(f"stage {stage!r} was restarted with another config; shard {index} not written")
        table = _conform(plan.process(plan.chunk(index)), plan.schema)
        self.storage.write_parquet(f"{self.stage_dir(stage)}/{_part_name(index)}", table)
        return table.num_rows


def _part_name(index: int) -> str:
    return f"part-{index:05d}.parquet"


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Cast to the declared schema; a column mismatch is a programming error, reported by name."""
    if table.schema.names != schema.names:
        raise ValueError(f"table columns {table.schema.names} do not match schema {schema.names}")
    return table.cast(schema)
