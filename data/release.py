"""Versioned, immutable releases: HF-datasets Parquet, WebDataset shards, a dataset card and a manifest.

A release is staged in a hidden sibling folder and renamed into `<root>/<name>/<version>/` only when complete.
A version is immutable: writing it again succeeds only when every data file is byte-identical (the existing
release is then left untouched); otherwise it is refused, naming the files that differ.
"""

from __future__ import annotations

import csv
import io
import json
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import webdataset as wds
from PIL import Image
from pydantic import BaseModel, ConfigDict, Field

from data.workspace import Storage, sha256_bytes

MANIFEST = "manifest.json"
SEMVER = r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$"


class ReleaseConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    root: str = Field(default="./releases", description="fsspec URL under which <name>/<version>/ is written.")
    version: str = Field(default="0.1.0", pattern=SEMVER, description="Semantic version of this release.")
    row_group_size: int = Field(default=100, ge=1, description="Rows per Parquet row group for image tables.")
    max_shard_bytes: int = Field(default=450_000_000, ge=1_000_000, description="Upper bound per Parquet/tar shard.")
    max_shard_images: int = Field(default=1000, ge=1, description="Images per WebDataset tar shard.")


class ReleaseExistsError(FileExistsError):
    pass


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


def to_release_jpeg(data: bytes, source_format: str, quality: int = 95) -> bytes:
    """JPEG bytes for the release: originals already in JPEG pass unchanged, others are converted once."""
    if source_format == "JPEG":
        return data
    with Image.open(io.BytesIO(data)) as image:
        rgb = image.convert("RGB")
    buffer = io.BytesIO()
    rgb.save(buffer, format="JPEG", quality=quality, optimize=False)
    return buffer.getvalue()


def hf_image_schema(schema: pa.Schema, image_column: str = "image") -> pa.Schema:
    """Append the HF `Image` column (struct<bytes, path>) and the `huggingface` features metadata."""
    from datasets import Features  # heavy import, only when writing a release
    from datasets import Image as HFImage

    features = Features.from_arrow_schema(schema)
    features[image_column] = HFImage()
    return features.arrow_schema


class ReleaseWriter:
    def __init__(self, config: ReleaseConfig, name: str) -> None:
        self.config = config
        self.name = name
        self.storage = Storage(config.root)
        self.final = self.storage.path(name, config.version)
        self.staging = self.storage.path(name, f".staging-{config.version}-{uuid.uuid4().hex[:8]}")
        self.files: dict[str, str] = {}  # relative path -> sha256
        self.sizes: dict[str, int] = {}

    def _record(self, rel: str, data: bytes) -> None:
        self.files[rel] = sha256_bytes(data)
        self.sizes[rel] = len(data)

    def write_bytes(self, rel: str, data: bytes) -> None:
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
            writer.writerow([row[c] for c in columns])
        self.write_bytes(rel, text.getvalue().encode())

    def write_images(self, config_name: str, rows: list[ImageRow], schema: pa.Schema, split: str = "train") -> dict:
        """Image Parquet shards (row groups of `row_group_size`) and WebDataset tars, in one pass over the bytes.

        Shards are planned from the rows' `num_bytes` (a released JPEG is close to its original's size). Images
        are loaded one row group at a time; each finished shard is buffered in memory before it is written.
        """
        full_schema = hf_image_schema(schema)
        sizes = [int(r.metadata.get("num_bytes") or 0) for r in rows]
        plan = list(_plan_shards(sizes, self.config.max_shard_bytes))
        tar_plan = list(_plan_shards(sizes, self.config.max_shard_bytes, self.config.max_shard_images))
        tars = _TarShards(self, tar_plan)
        parquet_files = []
        for shard, (start, stop) in enumerate(plan):
            rel = f"{config_name}/{split}-{shard:05d}-of-{len(plan):05d}.parquet"
            buffer = io.BytesIO()
            with pq.ParquetWriter(buffer, full_schema, compression="zstd") as writer:
                for group_start in range(start, stop, self.config.row_group_size):
                    group = rows[group_start : min(stop, group_start + self.config.row_group_size)]
                    records = []
                    for position, row in enumerate(group, start=group_start):
                        data = row.load()
                        tars.add(position, row.key, data, row.metadata)
                        records.append({**row.metadata, "image": {"bytes": data, "path": f"{row.key}.jpg"}})
                    writer.write_table(pa.Table.from_pylist(records, schema=full_schema))
            self.write_bytes(rel, buffer.getvalue())
            parquet_files.append(rel)
        tars.close()
        return {"parquet": parquet_files, "webdataset": tars.written}

    def commit(self, manifest: dict[str, Any]) -> ReleaseResult:
        """Write the manifest and move the staged release into place (or find it already there, identical)."""
        manifest = {
            **manifest,
            "files": {k: {"sha256": v, "bytes": self.sizes[k]} for k, v in sorted(self.files.items())},
        }
        if self.storage.exists(self.final):
            existing = self.storage.read_json(f"{self.final}/{MANIFEST}")
            ours = {k: v["sha256"] for k, v in manifest["files"].items()}
            theirs = {k: v["sha256"] for k, v in existing.get("files", {}).items()}
            self.storage.rm(self.staging)
            if ours == theirs:
                return ReleaseResult(
                    path=self.final, version=self.config.version, status="unchanged", manifest=existing
                )
            differing = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
            raise ReleaseExistsError(
                f"release {self.name} {self.config.version} already exists at {self.final} with different content "
                f"({len(differing)} files differ, e.g. {differing[:5]}); versions are immutable, choose a new version"
            )
        self.storage.write_json(f"{self.staging}/{MANIFEST}", manifest)
        self.storage.fs.mv(self.staging, self.final, recursive=True)
        return ReleaseResult(path=self.final, version=self.config.version, status="created", manifest=manifest)

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
