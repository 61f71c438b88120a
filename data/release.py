"""Versioned, immutable releases: HF-datasets Parquet, WebDataset shards, a dataset card and a manifest.

A release is staged in a hidden sibling folder and renamed into `<root>/<name>/<version>/` only when complete. The
rename is exclusive: on a local disk, renaming a folder onto a non-empty one fails, and on an object store a lock
object created with exclusive create (`xb`) lets one writer publish at a time. A version is immutable: writing it
again succeeds only when every file on disk, hashed again, is byte-identical to what this build would write (the
existing release is then left untouched); otherwise it is refused, naming the files that differ. When the version
exists already nothing is staged at all, so checking an identical rebuild needs no write access to the release root.
"""

from __future__ import annotations

import csv
import errno
import io
import json
import os
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field

from data.release_format import MANIFEST, SEMVER
from data.text_safety import csv_cell
from data.workspace import Storage, sha256_bytes


class ReleaseConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    root: str = Field(default="./releases", description="fsspec URL under which <name>/<version>/ is written.")
    version: str = Field(default="0.1.0", pattern=SEMVER, description="Semantic version of this release.")
    row_group_size: int = Field(default=100, ge=1, description="Rows per Parquet row group for image tables.")
    max_shard_bytes: int = Field(default=450_000_000, ge=1_000_000, description="Upper bound per Parquet/tar shard.")
    max_shard_images: int = Field(default=1000, ge=1, description="Images per WebDataset tar shard.")
    mode: Literal["images", "urls"] = Field(
        default="images",
        description="images: the image bytes in the Parquet files and WebDataset tars; urls: the same tables with "
        "each image's URL, sha256 and pHash and without the bytes of the images we did not make (no tars): "
        "`culturebench fetch-release` downloads and verifies them.",
    )


class ReleaseExistsError(FileExistsError):
    pass


class ReleaseBusyError(FileExistsError):
    """Another writer is publishing the same version right now (or crashed while doing so)."""


@dataclass
class ReleaseResult:
    path: str
    version: str
    status: str  # created | unchanged
    manifest: dict[str, Any]


@dataclass
class ImageRow:
    """One image to materialise: metadata for the tables and the sample JSON, plus its released bytes."""

    key: str
    metadata: dict[str, Any]
    load: Callable[[], bytes]
    #: False: the row is published without its bytes (a URL-only release); its `image` is null.
    embed: bool = True


def to_release_jpeg(data: bytes, source_format: str, quality: int = 95) -> bytes:
    """JPEG bytes for the release: originals already in JPEG pass unchanged, others are converted once."""
    if source_format == "JPEG":
        return data
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        rgb = image.convert("RGB")
        profile = image.info.get("icc_profile")  # colours mean what the original meant
    buffer = io.BytesIO()
    rgb.save(buffer, format="JPEG", quality=quality, optimize=False, icc_profile=profile)
    return buffer.getvalue()


def with_phash(table: pa.Table, phash_by_sha256: dict[str, int | None]) -> pa.Table:
    """`table` with a `phash` column (16 hex digits, imagehash's `str()` of the 64-bit pHash; null when unknown),
    looked up by its `sha256`: what a URL-only release publishes next to each image's URL."""
    values = [phash_by_sha256.get(sha) for sha in table["sha256"].to_pylist()]
    column = pa.array([None if v is None else f"{int(v):016x}" for v in values], pa.string())
    if "phash" in table.column_names:
        return table.set_column(table.column_names.index("phash"), "phash", column)
    return table.append_column("phash", column)


def hf_image_schema(schema: pa.Schema, image_column: str = "image") -> pa.Schema:
    """Append the HF `Image` column (struct<bytes, path>) and the `huggingface` features metadata."""
    from datasets import Features  # heavy import, only when writing a release
    from datasets import Image as HFImage

    features = Features.from_arrow_schema(schema)
    features[image_column] = HFImage()
    return features.arrow_schema


def _hf_schema(schema: pa.Schema) -> pa.Schema:
    """The schema with the `huggingface` features metadata, without an image column."""
    from datasets import Features

    return Features.from_arrow_schema(schema).arrow_schema


class ReleaseWriter:
    """Writes `<root>/<name>/<version>/`, or, with `folder`, exactly that folder (same staging and immutability)."""

    def __init__(self, config: ReleaseConfig, name: str, folder: str | None = None) -> None:
        self.config = config
        self.name = name
        if folder is None:
            self.storage = Storage(config.root)
            self.final = self.storage.path(name, config.version)
            self.staging = self.storage.path(name, f".staging-{config.version}-{uuid.uuid4().hex[:8]}")
        else:
            parent, _, leaf = folder.rstrip("/").rpartition("/")
            self.storage = Storage(parent or ".")
            self.final = self.storage.path(leaf)
            self.staging = self.storage.path(f".staging-{leaf}-{uuid.uuid4().hex[:8]}")
        self.files: dict[str, str] = {}  # relative path -> sha256
        # Files that say how, not what (a card naming the code version): an existing folder that differs only in
        # them is the same result, and is kept as it is.
        self.volatile: set[str] = set()
        self.sizes: dict[str, int] = {}
        # An existing version is compared with, not written again: nothing needs staging.
        self.compare_only = self.storage.exists(self.final)

    def _record(self, rel: str, data: bytes) -> None:
        self.files[rel] = sha256_bytes(data)
        self.sizes[rel] = len(data)

    def write_bytes(self, rel: str, data: bytes) -> None:
        if not self.compare_only:
            self.storage.write_bytes(f"{self.staging}/{rel}", data)
        self._record(rel, data)

    def write_table(self, config_name: str, table: pa.Table, split: str = "train") -> str:
        """A small table in one file; it is read back to record its hash."""
        from datasets import Features

        schema = Features.from_arrow_schema(table.schema).arrow_schema
        rel = f"{config_name}/{split}-00000-of-00001.parquet"
        buffer = io.BytesIO()
        pq.write_table(table.cast(schema), buffer, compression="zstd")
        self.write_bytes(rel, buffer.getvalue())
        return rel

    def write_csv(self, rel: str, table: pa.Table, columns: Iterable[str]) -> None:
        columns = list(columns)
        text = io.StringIO()
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(columns)
        for row in table.select(columns).to_pylist():
            writer.writerow([csv_cell(row[c]) for c in columns])  # no cell runs as a spreadsheet formula
        self.write_bytes(rel, text.getvalue().encode())

    def write_images(
        self,
        config_name: str,
        rows: list[ImageRow],
        schema: pa.Schema,
        split: str = "train",
        *,
        image_column: bool = True,
        tars: bool = True,
    ) -> dict:
        """Image Parquet shards (row groups of `row_group_size`) and WebDataset tars, in one pass over the bytes.

        Shards are planned from the rows' `num_bytes` (a released JPEG is close to its original's size). Images
        are loaded one row group at a time; each finished shard is buffered in memory before it is written.
        A URL-only release writes no tars, and either no `image` column (`image_column=False`) or a null `image`
        for each row that is not `embed`ded.
        """
        full_schema = hf_image_schema(schema) if image_column else _hf_schema(schema)
        sizes = [int(r.metadata.get("num_bytes") or 0) if image_column and r.embed else 0 for r in rows]
        plan = list(_plan_shards(sizes, self.config.max_shard_bytes))
        tar_plan = list(_plan_shards(sizes, self.config.max_shard_bytes, self.config.max_shard_images))
        tar_shards = _TarShards(self, tar_plan)
        parquet_files = []
        for shard, (start, stop) in enumerate(plan):
            rel = f"{config_name}/{split}-{shard:05d}-of-{len(plan):05d}.parquet"
            buffer = io.BytesIO()
            with pq.ParquetWriter(buffer, full_schema, compression="zstd") as writer:
                for group_start in range(start, stop, self.config.row_group_size):
                    group = rows[group_start : min(stop, group_start + self.config.row_group_size)]
                    records = []
                    for position, row in enumerate(group, start=group_start):
                        if not image_column:
                            records.append(row.metadata)
                            continue
                        if not row.embed:
                            records.append({**row.metadata, "image": None})
                            continue
                        data = row.load()
                        if tars:
                            tar_shards.add(position, row.key, data, row.metadata)
                        records.append({**row.metadata, "image": {"bytes": data, "path": f"{row.key}.jpg"}})
                    writer.write_table(pa.Table.from_pylist(records, schema=full_schema))
            self.write_bytes(rel, buffer.getvalue())
            parquet_files.append(rel)
        tar_shards.close()
        return {"parquet": parquet_files, "webdataset": tar_shards.written}

    def commit(self, manifest: dict[str, Any]) -> ReleaseResult:
        """Write the manifest and move the staged release into place, exclusively; or find the version there
        already, identical on disk, and leave it untouched."""
        manifest = {
            **manifest,
            "files": {k: {"sha256": v, "bytes": self.sizes[k]} for k, v in sorted(self.files.items())},
        }
        if not self.compare_only:
            self.storage.write_json(f"{self.staging}/{MANIFEST}", manifest)
            if self._publish():
                return ReleaseResult(path=self.final, version=self.config.version, status="created", manifest=manifest)
            self.abort()  # the version appeared meanwhile: compare with it instead
        return self._same_as_existing()

    def _publish(self) -> bool:
        """Rename the staging folder to the version's folder; False when that folder exists already (nothing is
        moved into it)."""
        if self.storage.local:
            try:
                os.rename(self.staging, self.final)  # fails on a non-empty target: an exclusive publish
            except OSError as exc:
                if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                    return False
                raise
            parent = self.final.rsplit("/", 1)[0]
            fd = os.open(parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            return True
        lock = f"{self.final}.publishing"
        try:
            with self.storage.fs.open(lock, "xb"):
                pass
        except FileExistsError:
            raise ReleaseBusyError(
                f"{self.storage.display(lock)} exists: another build is publishing {self.name} "
                f"{self.config.version} now; if none is (a crash), delete that object and rerun"
            ) from None
        try:
            if self.storage.exists(self.final):
                return False
            # Object stores have no folder rename: copy object by object, the manifest last, so a copy cut short
            # lacks its manifest and is never taken for a complete release.
            fs, prefix = self.storage.fs, self.staging.rstrip("/") + "/"
            files = sorted(fs.find(self.staging), key=lambda path: path.endswith(f"/{MANIFEST}"))
            for path in files:
                fs.copy(path, f"{self.final}/{path[len(prefix) :]}")
            self.storage.rm(self.staging)
            return True
        finally:
            self.storage.rm(lock)

    def _same_as_existing(self) -> ReleaseResult:
        """The existing version, hashed again file by file, against what this build would write."""
        ours = {k: v for k, v in self.files.items() if k not in self.volatile}
        on_disk = {k: v for k, v in self._hash_existing().items() if k not in self.volatile}
        has_manifest = on_disk.pop(MANIFEST, None) is not None
        if ours == on_disk and has_manifest:
            existing = self.storage.read_json(f"{self.final}/{MANIFEST}")
            return ReleaseResult(path=self.final, version=self.config.version, status="unchanged", manifest=existing)
        differing = sorted(k for k in ours.keys() | on_disk.keys() if ours.get(k) != on_disk.get(k))
        differing += [] if has_manifest else [f"{MANIFEST} (missing)"]
        where = self.storage.display(self.final)
        raise ReleaseExistsError(
            f"release {self.name} {self.config.version} already exists at {where} with different content "
            f"({len(differing)} files differ, e.g. {differing[:5]}); versions are immutable, choose a new version"
        )

    def _hash_existing(self) -> dict[str, str]:
        prefix = self.final.rstrip("/") + "/"
        return {
            path[len(prefix) :]: sha256_bytes(self.storage.read_bytes(path))
            for path in sorted(self.storage.fs.find(self.final))
        }

    def abort(self) -> None:
        self.storage.rm(self.staging)


@dataclass
class _TarShards:
    writer: ReleaseWriter
    plan: list[tuple[int, int]]
    written: list[str] = field(default_factory=list)
    _current: Any = None
    _buffer: io.BytesIO | None = None
    _shard: int = -1

    def add(self, position: int, key: str, data: bytes, metadata: dict) -> None:
        shard = next(i for i, (start, stop) in enumerate(self.plan) if start <= position < stop)
        if shard != self._shard:
            self._flush()
            self._shard, self._buffer = shard, io.BytesIO()
            import webdataset as wds  # imports torch: only when a release writes tars

            self._current = wds.TarWriter(
                self._buffer, mtime=0, user="culturebench", group="culturebench", encoder=False
            )
        if "." in key:
            raise ValueError(f"WebDataset keys may not contain dots: {key!r}")
        sample_json = json.dumps(metadata, sort_keys=True, ensure_ascii=False, default=str).encode()
        self._current.write({"__key__": key, "jpg": data, "json": sample_json})

    def _flush(self) -> None:
        if self._current is None:
            return
        self._current.close()
        rel = f"images/{self._shard:05d}.tar"
        self.writer.write_bytes(rel, self._buffer.getvalue())
        self.written.append(rel)
        self._current = self._buffer = None

    def close(self) -> None:
        self._flush()


def _plan_shards(sizes: list[int], max_bytes: int, max_count: int | None = None) -> Iterator[tuple[int, int]]:
    """Contiguous [start, stop) ranges whose summed size stays under max_bytes (and count under max_count)."""
    start, total = 0, 0
    for index, size in enumerate(sizes):
        full = (total + size > max_bytes) or (max_count is not None and index - start >= max_count)
        if index > start and full:
            yield start, index
            start, total = index, 0
        total += size
    yield start, len(sizes)
