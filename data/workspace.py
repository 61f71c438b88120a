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
recorded, is current (`is_current`); an attempt that crashed keeps its finished parts for the next attempt with the
same key. Every read of a finished table checks the bytes against the marker, so a damaged or missing file is named,
never read as data.

The workspace stores and checks; it runs nothing. The engine (`flows/engine/`) runs the stages and their shards, and
passes in everything a marker or an attempt records: the stage's fingerprint, the attempt's key, the digests of the
upstream stages, the stats.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import io
import json
import logging
import os
import threading
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, TypeVar, overload

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, Field

from data.stage_stats import StageStats

log = logging.getLogger(__name__)

SUCCESS = "_SUCCESS"
ATTEMPT = "_attempt.json"
STATS = "_stats.json"


# The local folders this process made (`Storage.open_atomic`): one makedirs per folder, not one per file written.
_LOCAL_FOLDERS_MADE: set[str] = set()


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


@functools.lru_cache(maxsize=16)
def _marker_digest(raw: bytes) -> str:
    """The same bytes give the same marker, so the same digest (a rewritten marker is other bytes)."""
    return StageMarker(**json.loads(raw)).digest()


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

    @contextmanager
    def deferred_sync(self) -> Iterator[None]:
        """Local atomic writes in this thread skip their own fsyncs, and the whole filesystem is flushed once on the
        way out (before anything that records them, such as a stage's part, is written). Two fsyncs per file cost
        ~4 ms each on a VM disk: for 100k blobs, longer than importing them."""
        roots = _deferred_roots()
        if not self.local or self.root in roots:
            yield
            return
        roots.add(self.root)
        try:
            yield
        finally:
            roots.discard(self.root)
        _sync_filesystem(self.root)  # only on success: a failed block leaves no record that trusts its files

    def path(self, *parts: str) -> str:
        return "/".join([self.root, *[p.strip("/") for p in parts if p]])

    def display(self, path: str) -> str:
        """How a message names `path`: a plain path on a local disk, a full URL elsewhere."""
        return path if self.local else self.fs.unstrip_protocol(path)

    def exists(self, path: str) -> bool:
        # On a local disk the os calls, not fsspec's wrappers: a blob store asks this once per image.
        return os.path.exists(path) if self.local else bool(self.fs.exists(path))

    def _open(self, path: str, mode: str) -> IO[bytes]:
        return open(path, mode) if self.local else self.fs.open(path, mode)

    def _open_new(self, path: str, parent: str) -> IO[bytes]:
        """`path` opened for writing; a local folder removed since this process made it is made again."""
        try:
            return self._open(path, "wb")
        except FileNotFoundError:
            if not self.local:
                raise
            os.makedirs(parent, exist_ok=True)
            return self._open(path, "wb")

    @contextmanager
    def open_atomic(self, path: str) -> Iterator[IO[bytes]]:
        """Write to `path` through a temporary sibling that is renamed into place on success."""
        parent = path.rsplit("/", 1)[0]
        if not self.local:
            self.fs.makedirs(parent, exist_ok=True)
        elif parent not in _LOCAL_FOLDERS_MADE:  # a blob store writes a million files into a few thousand folders
            os.makedirs(parent, exist_ok=True)
            _LOCAL_FOLDERS_MADE.add(parent)
        tmp = f"{parent}/.tmp-{uuid.uuid4().hex}-{path.rsplit('/', 1)[-1]}"
        try:
            with self._open_new(tmp, parent) as handle:
                yield handle
                deferred = self.local and self.root in _deferred_roots()
                if self.local and not deferred:  # the bytes reach the disk before the name does
                    handle.flush()
                    os.fsync(handle.fileno())
            if self.local:
                os.replace(tmp, path)
                if not deferred:
                    fsync_dir(parent)  # ...and the rename itself survives a power cut
            else:
                self.fs.mv(tmp, path)
        except BaseException:
            if self.exists(tmp):
                self.fs.rm(tmp)
            raise

    def write_bytes(self, path: str, data: bytes) -> None:
        with self.open_atomic(path) as handle:
            handle.write(data)

    def read_bytes(self, path: str) -> bytes:
        with self._open(path, "rb") as handle:
            data: bytes = handle.read()
            return data

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


# The storage roots whose local writes skip their fsyncs, per thread (`Storage.deferred_sync`).
_deferring = threading.local()


def _deferred_roots() -> set[str]:
    roots: set[str] | None = getattr(_deferring, "roots", None)
    if roots is None:
        roots = _deferring.roots = set()
    return roots


def _sync_filesystem(path: str) -> None:
    """Flush every write to the local filesystem holding `path`: one syncfs(2) where libc has it, else sync(2)."""
    import ctypes

    while not os.path.exists(path) and os.path.dirname(path) != path:  # a root not made yet: its filesystem's
        path = os.path.dirname(path)  # nearest existing folder is on the same filesystem (or nothing was written)
    fd = os.open(path, os.O_RDONLY)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        syncfs = getattr(libc, "syncfs", None)
        if syncfs is None or syncfs(fd) != 0:
            os.sync()
    finally:
        os.close(fd)


def fsync_dir(path: str) -> None:
    """Make a rename (or a new entry) in the local folder `path` durable."""
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


S = TypeVar("S", bound=StageStats)


class Workspace:
    """The workspace of one build: its blobs, and per stage its parts, side tables, stats and completion marker.

    It stores and checks; it never runs a stage. What a marker records (the stage's fingerprint, the digests of the
    inputs it was computed from) and when an attempt is stale are the engine's to say (`flows/engine/`): they are
    passed in, never remembered here."""

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

    def _marker_bytes(self, stage: str) -> bytes | None:
        path = f"{self.stage_dir(stage)}/{SUCCESS}"
        if not self.storage.exists(path):
            return None
        return self.storage.read_bytes(path)

    def marker(self, stage: str) -> StageMarker | None:
        raw = self._marker_bytes(stage)
        return None if raw is None else StageMarker(**json.loads(raw))

    def marker_digest(self, stage: str) -> str | None:
        """`marker(stage).digest()`, remembered by the marker's bytes. A sharded stage asks for its inputs' digests
        at every shard; at a million images an upstream marker records about 3,900 files (620 KB), and parsing it
        and serialising it again at each of as many shards made the stage's cost grow with the square of its size."""
        raw = self._marker_bytes(stage)
        return None if raw is None else _marker_digest(raw)

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

    def is_current(self, stage: str, fingerprint: str, inputs: Mapping[str, str] | None = None) -> bool:
        """Finished with this fingerprint, from these upstream digests (None: whichever it recorded), and every
        file intact."""
        marker = self.marker(stage)
        return (
            marker is not None
            and marker.fingerprint == fingerprint
            and (inputs is None or marker.inputs == dict(inputs))
            and not self.damage(stage)
        )

    def inputs_are_current(self, stage: str) -> bool:
        """Whether `stage` finished and every stage upstream of it, all the way up, has the digest its downstream
        markers recorded when they ran: then `stage` was computed from exactly what the workspace holds now."""
        todo, seen = [stage], {stage}
        while todo:
            marker = self.marker(todo.pop())
            if marker is None:
                return False
            for upstream, recorded in marker.inputs.items():
                if self.marker_digest(upstream) != recorded:
                    return False
                if upstream not in seen:
                    seen.add(upstream)
                    todo.append(upstream)
        return True

    def discard(self, stage: str, files: list[str]) -> None:
        """Forget that `stage` finished, and remove `files` of it: a rerun redoes exactly those (a sharded stage
        keeps its intact parts)."""
        self.storage.rm(f"{self.stage_dir(stage)}/{SUCCESS}")
        for name in files:
            self.storage.rm(f"{self.stage_dir(stage)}/{name}")

    def repair(self, stage: str) -> dict[str, str]:
        """Discard a finished stage whose files are damaged, so that running it redoes them; returns what was
        wrong (empty: nothing), which the caller records in the stage's next stats (`repaired_files`)."""
        damaged = self.damage(stage)
        if damaged:
            log.warning("build %s, stage %s: damaged files, redoing them: %s", self.build_id, stage, damaged)
            self.discard(stage, [name for name in damaged if name != SUCCESS])
        return damaged

    @overload
    def stats(self, stage: str) -> StageStats: ...
    @overload
    def stats(self, stage: str, model: type[S]) -> S: ...
    def stats(self, stage: str, model: type[StageStats] = StageStats) -> StageStats:
        """The stage's stats, read as `model`: a subclass of StageStats types the stage's own details."""
        return model(**self.storage.read_json(f"{self.stage_dir(stage)}/{STATS}"))

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

    # -- attempts and parts -----------------------------------------------------------------------------------

    def begin_attempt(self, stage: str, key: str) -> None:
        """Start or resume an attempt at `stage`: the files of an attempt with another key (the engine's word for
        its config, cut and inputs) are stale and removed; those of the same attempt are kept."""
        if self.attempt(stage) == key:
            return
        self.storage.rm(self.stage_dir(stage))
        self.storage.write_json(f"{self.stage_dir(stage)}/{ATTEMPT}", {"stage": stage, "fingerprint": key})

    def attempt(self, stage: str) -> str | None:
        """The key of the attempt under way (or finished) at `stage`; None: none began."""
        path = f"{self.stage_dir(stage)}/{ATTEMPT}"
        if not self.storage.exists(path):
            return None
        key: str | None = self.storage.read_json(path).get("fingerprint")
        return key

    def parts(self, stage: str) -> list[str]:
        """The part files of `stage` on disk now (a fresh listing: other processes may have written some)."""
        return [
            n for n in self.storage.listdir(self.stage_dir(stage)) if n.startswith("part-") and n.endswith(".parquet")
        ]

    def write_part(self, stage: str, index: int, table: pa.Table, schema: pa.Schema) -> FileRecord:
        """Write part `index` of `stage` atomically, cast to the declared `schema`. Any process that sees the
        workspace may call it (a Dask worker does)."""
        return self.storage.write_parquet(f"{self.stage_dir(stage)}/{part_name(index)}", _conform(table, schema))

    def collect_parts(self, stage: str, parts: int) -> tuple[pa.Table, dict[str, FileRecord]]:
        """Parts 0..parts-1 of `stage`, read once: their table and the records a marker keeps of them. A missing
        part fails the stage; parts beyond them (from a longer item list) are removed."""
        names = [part_name(index) for index in range(parts)]
        written = self.parts(stage)
        missing = sorted(set(names) - set(written))
        if missing:
            raise RuntimeError(f"stage {stage!r}: shards {[int(n[5:10]) for n in missing]} have no part after running")
        for name in set(written) - set(names):
            self.storage.rm(f"{self.stage_dir(stage)}/{name}")
        tables, files = [], {}
        for name in names:
            table, files[name] = self.storage.read_parquet_recorded(f"{self.stage_dir(stage)}/{name}")
            tables.append(table)
        return pa.concat_tables(tables), files

    def finish(
        self,
        stage: str,
        fingerprint: str,
        stats: StageStats,
        files: dict[str, FileRecord],
        parts: int,
        inputs: Mapping[str, str] | None = None,
    ) -> StageMarker:
        """Stats, then the marker: written last, and only after every file it vouches for is on disk. `inputs`:
        the upstream digests the stage was computed from, which the marker records."""
        self.storage.write_json(f"{self.stage_dir(stage)}/{STATS}", stats.model_dump(mode="json"))
        rows = sum(record.rows for name, record in files.items() if name.startswith("part-"))
        marker = StageMarker(
            stage=stage,
            fingerprint=fingerprint,
            rows=rows,
            parts=parts,
            files=dict(sorted(files.items())),
            inputs=dict(inputs or {}),
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
        *,
        inputs: Mapping[str, str] | None = None,
        attempt: str | None = None,
    ) -> StageMarker:
        """Write a whole stage output (plus named side tables) in one part and mark the stage complete. `attempt`
        is the key of this attempt (default: the fingerprint); `inputs` as for `finish`."""
        self.begin_attempt(stage, fingerprint if attempt is None else attempt)
        files = {}
        for name, (side, side_schema) in (extra_tables or {}).items():
            file = f"{name}.parquet"
            files[file] = self.storage.write_parquet(f"{self.stage_dir(stage)}/{file}", _conform(side, side_schema))
        files[part_name(0)] = self.write_part(stage, 0, table, schema)
        return self.finish(stage, fingerprint, stats, files, 1, inputs)


def part_name(index: int) -> str:
    return f"part-{index:05d}.parquet"


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Cast to the declared schema; a column mismatch is a programming error, reported by name."""
    if table.schema.names != schema.names:
        raise ValueError(f"table columns {table.schema.names} do not match schema {schema.names}")
    return table.cast(schema)
