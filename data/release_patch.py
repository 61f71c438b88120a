"""Patch releases: a takedown written as the next version of a release, next to it (`culturebench takedown`).

The parent release is read, never changed. The patch is written by the benchmark's own release writer
(`write_3xcm_release`, `write_mixcube_release`, through `ReleaseWriter`: staged, immutable, a manifest with the
sha256 of every file), fed the parent's released image bytes as they are (no second JPEG conversion), so every
image, figure, croissant.json and card section is made the way a build makes it. What differs:
- the manifest names the parent version (and its manifest's sha256) and carries every takedown so far
  (`takedowns`), besides the parent build's provenance (config, seeds, backends, stage counts) and this patch's
  validation and reuse;
- the card ends with a CHANGELOG: per version, what was removed (ids, sha256, URLs), when (UTC date) and why;
- the removed images go on the denylist of the release root (`data/denylist.py`), merged with what is there, once
  the patch is written.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from data import reference, release_3xcm, release_mixcube
from data.card import markdown_table
from data.denylist import DenylistEntry, write_denylist
from data.provenance import code_version
from data.release import MANIFEST, SEMVER, ReleaseConfig, ReleaseResult
from data.schemas import MIXCUBE_ROWS

IMAGE_CONFIGS = {release_3xcm.NAME: "image_metadata", release_mixcube.NAME: "default"}
ID_COLUMNS = {release_3xcm.NAME: "image_id", release_mixcube.NAME: "sample_id"}
#: Manifest keys that describe the release file by file, or the release itself: not carried over from the parent.
_OWN_KEYS = ("name", "version", "files", "parent", "takedowns", "validation", "mode")


class PatchInputError(ValueError):
    """A release folder or version that cannot be patched: the message says which and why."""


# -- versions ---------------------------------------------------------------------------------------------------------


def _semver(version: str) -> tuple[tuple[int, int, int], list[str]]:
    if not re.match(SEMVER, version):
        raise PatchInputError(f"{version!r} is not a semantic version (X.Y.Z, semver.org 2.0.0)")
    core, _, pre = version.split("+", 1)[0].partition("-")
    major, minor, patch = (int(p) for p in core.split("."))
    return (major, minor, patch), pre.split(".") if pre else []


def next_patch_version(version: str) -> str:
    """1.0.0 -> 1.0.1; a pre-release keeps its label (0.1.0-demo -> 0.1.1-demo); build metadata is dropped."""
    (major, minor, patch), pre = _semver(version)
    return f"{major}.{minor}.{patch + 1}" + (f"-{'.'.join(pre)}" if pre else "")


def _precedence_key(version: str) -> tuple:
    core, pre = _semver(version)
    # semver 2.0.0 §11: a pre-release ranks below its release; numeric identifiers below alphanumeric ones.
    ids = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre)
    return (core, 0 if pre else 1, ids)


def is_later(version: str, than: str) -> bool:
    return _precedence_key(version) > _precedence_key(than)


def utc_today() -> str:
    return datetime.now(UTC).date().isoformat()


def is_patch(folder: Path) -> bool:
    """Whether the release at `folder` is a takedown patch (its manifest lists takedowns)."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and bool(manifest.get("takedowns"))


# -- the parent -------------------------------------------------------------------------------------------------------


@dataclass
class ParentRelease:
    folder: Path  # <root>/<benchmark>/<version>
    manifest: dict[str, Any]

    @classmethod
    def open(cls, folder: Path) -> ParentRelease:
        path = folder / MANIFEST
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise PatchInputError(f"{folder} is not a release folder: it has no {MANIFEST}") from None
        except (OSError, ValueError) as exc:
            raise PatchInputError(f"{path}: not a readable manifest ({' '.join(str(exc).split())})") from None
        name = manifest.get("name") if isinstance(manifest, dict) else None
        if name not in IMAGE_CONFIGS:
            raise PatchInputError(f"{path}: a release of {name!r}; takedown knows {', '.join(IMAGE_CONFIGS)}")
        if folder.parent.name != name or manifest.get("version") != folder.name:
            raise PatchInputError(
                f"{folder}: a release lives in <release root>/{name}/{manifest.get('version')}/, where its patch and "
                "the denylist later builds read are written; move it there first"
            )
        return cls(folder, manifest)

    @property
    def name(self) -> str:
        return self.manifest["name"]

    @property
    def version(self) -> str:
        return self.manifest["version"]

    @property
    def root(self) -> str:
        return str(self.folder.parent.parent)

    def manifest_sha256(self) -> str:
        return hashlib.sha256((self.folder / MANIFEST).read_bytes()).hexdigest()

    def table(self, config: str, drop_image: bool = True) -> pa.Table:
        files = sorted(p for p in (self.folder / config).glob("*.parquet") if p.is_file())
        if not files:
            raise PatchInputError(f"{self.folder} has no {config}/*.parquet")
        table = release_3xcm.read_parquet_files(files).replace_schema_metadata(None)  # the columns, not HF's record
        return table.drop_columns(["image"]) if drop_image and "image" in table.column_names else table

    def images(self) -> ReleasedImages:
        return ReleasedImages(self.folder / IMAGE_CONFIGS[self.name], ID_COLUMNS[self.name])

    def release_config(self, version: str) -> ReleaseConfig:
        """The parent's shard settings (its released config), this root, the new version."""
        released = self.manifest.get("config", {}).get("release", {})
        fields = {k: v for k, v in released.items() if k in ReleaseConfig.model_fields and k not in ("root", "version")}
        return ReleaseConfig(root=self.root, version=version, **fields)

    def provenance(self) -> dict[str, Any]:
        """The parent build's provenance, as its manifest states it."""
        return {k: v for k, v in self.manifest.items() if k not in _OWN_KEYS}


class ReleasedImages:
    """The image bytes of a release's image config by id (as released: no conversion), read one row group at a
    time, so a patch never holds more than one row group of images in memory."""

    def __init__(self, folder: Path, key_column: str) -> None:
        self.files = sorted(p for p in folder.glob("*.parquet") if p.is_file())
        self.where: dict[str, tuple[int, int, int]] = {}  # key -> (file, row group, row)
        self.sha_where: dict[str, str] = {}  # the sha256 column -> key
        for f, path in enumerate(self.files):
            parquet = pq.ParquetFile(path)
            for group in range(parquet.num_row_groups):
                columns = parquet.read_row_group(group, columns=[key_column, "sha256"])
                for row, (key, sha) in enumerate(
                    zip(columns[key_column].to_pylist(), columns["sha256"].to_pylist(), strict=True)
                ):
                    self.where[key] = (f, group, row)
                    self.sha_where.setdefault(sha, key)
        self._group: tuple[int, int] | None = None
        self._bytes: list[bytes] = []

    def get(self, key: str) -> bytes:
        f, group, row = self.where[key]
        if self._group != (f, group):
            images = pq.ParquetFile(self.files[f]).read_row_group(group, columns=["image"])["image"]
            self._bytes = [image["bytes"] for image in images.to_pylist()]
            self._group = (f, group)
        return self._bytes[row]

    def by_sha256(self, sha: str) -> bytes:
        return self.get(self.sha_where[sha])

    def released_sha256(self) -> dict[str, str]:
        """key -> sha256 of the released file (a converted image's differs from its `sha256` column)."""
        return {key: hashlib.sha256(self.get(key)).hexdigest() for key in self.where}


class _ReleasedBlobs:
    """What `write_mixcube_release` asks of a blob store, served from the parent release: images by their sha256
    column (already JPEG, so written unchanged), masks from `masks/<sha256>.png`."""

    def __init__(self, parent: ParentRelease, images: ReleasedImages) -> None:
        self.parent, self.images = parent, images

    def get(self, sha: str) -> bytes:
        if sha in self.images.sha_where:
            return self.images.by_sha256(sha)
        return (self.parent.folder / "masks" / f"{sha}.png").read_bytes()


# -- the takedown record, the changelog, the denylist ---------------------------------------------------------------


def takedown_record(
    parent: ParentRelease,
    version: str,
    date: str,
    reason: str,
    requested: dict[str, list[str]],
    removed: list[dict[str, Any]],
    rows: dict[str, Any],
) -> dict[str, Any]:
    """One takedown as the manifest keeps it (and the changelog and denylist are written from)."""
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", date):
        raise PatchInputError(f"date {date!r}: write it as YYYY-MM-DD (UTC)")
    return {
        "version": version,
        "parent": parent.version,
        "date": date,
        "reason": " ".join(reason.split()),
        "requested": requested,
        "removed": removed,
        "rows": rows,
        "code_version": code_version(),
    }


def _cell(value: Any) -> str:
    return "-" if value in (None, "") else f"`{str(value).replace('|', '%7C').replace('`', '%60')}`"


def render_changelog(takedowns: list[dict[str, Any]]) -> str:
    """The card's CHANGELOG: every takedown so far, the latest first."""
    parts = ["\n## CHANGELOG\n"]
    for record in reversed(takedowns):
        removed = [
            {
                "image id": _cell(image["image_id"]),
                "sha256": _cell(image["sha256"]),
                "URL": _cell(image["url"])
                + (
                    f" (final: {_cell(image['final_url'])})"
                    if image.get("final_url") not in (None, image["url"])
                    else ""
                ),
                "why": image["why"],
            }
            for image in record["removed"]
        ]
        parts.append(
            f"\n### {record['version']} ({record['date']}, UTC)\n\n"
            f"Taken down from {record['parent']}. Reason: {record['reason']}\n\n"
            f"{markdown_table(removed)}\n{record['rows']['summary']}\n"
        )
    parts.append(
        "\nThe sha256 and URLs of every removed image are on the denylist of the release root "
        "(`denylist.json` next to the version folders); later builds drop those images before they can reach a "
        "release.\n"
    )
    return "".join(parts)


def denylist_entries(record: dict[str, Any]) -> list[DenylistEntry]:
    return [
        DenylistEntry(
            image_id=image["image_id"],
            sha256=image["sha256"],
            pixel_sha256=image.get("pixel_sha256"),
            url=image["url"],
            final_url=image.get("final_url"),
            reason=record["reason"],
            date=record["date"],
            version=record["version"],
            removed_from=record["parent"],
        )
        for image in record["removed"]
    ]


def _patch_provenance(parent: ParentRelease, record: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {
        **parent.provenance(),
        **more,
        "parent": {"version": parent.version, "manifest_sha256": parent.manifest_sha256()},
        "takedowns": [*parent.manifest.get("takedowns", []), record],
    }


def record_denylist(parent: ParentRelease, record: dict[str, Any]) -> str:
    """Merge the takedown's images into the release root's denylist; returns its path."""
    path, _ = write_denylist(parent.root, parent.name, denylist_entries(record))
    return path


# -- writing ----------------------------------------------------------------------------------------------------------


def write_3xcm_patch(
    parent: ParentRelease,
    images: ReleasedImages,
    record: dict[str, Any],
    catalog: pa.Table,
    benchmark: pa.Table,
    benchmark_cd: pa.Table,
    unassembled: pa.Table,
    validation: str,
    reuse: dict[str, Any],
) -> ReleaseResult:
    """The patch of a 3XCM release: `catalog` is its image_metadata without bytes (renumbered), whose images keep
    the parent's released bytes."""
    # The rows kept from the parent were chosen least-used over the parent's pool: the balance replay cannot hold.
    checked = {"summary": validation, "balance_replayed": False}
    provenance = _patch_provenance(parent, record, reuse=reuse, validation=checked)
    return release_3xcm.write_3xcm_release(
        parent.release_config(record["version"]),
        None,  # type: ignore[arg-type]  # no blob store: the bytes are the parent's
        catalog,
        benchmark,
        benchmark_cd,
        unassembled,
        provenance,
        load_image=lambda meta: images.get(meta["image_id"]),
        changelog=render_changelog(provenance["takedowns"]),
    )


def write_mixcube_patch(
    parent: ParentRelease, images: ReleasedImages, record: dict[str, Any], rows: pa.Table
) -> ReleaseResult:
    """The patch of a MixCuBe release: `rows` are its rows without bytes, without the removed quintets."""
    provenance = _patch_provenance(parent, record)
    if "cells_below_target" in provenance:
        provenance["cells_below_target"] = cells_below_target(parent, rows)
    return release_mixcube.write_mixcube_release(
        parent.release_config(record["version"]),
        _ReleasedBlobs(parent, images),  # type: ignore[arg-type]
        rows.select([n for n in (*MIXCUBE_ROWS.names, "phash") if n in rows.column_names]),  # a URL-only parent's
        provenance,
        changelog=render_changelog(provenance["takedowns"]),
    )


def cells_below_target(parent: ParentRelease, rows: pa.Table) -> list[dict[str, Any]]:
    """The culture x category cells short of the build's target, counted again over the patch's originals: the
    parent's short cells in their order, then cells the takedown took below the target."""
    short = parent.manifest.get("cells_below_target", [])
    target = parent.manifest.get("config", {}).get("target_per_cell") or (short[0]["target"] if short else None)
    if target is None:
        return short
    originals = [
        r
        for r in rows.select(["country", "category", "ethnicity"]).to_pylist()
        if r["ethnicity"] == reference.mixcube().original_label
    ]
    counts: dict[tuple[str, str], int] = {}
    for row in originals:
        counts[(row["country"], row["category"])] = counts.get((row["country"], row["category"]), 0) + 1
    parent_cells = [(c["country"], c["category"]) for c in short]
    released = parent.table(IMAGE_CONFIGS[parent.name]).select(["country", "category"]).to_pylist()
    cells = list(dict.fromkeys([*parent_cells, *((r["country"], r["category"]) for r in released)]))
    return [
        {"country": country, "category": category, "originals": counts.get((country, category), 0), "target": target}
        for country, category in cells
        if counts.get((country, category), 0) < target
    ]
