"""A published release folder as its readers see it: its identity (name, version, manifest sha256), its tables by
config name (the Parquet parts of a config's folder, read with one-line errors), and its image bytes by key.

The manifest is read strictly (`data.publish.integrity.read_manifest`: UTF-8 JSON, a plain name, a semantic version,
files confined to the folder); `verify` checks the files of the configs a reader needs against it, so numbers are
never computed from tables the manifest (and so the results card, which cites its sha256) does not describe."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from data.publish.format import MANIFEST, ReleaseReadError
from data.publish.images import ReleasedImages
from data.publish.integrity import ReleaseIntegrityError, read_manifest, verified
from data.publish.manifest import ReleaseManifest
from data.publish.pack_claims import ReleasePackError, pack_problems
from data.reference import ReferencePack, default_pack, load_pack
from data.reference_files import PACK_FILE

#: The folder of a release that holds its reference pack (`data/publish/release.py` writes it).
REFERENCE_DIR = "reference"


def release_pack(folder: Path) -> ReferencePack:
    """The reference pack a release folder was built from: its own `reference/`, checked as any pack is. A release
    written before packs existed has none: it was built from the shipped data, the default pack. Every command
    reads a release's pack here, so none takes a pack the release does not state: ReleasePackError (one line,
    naming the file and field) when the pack is not the one `manifest.reference` and the card describe."""
    pack = load_pack(folder / REFERENCE_DIR) if carries_pack(folder) else default_pack()
    problems = release_pack_problems(folder, pack)
    if problems:
        raise ReleasePackError(problems[0])
    return pack


def carries_pack(folder: Path) -> bool:
    return (folder / REFERENCE_DIR / PACK_FILE).is_file()


def release_pack_problems(folder: Path, pack: ReferencePack | None = None) -> list[str]:
    """Each way the release's pack differs from what its manifest and card state (`data.publish.pack_claims`);
    `pack`: the release's pack, read already."""
    carried = carries_pack(folder)
    if pack is None:
        pack = load_pack(folder / REFERENCE_DIR) if carried else default_pack()
    return pack_problems(folder, pack, folder / REFERENCE_DIR, carried)


def read_parquet_files(files: list[Path], columns: list[str] | None = None) -> pa.Table:
    """Parquet files as one table (only the `columns` each file has); ReleaseReadError names a file that fails."""
    tables = []
    for file in files:
        try:
            present = [c for c in columns if c in pq.read_schema(file).names] if columns else None
            tables.append(pq.read_table(file, columns=present))
        except (pa.ArrowException, OSError) as exc:
            raise ReleaseReadError(f"{file}: not a readable Parquet file ({' '.join(str(exc).split())})") from None
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except pa.ArrowException as exc:
        raise ReleaseReadError(f"{files[0].parent}: parts with different schemas ({exc})") from None


def read_parquet_parts(folder: Path, columns: list[str] | None = None) -> pa.Table | None:
    """The Parquet parts of one config of a release folder, or None when it has none."""
    files = sorted(p for p in folder.glob("*.parquet") if p.is_file())
    return read_parquet_files(files, columns) if files else None


def read_parts_as(folder: Path, schema: pa.Schema, missing_as_null: Collection[str] = ()) -> pa.Table | None:
    """The Parquet parts of one config with the columns of `schema` they have, in its order (no image bytes unless
    `schema` names them), or None when the config has none. A column of `missing_as_null` that the parts lack (a
    release written before it existed) is null, typed as `schema` types it."""
    table = read_parquet_parts(folder, schema.names)
    if table is None:
        return None
    for name in missing_as_null:
        if name not in table.column_names:
            table = table.append_column(name, pa.nulls(table.num_rows, schema.field(name).type))
    return table.select([c for c in schema.names if c in table.column_names])


@dataclass(frozen=True)
class Release:
    path: Path
    name: str
    version: str
    manifest_sha256: str
    manifest: ReleaseManifest

    @classmethod
    def open(cls, path: str | Path) -> Release:
        """The folder's identity from its manifest, read strictly; ReleaseReadError names the file and the field."""
        manifest = read_manifest(Path(path))
        return cls(manifest.folder, manifest.name, manifest.version, manifest.sha256, manifest.model)

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

    def pack(self) -> ReferencePack:
        """The reference pack this release carries (its countries, languages, regions and cultures), its files
        checked against the manifest first."""
        if (self.path / REFERENCE_DIR).is_dir():
            self.verify([REFERENCE_DIR])
        return release_pack(self.path)

    def has(self, config: str) -> bool:
        return any((self.path / config).glob("*.parquet"))

    def table(self, config: str, columns: list[str] | None = None) -> pa.Table:
        table = read_parquet_parts(self.path / config, columns)
        if table is None:
            raise ReleaseReadError(f"{self.path}: the release has no {config!r} table")
        return table

    def columns(self, config: str) -> list[str]:
        files = sorted((self.path / config).glob("*.parquet"))
        return list(pq.read_schema(files[0]).names) if files else []

    def images(self, config: str, key: str, image_column: str = "image") -> ReleasedImages:
        """Where each image of `config` lies, by its `key` column; the bytes come later (`load`), and the sha256 of
        each image's released bytes when first asked for (`sha256`). ReleaseReadError when a part of `config` has
        no `image_column`."""
        for file in sorted((self.path / config).glob("*.parquet")):
            if image_column not in pq.read_schema(file).names:
                raise ReleaseReadError(f"{file}: no {image_column!r} column (image bytes)")
        return ReleasedImages(self.path / config, key, image_column)
