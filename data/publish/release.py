"""A versioned dataset release: an immutable folder `<root>/<name>/<version>/` of HF Parquet configs, image shards
and WebDataset tars, with the release settings a build config carries (`release:`)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from data.progress import StepProgress
from data.publish.folder import ImmutableFolder
from data.publish.format import SEMVER
from data.publish.image_tables import ImageRow, ShardLimits, write_image_shards
from data.publish.manifest import ReleaseManifest
from data.publish.reader import REFERENCE_DIR
from data.publish.tables import write_csv, write_table
from data.reference import ReferencePack
from data.workspace import Storage


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


def taken_version(config: ReleaseConfig, name: str, build_id: str) -> str | None:
    """Why a build `build_id` cannot release `config.version` of `name`: that version exists, from another build
    (its manifest's `build_id`). None where the folder is free, or is this build's own (a rerun finds it unchanged).
    Asked before the first stage, so a build is not refused only after its work."""
    storage = Storage(config.root)
    folder = storage.path(name, config.version)
    if not storage.exists(folder):
        return None
    try:
        built = json.loads(storage.read_bytes(f"{folder}/manifest.json")).get("build_id")
    except (OSError, ValueError, AttributeError):
        built = None
    if built == build_id:
        return None
    by = f"by build {built}" if isinstance(built, str) else "by another build"
    return (
        f"release {name} {config.version} already exists at {folder} ({by}; this build is {build_id}); versions are "
        "immutable, choose a new version"
    )


class ReleaseWriter(ImmutableFolder):
    """Writes `<root>/<name>/<version>/` of `config` (staged, published exclusively, immutable)."""

    def __init__(self, config: ReleaseConfig, name: str) -> None:
        storage = Storage(config.root)
        super().__init__(storage, storage.path(name, config.version), name, config.version, ReleaseManifest)
        self.config = config

    def write_table(self, config_name: str, table: pa.Table, split: str = "train") -> str:
        return write_table(self, config_name, table, split)

    def write_csv(self, rel: str, table: pa.Table, columns: Iterable[str]) -> None:
        write_csv(self, rel, table, columns)

    def write_reference(self, pack: ReferencePack) -> None:
        """The pack the release was built from, byte for byte, as `reference/`: the release needs nothing else."""
        for name, data in sorted(pack.files.files.items()):
            self.write_bytes(f"{REFERENCE_DIR}/{name}", data)

    def write_images(
        self,
        config_name: str,
        rows: Sequence[ImageRow],
        schema: pa.Schema,
        split: str = "train",
        *,
        image_column: bool = True,
        tars: bool = True,
        progress: StepProgress | None = None,
        workers: int = 1,
    ) -> dict[str, list[str]]:
        """Image Parquet shards and WebDataset tars, sized by the release's settings, written in up to `workers`
        processes (`data.publish.image_tables`)."""
        limits = ShardLimits(self.config.row_group_size, self.config.max_shard_bytes, self.config.max_shard_images)
        return write_image_shards(
            self,
            config_name,
            rows,
            schema,
            limits,
            split,
            image_column=image_column,
            tars=tars,
            progress=progress,
            workers=workers,
        )


def with_phash(table: pa.Table, phash_by_sha256: dict[str, int | None]) -> pa.Table:
    """`table` with a `phash` column (16 hex digits, imagehash's `str()` of the 64-bit pHash; null when unknown),
    looked up by its `sha256`: what a URL-only release publishes next to each image's URL."""
    values = [phash_by_sha256.get(sha) for sha in table["sha256"].to_pylist()]
    column = pa.array([None if v is None else f"{int(v):016x}" for v in values], pa.string())
    if "phash" in table.column_names:
        return table.set_column(table.column_names.index("phash"), "phash", column)
    return table.append_column("phash", column)
