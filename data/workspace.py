"""The build workspace: one folder per build id under an fsspec root.

Layout::

    <root>/<build_id>/
        blobs/<sha[:2]>/<sha[2:4]>/<sha256>      content-addressed image bytes
        tables/<stage>/part-00000.parquet ...    a stage's output, written part by part
        tables/<stage>/_attempt.json             fingerprint of the attempt that wrote the parts
        tables/<stage>/_stats.json               counts kept and dropped by reason
        tables/<stage>/_SUCCESS                  completion marker (fingerprint, rows, each file's sha256 and
                                                 rows, the upstream stages' digests)
        files/...                                other stage files (demo corpus, figures)

Every write goes to a temporary name first, is flushed to disk (fsync on a local disk) and renamed into place, so a
crash never leaves a half-written file under a final name, and a marker is never durable before the data it vouches
for. A stage whose `_SUCCESS` fingerprint and upstream digests match, and whose files still hash to what the marker
recorded, is not run again; a stage that crashed keeps its finished parts and resumes from the first missing one.
Every read of a finished table checks the bytes against the marker, so a damaged or missing file is named, never
read as data.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import logging
import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from data.shards import InOrder, MapShards, ShardPlan

log = logging.getLogger(__name__)

SUCCESS = "_SUCCESS"
ATTEMPT = "_attempt.json"
STATS = "_stats.json"


class ReviewSummary(BaseModel):
    """Who decided a review stage's items and how it went: the auto-accept policy gives only `reviewer`; a human
    round adds its tasks, decisions and agreement, plus backend-specific outcome counts."""

    model_config = ConfigDict(extra="allow")

    reviewer: str
    location: str | None = None
    tasks: int | None = None
    new_tasks: int | None = None
    decided: int | None = None
    undecided: int | None = None
    closed_early: bool | None = None
    agreement: dict[str, Any] | None = None


COUNTS = ("stage", "rows_in", "kept", "dropped", "dropped_by_reason", "extra")


class StageStats(BaseModel):
    """Per-stage counters: rows in, kept, dropped and dropped by reason, plus the stage's details."""

    stage: str
    rows_in: int = 0
    kept: int = 0
    dropped: int = 0
    dropped_by_reason: dict[str, int] = Field(default_factory=dict)
    review: ReviewSummary | None = None  # review stages: who reviewed and how it went
    contact_sheet: str | None = None  # a PNG of what was merged, relative to the workspace
    summary_table: str | None = None  # a side table the flow publishes as a table artifact
    repaired_files: dict[str, str] | None = None  # damaged files redone: name -> what was wrong
    models: list[str] | None = None  # synthesis: the inpainting models used
    detector: str | None = None  # faces: the detector's model id
    masker: str | None = None  # masks: the masker's model id
    reuse: dict[str, Any] | None = None  # assembly: how often images are candidates, per task
    incomplete: list[Any] | None = None  # quintets: originals left without a full quintet
    left_over_by_outcome: dict[str, int] | None = None  # quintets
    cells_below_target: list[dict[str, Any]] | None = None  # quintets: culture x category cells short of target
    extra: dict[str, Any] = Field(default_factory=dict)  # informative details nobody reads back

    # The typed fields above are the details other code reads back (provenance, the flow summary, the runner). They
    # are written inside `extra` as they always were, so stats files and release manifests keep their shape.

    @model_validator(mode="before")
    @classmethod
    def _lift_typed_details(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("extra"), dict):
            extra = dict(data["extra"])
            lifted = {key: extra.pop(key) for key in TYPED_DETAILS if key in extra}
            data = {**data, **lifted, "extra": extra}
        return data

    @model_serializer(mode="wrap")
    def _fold_typed_details(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> dict[str, Any]:
        out = handler(self)
        extra = dict(out.get("extra", {}))
        for key in TYPED_DETAILS:
            value = out.pop(key, None)
            if key in self.model_fields_set:  # set, even to None: written as it was given
                if key == "review" and self.review is not None:
                    value = self.review.model_dump(mode=info.mode, exclude_unset=True)
                extra[key] = value
        out["extra"] = extra
        return out

    def reasons_text(self) -> str:
        """Drop reasons as one readable cell, e.g. `too_small: 2, not_an_image: 1`."""
        return ", ".join(f"{k}: {v}" for k, v in self.dropped_by_reason.items()) or "-"


# Every field that is not a count: derived, so a new typed detail is one field above.
TYPED_DETAILS = tuple(name for name in StageStats.model_fields if name not in COUNTS)


class FileRecord(BaseModel):
    """What a completion marker vouches for, per Parquet file of the stage."""

    sha256: str
    bytes: int
    rows: int


class StageMarker(BaseModel):
    stage: str
    fingerprint: str
    rows: int
    parts: int
    # name -> record of every Parquet file of the stage (parts and side tables). None: a marker written before the
    # workspace recorded them, which cannot vouch for its files and is treated as stale.
    files: dict[str, FileRecord] | None = None
    inputs: dict[str, str] = Field(default_factory=dict)  # upstream stage -> its digest when this stage ran

    def digest(self) -> str:
        """This stage's content and, through `inputs`, everything it was computed from."""
        return fingerprint(self.stage, self.files, self.inputs)

    def part_names(self) -> list[str]:
        return sorted(name for name in self.files or {} if name.startswith("part-"))


class DamagedFileError(OSError):
    """A workspace file does not hold what its completion marker (or its content address) says it holds."""


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
        try:
            self.fs, self.root = fsspec.core.url_to_fs(self.url)
        except (ValueError, ImportError) as exc:  # an unknown protocol, or one whose package is missing
            raise StorageError(f"{url!r} is not a usable fsspec URL: {exc}") from None
        self.root = self.root.rstrip("/")
        self.local = "file" in self.fs.protocol

    def path(self, *parts: str) -> str:
        return "/".join([self.root, *[p.strip("/") for p in parts if p]])

    def display(self, path: str) -> str:
        """How a message names `path`: a plain path on a local disk, a full URL elsewhere."""
        return path if self.local else self.fs.unstrip_protocol(path)

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
                if self.local:  # the bytes reach the disk before the name does
                    handle.flush()
                    os.fsync(handle.fileno())
            if self.local:
                os.replace(tmp, path)
                _fsync_dir(parent)  # ...and the rename itself survives a power cut
            else:
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

    def write_parquet(self, path: str, table: pa.Table, row_group_size: int | None = None) -> FileRecord:
        """Write `table` atomically; returns the record a completion marker keeps of it."""
        buffer = io.BytesIO()
        pq.write_table(table, buffer, row_group_size=row_group_size, compression="zstd")
        data = buffer.getvalue()
        self.write_bytes(path, data)
        return FileRecord(sha256=sha256_bytes(data), bytes=len(data), rows=table.num_rows)

    def read_parquet(self, path: str, expected: FileRecord | None = None) -> pa.Table:
        """Read a Parquet file; with `expected`, its bytes must hash to the record first."""
        return self.read_parquet_recorded(path, expected)[0]

    def read_parquet_recorded(self, path: str, expected: FileRecord | None = None) -> tuple[pa.Table, FileRecord]:
        try:
            data = self.read_bytes(path)
        except FileNotFoundError:
            raise DamagedFileError(errno.ENOENT, "the file is missing", self.display(path)) from None
        digest = sha256_bytes(data)
        if expected is not None and (digest, len(data)) != (expected.sha256, expected.bytes):
            raise DamagedFileError(
                errno.EIO,
                f"its bytes (sha256 {digest[:12]}, {len(data)} bytes) are not those its completion marker recorded "
                f"(sha256 {expected.sha256[:12]}, {expected.bytes} bytes)",
                self.display(path),
            )
        try:
            table = pq.read_table(pa.BufferReader(data))
        except (pa.ArrowException, OSError) as exc:
            raise DamagedFileError(errno.EIO, f"not a readable Parquet file ({exc})", self.display(path)) from None
        return table, FileRecord(sha256=digest, bytes=len(data), rows=table.num_rows)

    def listdir(self, path: str) -> list[str]:
        # Object-store filesystems (s3fs, gcsfs) cache listings: parts that another process (a Dask worker) wrote
        # since would be missed. A listing is a decision input here, so it is always fresh.
        self.fs.invalidate_cache(path)
        if not self.fs.exists(path):
            return []
        return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(path, detail=False))

    def rm(self, path: str) -> None:
        if self.fs.exists(path):
            self.fs.rm(path, recursive=True)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class StorageError(ValueError):
    """A workspace or release root that cannot be used (unknown protocol, a file where a folder must be)."""


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
        path = self.path(sha256)
        data = self.storage.read_bytes(path)
        if sha256_bytes(data) != sha256:
            raise DamagedFileError(
                errno.EIO,
                "blob is corrupt in the store: its bytes do not hash to its name; delete it and rerun with a new "
                "--build-id, or restore it from a backup",
                self.storage.display(path),
            )
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
        self._inputs: dict[str, dict[str, str]] = {}
        self._repaired: dict[str, dict[str, str]] = {}

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

    def bind_inputs(self, stage: str, inputs: dict[str, str]) -> None:
        """The digests of the upstream stages `stage` is about to be computed from (the graph knows them): its
        marker records them, and an attempt computed from other inputs is stale."""
        self._inputs[stage] = dict(inputs)

    def damage(self, stage: str) -> dict[str, str]:
        """Files of a finished stage that no longer hold what its marker recorded: name -> what is wrong."""
        marker = self.marker(stage)
        if marker is None:
            return {}
        if marker.files is None:
            return {SUCCESS: "the marker predates the workspace's file records"}
        damaged = {}
        for name, record in sorted(marker.files.items()):
            path = f"{self.stage_dir(stage)}/{name}"
            try:
                data = self.storage.read_bytes(path)
            except FileNotFoundError:
                damaged[name] = "missing"
                continue
            if len(data) != record.bytes or sha256_bytes(data) != record.sha256:
                damaged[name] = "its bytes changed since the stage finished"
        return damaged

    def is_current(self, stage: str, fingerprint: str) -> bool:
        """Finished with this fingerprint, from the upstream content bound now, and every file intact."""
        marker = self.marker(stage)
        return (
            marker is not None
            and marker.fingerprint == fingerprint
            and marker.inputs == self._inputs.get(stage, marker.inputs)
            and not self.damage(stage)
        )

    def is_done(self, stage: str, fingerprint: str) -> bool:
        return self.is_current(stage, fingerprint)

    def discard(self, stage: str, files: list[str]) -> None:
        """Forget that `stage` finished, and remove `files` of it: a rerun redoes exactly those (a sharded stage
        keeps its intact parts)."""
        self.storage.rm(f"{self.stage_dir(stage)}/{SUCCESS}")
        for name in files:
            self.storage.rm(f"{self.stage_dir(stage)}/{name}")

    def repair(self, stage: str) -> dict[str, str]:
        """Discard a finished stage whose files are damaged, so that running it redoes them; returns what was
        wrong (empty: nothing). The stage's next stats say what was repaired."""
        damaged = self.damage(stage)
        if damaged:
            log.warning("build %s, stage %s: damaged files, redoing them: %s", self.build_id, stage, damaged)
            self.discard(stage, [name for name in damaged if name != SUCCESS])
            self._repaired[stage] = damaged
        return damaged

    def stats(self, stage: str) -> StageStats:
        return StageStats(**self.storage.read_json(f"{self.stage_dir(stage)}/{STATS}"))

    # -- tables -----------------------------------------------------------------------------------------------

    def _finished(self, stage: str) -> StageMarker:
        marker = self.marker(stage)
        if marker is None:
            raise FileNotFoundError(f"stage {stage!r} has not completed in build {self.build_id!r}")
        if marker.files is None:
            raise DamagedFileError(
                errno.EIO,
                "this completion marker predates the workspace's file records; rerun the build to redo the stage",
                self.storage.display(f"{self.stage_dir(stage)}/{SUCCESS}"),
            )
        return marker

    def read_table(self, stage: str) -> pa.Table:
        """The stage's table, read from exactly the parts its marker lists, each checked against its record."""
        marker = self._finished(stage)
        assert marker.files is not None
        tables = [
            self.storage.read_parquet(f"{self.stage_dir(stage)}/{name}", marker.files[name])
            for name in marker.part_names()
        ]
        return pa.concat_tables(tables)

    def read_extra_table(self, stage: str, name: str) -> pa.Table:
        marker = self._finished(stage)
        assert marker.files is not None
        file = f"{name}.parquet"
        if file not in marker.files:
            raise FileNotFoundError(f"stage {stage!r} of build {self.build_id!r} has no side table {name!r}")
        return self.storage.read_parquet(f"{self.stage_dir(stage)}/{file}", marker.files[file])

    def _parts(self, stage: str) -> list[str]:
        return [
            n for n in self.storage.listdir(self.stage_dir(stage)) if n.startswith("part-") and n.endswith(".parquet")
        ]

    def _attempt_key(self, stage: str, key: str) -> str:
        return f"{key}:inputs={fingerprint(self._inputs.get(stage, {}))[:16]}"

    def _begin(self, stage: str, key: str) -> None:
        """Start or resume an attempt: parts from an attempt with another key (config, cut or inputs) are stale."""
        key = self._attempt_key(stage, key)
        attempt_path = f"{self.stage_dir(stage)}/{ATTEMPT}"
        if self.storage.exists(attempt_path) and self.storage.read_json(attempt_path).get("fingerprint") == key:
            return
        self.storage.rm(self.stage_dir(stage))
        self.storage.write_json(attempt_path, {"stage": stage, "fingerprint": key})

    def _finish(
        self, stage: str, fingerprint: str, stats: StageStats, files: dict[str, FileRecord], parts: int
    ) -> StageMarker:
        """Stats, then the marker: written last, and only after every file it vouches for is on disk."""
        if stage in self._repaired:
            stats = stats.model_copy(update={"repaired_files": self._repaired.pop(stage)})
        self.storage.write_json(f"{self.stage_dir(stage)}/{STATS}", stats.model_dump(mode="json"))
        rows = sum(record.rows for name, record in files.items() if name.startswith("part-"))
        marker = StageMarker(
            stage=stage,
            fingerprint=fingerprint,
            rows=rows,
            parts=parts,
            files=dict(sorted(files.items())),
            inputs=self._inputs.get(stage, {}),
        )
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
        files = {}
        for name, (side, side_schema) in (extra_tables or {}).items():
            file = f"{name}.parquet"
            files[file] = self.storage.write_parquet(f"{self.stage_dir(stage)}/{file}", _conform(side, side_schema))
        files[_part_name(0)] = self.storage.write_parquet(
            f"{self.stage_dir(stage)}/{_part_name(0)}", _conform(table, schema)
        )
        return self._finish(stage, fingerprint, stats, files, 1)

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
        # The parts are read once: for the stage's counts, and for the records the marker keeps of them.
        tables, files = [], {}
        for name in parts:
            table, files[name] = self.storage.read_parquet_recorded(f"{self.stage_dir(stage)}/{name}")
            tables.append(table)
        return self._finish(stage, fingerprint, plan.summarize(pa.concat_tables(tables)), files, plan.shards)

    def write_shard(self, stage: str, fingerprint: str, plan: ShardPlan, index: int) -> int:
        """Process one shard and write its part; returns its rows. Any process that sees the workspace may call it
        (a Dask worker does), but only inside the attempt that `run_sharded` began: a shard of an attempt that was
        since restarted with another config must not land among the new parts."""
        attempt = self.storage.read_json(f"{self.stage_dir(stage)}/{ATTEMPT}")["fingerprint"]
        if attempt != self._attempt_key(stage, plan.attempt_key(fingerprint)):
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
