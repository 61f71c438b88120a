"""A published release folder as an evaluation reads it: its identity (name, version, manifest sha256), its
tables by config name, and its image bytes loaded lazily, one Parquet row group at a time."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from data.release_3xcm import ReleaseReadError, read_parquet_parts
from data.workspace import file_sha256

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class ImageLocation:
    file: Path
    row_group: int
    row: int


@dataclass
class ReleasedImages:
    """Image bytes of one config by key (for example `image_id` or `sample_id`), read row group by row group; the
    last group read is kept, so loading in table order reads each group once."""

    locations: dict[str, ImageLocation]
    sha256: dict[str, str]
    image_column: str = "image"
    _group: tuple[Path, int] | None = field(default=None, repr=False)
    _bytes: list[Any] = field(default_factory=list, repr=False)

    def load(self, key: str) -> bytes:
        where = self.locations.get(key)
        if where is None:
            raise KeyError(f"no image {key!r} in the release")
        if self._group != (where.file, where.row_group):
            column = pq.ParquetFile(where.file).read_row_group(where.row_group, columns=[self.image_column])
            self._bytes = column.column(0).combine_chunks().field("bytes").to_pylist()
            self._group = (where.file, where.row_group)
        data = self._bytes[where.row]
        if not data:
            raise ValueError(f"image {key!r} has no bytes in {where.file} (a URL-only release?)")
        return data


@dataclass(frozen=True)
class Release:
    path: Path
    name: str
    version: str
    manifest_sha256: str
    manifest: dict[str, Any]

    @classmethod
    def open(cls, path: str | Path) -> Release:
        folder = Path(path)
        manifest_file = folder / MANIFEST
        if not manifest_file.is_file():
            raise ReleaseReadError(f"{folder}: no {MANIFEST}; not a release folder")
        try:
            manifest = json.loads(manifest_file.read_text())
        except (OSError, ValueError) as exc:
            raise ReleaseReadError(f"{manifest_file}: not readable JSON ({exc})") from None
        for key in ("name", "version"):
            if not isinstance(manifest.get(key), str):
                raise ReleaseReadError(f"{manifest_file}: no {key!r}")
        return cls(folder, manifest["name"], manifest["version"], file_sha256(manifest_file), manifest)

    def has(self, config: str) -> bool:
        return any((self.path / config).glob("*.parquet"))

    def table(self, config: str, columns: list[str] | None = None) -> pa.Table:
        table = read_parquet_parts(self.path / config, columns)
        if table is None:
            raise ReleaseReadError(f"{self.path}: the release has no {config!r} table")
        return table

    def columns(self, config: str) -> list[str]:
        files = sorted((self.path / config).glob("*.parquet"))
        return pq.read_schema(files[0]).names if files else []

    def images(self, config: str, key: str, image_column: str = "image") -> ReleasedImages:
        """Where each image of `config` lies, by its `key` column, and the sha256 of its bytes (read once here, a
        row group at a time); the bytes themselves come later, from `load`."""
        locations: dict[str, ImageLocation] = {}
        hashes: dict[str, str] = {}
        for file in sorted((self.path / config).glob("*.parquet")):
            reader = pq.ParquetFile(file)
            if image_column not in reader.schema_arrow.names:
                raise ReleaseReadError(f"{file}: no {image_column!r} column (image bytes)")
            for group in range(reader.num_row_groups):
                part = reader.read_row_group(group, columns=[key, image_column])
                images = part.column(image_column).combine_chunks().field("bytes").to_pylist()
                for row, (name, data) in enumerate(zip(_strings(part, key), images, strict=True)):
                    locations[name] = ImageLocation(file, group, row)
                    # The released bytes' hash (a row's `sha256` names the source file, which the release may
                    # have re-encoded): what a model sees, so what its cached vector is keyed by.
                    hashes[name] = hashlib.sha256(data).hexdigest() if data else ""
        return ReleasedImages(locations, hashes, image_column)


def _strings(table: pa.Table, column: str) -> Sequence[str]:
    return [str(v) for v in table.column(column).to_pylist()]
