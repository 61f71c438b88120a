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
import html
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import ValidationError

from data import reference, release_3xcm, release_mixcube
from data.card import markdown_table
from data.denylist import DenylistEntry, write_denylist
from data.provenance import code_version
from data.release import MANIFEST, SEMVER, ReleaseConfig, ReleaseResult
from data.release_integrity import read_manifest
from data.schemas import MIXCUBE_ROWS
from data.text_safety import markdown_text

IMAGE_CONFIGS = {release_3xcm.NAME: "image_metadata", release_mixcube.NAME: "default"}
ID_COLUMNS = {release_3xcm.NAME: "image_id", release_mixcube.NAME: "sample_id"}
#: Manifest keys that describe the release file by file, or the release itself: not carried over from the parent.
_OWN_KEYS = ("name", "version", "files", "parent", "takedowns", "validation", "mode")


class PatchInputError(ValueError):
    """A release folder or version that cannot be patched: the message says which and why."""


# -- versions ---------------------------------------------------------------------------------------------------------


def _semver(version: str) -> tuple[tuple[int, int, int], list[str]]:
    if not re.fullmatch(SEMVER, version):  # fullmatch: SEMVER's `$` would let a trailing newline through
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


def checked_date(value: str) -> str:
    """`value` when it is a real calendar date written YYYY-MM-DD (ASCII digits); else PatchInputError naming
    `--date`. `fromisoformat` alone also takes 20260501 and 2026-W18-5, and the pattern alone 2026-13-45."""
    if not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", value):
        raise PatchInputError(f"--date {value!r}: write the date as YYYY-MM-DD (UTC), e.g. {utc_today()}")
    try:
        datetime.fromisoformat(value)
    except ValueError as exc:
        raise PatchInputError(f"--date {value!r} is not a date ({exc}); write it as YYYY-MM-DD (UTC)") from None
    return value


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
    sha256: str | None = field(default=None, repr=False)  # of manifest.json as read

    @classmethod
    def open(cls, folder: Path) -> ParentRelease:
        """The release at `folder`, its manifest read strictly (`read_manifest`: UTF-8 JSON, an object, a plain name
        and a semver version; ReleaseReadError names the file and field). PatchInputError for a benchmark takedown
        does not know, or a folder that is not <release root>/<name>/<version>."""
        read = read_manifest(folder)
        path, name, version = folder / MANIFEST, read.name, read.version
        if name not in IMAGE_CONFIGS:
            raise PatchInputError(f"{path}: a release of {name!r}; takedown knows {', '.join(IMAGE_CONFIGS)}")
        if folder.parent.name != name or version != folder.name:
            raise PatchInputError(
                f"{folder}: a release lives in <release root>/{name}/{version}/, where its patch and "
                "the denylist later builds read are written; move it there first"
            )
        problem = _shape_problem(read.data)
        if problem:
            raise PatchInputError(f"{path}: {problem}; not a manifest culturebench wrote")
        return cls(folder, read.data, read.sha256)

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
        """Of the manifest as it was read (the bytes the patch was made from)."""
        return self.sha256 or hashlib.sha256((self.folder / MANIFEST).read_bytes()).hexdigest()

    def table(self, config: str, drop_image: bool = True) -> pa.Table:
        files = sorted(p for p in (self.folder / config).glob("*.parquet") if p.is_file())
        if not files:
            raise PatchInputError(f"{self.folder} has no {config}/*.parquet")
        table = release_3xcm.read_parquet_files(files).replace_schema_metadata(None)  # the columns, not HF's record
        return table.drop_columns(["image"]) if drop_image and "image" in table.column_names else table

    def images(self) -> ReleasedImages:
        return ReleasedImages(self.folder / IMAGE_CONFIGS[self.name], ID_COLUMNS[self.name])

    def release_config(self, version: str) -> ReleaseConfig:
        """The parent's shard settings (its released config), this root, the new version; the parent's mode as its
        manifest records it (a URL-only release's patch is URL-only)."""
        released = self.manifest.get("config", {}).get("release", {})
        fields = {k: v for k, v in released.items() if k in ReleaseConfig.model_fields and k not in ("root", "version")}
        if self.manifest.get("mode") in ("images", "urls"):
            fields["mode"] = self.manifest["mode"]
        try:
            return ReleaseConfig(root=self.root, version=version, **fields)
        except ValidationError as exc:
            problem = " ".join(str(exc).split())[:300]
            raise PatchInputError(
                f"{self.folder / MANIFEST}: its release settings are not usable ({problem})"
            ) from None

    def provenance(self) -> dict[str, Any]:
        """The parent build's provenance, as its manifest states it."""
        return {k: v for k, v in self.manifest.items() if k not in _OWN_KEYS}


_RECORD_TEXTS = ("version", "parent", "date", "reason")
_REMOVED_KEYS = ("image_id", "sha256", "url", "why")


def _shape_problem(manifest: dict[str, Any]) -> str | None:
    """What a patch reads from its parent's manifest beyond `read_manifest`'s fields, in the shape it reads it: the
    build's settings, seeds and earlier takedowns (rendered into the patch's card). None when all is well."""
    for key in ("config", "seeds"):
        if not isinstance(manifest.get(key, {}), dict):
            return f"field {key!r} must be an object"
    for key in ("release", "assembly"):
        if not isinstance(manifest.get("config", {}).get(key, {}), dict):
            return f"field 'config.{key}' must be an object"
    seed = manifest.get("seeds", {}).get("assembly")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        return "field 'seeds.assembly' must be an integer"
    takedowns = manifest.get("takedowns", [])
    if not isinstance(takedowns, list):
        return "field 'takedowns' must be a list"
    for i, record in enumerate(takedowns):
        fine = (
            isinstance(record, dict)
            and all(isinstance(record.get(k), str) for k in _RECORD_TEXTS)
            and isinstance(record.get("rows"), dict)
            and isinstance(record["rows"].get("summary"), str)
            and isinstance(record.get("removed"), list)
            and all(isinstance(image, dict) and all(k in image for k in _REMOVED_KEYS) for image in record["removed"])
        )
        if not fine:
            return f"field 'takedowns[{i}]' is not a takedown record"
    return None


class ReleasedImages:
    """The image bytes of a release's image config by id (as released: no conversion), read one row group at a
    time, so a patch never holds more than one row group of images in memory. A URL-only release has no bytes for
    the images it names by URL: a null `image` (MixCuBe originals) or no `image` column (3XCM); those are None."""

    def __init__(self, folder: Path, key_column: str) -> None:
        self.files = sorted(p for p in folder.glob("*.parquet") if p.is_file())
        self.where: dict[str, tuple[int, int, int]] = {}  # key -> (file, row group, row)
        self.sha_where: dict[str, str] = {}  # the sha256 column -> key
        self.has_bytes: list[bool] = []  # per file: whether it has an `image` column
        for f, path in enumerate(self.files):
            parquet = pq.ParquetFile(path)
            self.has_bytes.append("image" in parquet.schema_arrow.names)
            for group in range(parquet.num_row_groups):
                columns = parquet.read_row_group(group, columns=[key_column, "sha256"])
                for row, (key, sha) in enumerate(
                    zip(columns[key_column].to_pylist(), columns["sha256"].to_pylist(), strict=True)
                ):
                    self.where[key] = (f, group, row)
                    self.sha_where.setdefault(sha, key)
        self._group: tuple[int, int] | None = None
        self._bytes: list[bytes] = []

    def get(self, key: str) -> bytes | None:
        """The released bytes of `key`; None where the release has none (URL-only)."""
        f, group, row = self.where[key]
        if not self.has_bytes[f]:
            return None
        if self._group != (f, group):
            images = pq.ParquetFile(self.files[f]).read_row_group(group, columns=["image"])["image"]
            self._bytes = [image["bytes"] if image else None for image in images.to_pylist()]
            self._group = (f, group)
        return self._bytes[row]

    def by_sha256(self, sha: str) -> bytes | None:
        return self.get(self.sha_where[sha])

    def released_sha256(self) -> dict[str, str]:
        """key -> sha256 of the released file (a converted image's differs from its `sha256` column); only the
        images released with their bytes."""
        released = ((key, self.get(key)) for key in self.where)
        return {key: hashlib.sha256(data).hexdigest() for key, data in released if data is not None}


class _ReleasedBlobs:
    """What `write_mixcube_release` asks of a blob store, served from the parent release: images by their sha256
    column (already JPEG, so written unchanged), masks from `masks/<sha256>.png`."""

    def __init__(self, parent: ParentRelease, images: ReleasedImages) -> None:
        self.parent, self.images = parent, images

    def get(self, sha: str) -> bytes:
        if sha in self.images.sha_where:
            data = self.images.by_sha256(sha)
            if data is None:  # a URL-only original: the writer never asks for its bytes, only for the swaps'
                raise PatchInputError(f"{self.parent.folder}: image {sha} has no bytes in the release (URL-only)")
            return data
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
    """One takedown as the manifest keeps it (and the changelog and denylist are written from). The reason is kept
    as given (one line): data, escaped only where a card renders it."""
    checked_date(date)
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


#: Inside a code span Markdown and HTML are not interpreted; these would end the span, the table cell or the line,
#: or be taken for a tag by a renderer that does not honour code spans: percent-encoded, as in a URL.
_CODE_SPAN_ENCODED = {"|": "%7C", "`": "%60", "<": "%3C", ">": "%3E"}


def code_span(value: Any) -> str:
    """`value` as inline code on one line that nothing can leave: an id, a sha256 or a URL shown as it is (a plain
    value unchanged), with `|`, a backtick, `<` and `>` percent-encoded."""
    text = " ".join(str(value).split())
    return "`" + "".join(_CODE_SPAN_ENCODED.get(c, c) for c in text) + "`"


def _cell(value: Any) -> str:
    return "-" if value in (None, "") else code_span(value)


def _prose_text(part: str) -> str:
    escaped = html.escape(part.replace("\\", "\\\\"), quote=False)
    return escaped.replace("[", "\\[").replace("]", "\\]")


def markdown_prose(value: Any) -> str:
    """Text we wrote that holds code spans (a takedown's row summary, read back from a parent's manifest for the
    earlier takedowns, so possibly anything): on one line, with HTML escaped and no link or image syntax outside
    the code spans, and each code span made safe as `code_span` makes it. Our own summaries come out unchanged."""
    parts = " ".join(str(value).split()).split("`")
    tail = ""
    if len(parts) % 2 == 0:  # an unmatched backtick: what follows it is text, the backtick shown as one
        tail = "\\`" + _prose_text(parts.pop())
    return "".join(code_span(p) if i % 2 else _prose_text(p) for i, p in enumerate(parts)) + tail


def render_changelog(takedowns: list[dict[str, Any]]) -> str:
    """The card's CHANGELOG: every takedown so far, the latest first. Every string in it came from a takedown
    request or a release (the earlier takedowns from the parent's manifest): each is escaped (`markdown_text`,
    `code_span`, `markdown_prose`), so none can open a tag, a link, a line or a table cell."""
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
                "why": markdown_text(image["why"]),
            }
            for image in record["removed"]
        ]
        parts.append(
            f"\n### {markdown_text(record['version'])} ({markdown_text(record['date'])}, UTC)\n\n"
            f"Taken down from {markdown_text(record['parent'])}. Reason: {markdown_text(record['reason'])}\n\n"
            f"{markdown_table(removed)}\n{markdown_prose(record['rows']['summary'])}\n"
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
