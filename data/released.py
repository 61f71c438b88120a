"""A published release folder as an evaluation reads it: its identity (name, version, manifest sha256), its
tables by config name, and its image bytes loaded lazily, one Parquet row group at a time.

The manifest is read strictly (`data.release_integrity.read_manifest`: UTF-8 JSON, a plain name, a semantic version,
files confined to the folder); `verify` checks the files of the configs a reader needs against it, so numbers are
never computed from tables the manifest (and so the results card, which cites its sha256) does not describe."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from data.release_3xcm import ReleaseReadError, read_parquet_parts
from data.release_format import MANIFEST
from data.release_integrity import ReleaseIntegrityError, read_manifest, verified

__all__ = ["MANIFEST", "ImageLocation", "Release", "ReleaseReadError", "ReleasedImages"]


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
        """The folder's identity from its manifest, read strictly; ReleaseReadError names the file and the field."""
        manifest = read_manifest(Path(path))
        return cls(manifest.folder, manifest.name, manifest.version, manifest.sha256, manifest.data)

    def verify(self, configs: Iterable[str]) -> None:
        """The files of `configs` (folders of Parquet parts) are those the manifest lists, byte for byte, and the
        manifest is still the one this release was opened with; ReleaseIntegrityError (a ReleaseReadError) names
        each mismatch."""
        try:
            manifest = verified(self.path, only=list(configs))
        except ReleaseIntegrityError as exc:
            exc.args = (f"{exc.args[0]}; these are not the published tables: restore the release (fetch it again)",)
            raise
        if manifest.sha256 != self.manifest_sha256:
            raise ReleaseReadError(f"{self.path / MANIFEST}: changed while it was read; evaluate again")

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
