"""Patch releases: a takedown written as the next version of a release, next to it (`culturebench takedown`).

The parent release is read, never changed. The patch is written by the benchmark's own release writer (through
`ReleaseWriter`: staged, immutable, a manifest with the sha256 of every file), fed the parent's released image bytes
as they are (no second JPEG conversion), so every image, figure, croissant.json and card section is made the way a
build makes it. What differs:
- the manifest names the parent version (and its manifest's sha256) and carries every takedown so far
  (`takedowns`), besides the parent build's provenance (config, seeds, backends, stage counts) and this patch's
  validation and reuse (`patch_provenance`);
- the card ends with a CHANGELOG (`data/publish/changelog.py`): per version, what was removed (ids, sha256, URLs),
  when (UTC date) and why;
- the removed images go on the denylist of the release root (`data/takedown/denylist.py`), merged with what is there,
  once the patch is written (`record_denylist`);
- every image of the parent that the root's denylist names leaves too (`ParentRelease.denylisted`, recorded in the
  takedown's `requested.denylisted`), and a patch must be the root's newest version (`later_versions`): the newest
  version never holds a denylisted image.

This module is the generic part: versions, the parent release, the takedown record and the denylist entries. What a
takedown removes and how the patch is written are each benchmark's (`derive_patch` and `write_patch` of its
`Benchmark` record); `DerivedPatch` is what its derivation hands the generic steps.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypedDict

import pyarrow as pa
from pydantic import JsonValue, ValidationError

from data.provenance import code_version
from data.publish.format import IMAGE_CONFIGS, MANIFEST, SEMVER, ImageConfig
from data.publish.images import ReleasedImages
from data.publish.integrity import read_manifest
from data.publish.manifest import Provenance, ReleaseManifest, TakedownRecord, validated
from data.publish.reader import read_parquet_files, release_pack
from data.publish.release import ReleaseConfig
from data.reference import ReferencePack
from data.takedown.denylist import Denylist, DenylistEntry, HeldDenylist, write_denylist

#: Manifest keys that describe the release file by file, or the release itself: not carried over from the parent.
_OWN_KEYS = ("name", "version", "files", "parent", "takedowns", "validation", "mode")
#: The columns a denylist entry matches a release's image rows by, as builds match theirs (`data/takedown/denylist.py`).
DENYLIST_HASHES = ("sha256", "pixel_sha256")
DENYLIST_URLS = ("url", "final_url")


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


def _precedence_key(version: str) -> tuple[Any, ...]:
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
    manifest: ReleaseManifest
    sha256: str | None = field(default=None, repr=False)  # of manifest.json as read

    @classmethod
    def open(cls, folder: Path, known: Collection[str] | None = None) -> ParentRelease:
        """The release at `folder`, its manifest read strictly (`read_manifest`: UTF-8 JSON, validated through
        `ReleaseManifest`, earlier takedowns included; ReleaseReadError names the file and field). PatchInputError
        for a benchmark outside `known` (the benchmarks takedown knows; None: any), or a folder that is not
        <release root>/<name>/<version>."""
        read = read_manifest(folder)
        path, name, version = folder / MANIFEST, read.name, read.version
        if known is not None and name not in known:
            raise PatchInputError(f"{path}: a release of {name!r}; takedown knows {', '.join(known)}")
        if folder.parent.name != name or version != folder.name:
            raise PatchInputError(
                f"{folder}: a release lives in <release root>/{name}/{version}/, where its patch and "
                "the denylist later builds read are written; move it there first"
            )
        return cls(folder, read.model, read.sha256)

    @property
    def name(self) -> str:
        return self.manifest.name

    def pack(self) -> ReferencePack:
        """The reference pack the parent was built from; its patch carries it on."""
        return release_pack(self.folder)

    @property
    def version(self) -> str:
        return self.manifest.version

    @property
    def root(self) -> str:
        return str(self.folder.parent.parent)

    def manifest_sha256(self) -> str:
        """Of the manifest as it was read (the bytes the patch was made from)."""
        return self.sha256 or hashlib.sha256((self.folder / MANIFEST).read_bytes()).hexdigest()

    def table(self, config: str, drop_image: bool = True, columns: list[str] | None = None) -> pa.Table:
        """The config's rows (`columns`: only those it has; None: all), without the image bytes by default."""
        files = sorted(p for p in (self.folder / config).glob("*.parquet") if p.is_file())
        if not files:
            raise PatchInputError(f"{self.folder} has no {config}/*.parquet")
        table = read_parquet_files(files, columns).replace_schema_metadata(None)  # the columns, not HF's record
        return table.drop_columns(["image"]) if drop_image and "image" in table.column_names else table

    def images(self, images: ImageConfig | None = None) -> ReleasedImages:
        """The released bytes of its image config (`images`; by default the one `IMAGE_CONFIGS` names for it)."""
        images = images or IMAGE_CONFIGS.get(self.name)
        if images is None:
            raise PatchInputError(f"{self.folder}: no image config is known for {self.name} releases")
        return ReleasedImages(self.folder / images.config, images.key)

    def release_config(self, version: str) -> ReleaseConfig:
        """The parent's shard settings (its released config), this root, the new version; the parent's mode as its
        manifest records it (a URL-only release's patch is URL-only)."""
        released = self.manifest.config.get("release", {})
        fields = {k: v for k, v in released.items() if k in ReleaseConfig.model_fields and k not in ("root", "version")}
        if "mode" in self.manifest.model_fields_set:
            fields["mode"] = self.manifest.mode
        try:
            return ReleaseConfig(root=self.root, version=version, **fields)
        except ValidationError as exc:
            problem = " ".join(str(exc).split())[:300]
            raise PatchInputError(
                f"{self.folder / MANIFEST}: its release settings are not usable ({problem})"
            ) from None

    def provenance(self) -> dict[str, JsonValue]:
        """The parent build's provenance, as its manifest states it (the model gives back what it read: the tests
        check it on every manifest a build writes)."""
        stated = self.manifest.model_dump(mode="json", exclude_unset=True)
        return {k: v for k, v in stated.items() if k not in _OWN_KEYS}

    def later_versions(self, version: str) -> list[str]:
        """The releases beside the parent (`<root>/<name>/<v>/manifest.json`) later than `version`, oldest first."""
        found = [
            p.name
            for p in self.folder.parent.iterdir()
            if p.is_dir() and re.fullmatch(SEMVER, p.name) and (p / MANIFEST).is_file()
        ]
        return sorted((v for v in found if is_later(v, version)), key=_precedence_key)

    def denylisted(self, denylist: Denylist, version: str, images: ImageConfig | None = None) -> list[str]:
        """The ids of the parent's images the denylist names, matched as builds match theirs (sha256, pixel hash,
        URL, final URL), leaving out the entries of `version` itself (this takedown's own, merged by an earlier run
        of it, whose request names them again)."""
        images = images or IMAGE_CONFIGS.get(self.name)
        entries = [e for e in denylist.entries if e.version != version]
        if images is None or not entries:
            return []
        table = self.table(images.config, columns=[images.key, *DENYLIST_HASHES, *DENYLIST_URLS])
        hit = Denylist(benchmark=denylist.benchmark, entries=entries).matching(table, DENYLIST_HASHES, DENYLIST_URLS)
        return [str(i) for i in table.filter(hit)[images.key].to_pylist()]


# -- what a benchmark's derivation gives ------------------------------------------------------------------------------


class RemovedRecord(TypedDict):
    """A removed image as the takedown record keeps it (`data.publish.manifest.RemovedImage`, with its `index`)."""

    image_id: str
    index: int  # its row in the parent release
    sha256: str | None
    pixel_sha256: str | None
    url: str | None
    final_url: str | None
    why: str  # requested | byte copy of <id> | pixel copy of <id> | quintet of <id>


@dataclass
class DerivedPatch:
    """What taking a request down from a parent gives, decided and not written (a benchmark's `derive_patch`)."""

    tables: dict[str, pa.Table]  # the patch's tables by config, as its writer gets them (`validate` compares them)
    removed: list[RemovedRecord]  # each removed image as the takedown record keeps it
    # How the rows changed, as the takedown record keeps it: a `summary` for the changelog, the benchmark's own
    # counts beside it (`TakedownRecord` checks it).
    rows: Mapping[str, object]
    images_before: int  # images in the parent and in the patch: a patch without images is refused
    images_after: int
    problems: str | None = None  # the benchmark rules the patch would break (None: none); it is then refused
    detail: Any = None  # what the benchmark's own writer needs besides the tables (3XCM: its validation and reuse)


# -- the takedown record, the provenance, the denylist --------------------------------------------------------------


def takedown_record(
    parent: ParentRelease,
    version: str,
    date: str,
    reason: str,
    requested: dict[str, list[str]],
    removed: list[RemovedRecord],
    rows: Mapping[str, object],
) -> TakedownRecord:
    """One takedown as the manifest keeps it (and the changelog and denylist are written from). The reason is kept
    as given (one line): data, escaped only where a card renders it. The record keeps every key it is given (the
    removed images' `index`, the benchmark's row counts): `patch_provenance` writes them all."""
    checked_date(date)
    return TakedownRecord.model_validate(
        {
            "version": version,
            "parent": parent.version,
            "date": date,
            "reason": " ".join(reason.split()),
            "requested": requested,
            "removed": removed,
            "rows": rows,
            "code_version": code_version(),
        }
    )


def patch_provenance(parent: ParentRelease, record: TakedownRecord, **more: Any) -> Provenance:
    """The patch's provenance: the parent build's, what the patch adds (`more`), the parent it came from and every
    takedown so far, each as its record was given (`exclude_unset`). Checked as the writer checks it
    (ManifestError names the field)."""
    stated = {
        **parent.provenance(),
        **more,
        "parent": {"version": parent.version, "manifest_sha256": parent.manifest_sha256()},
        "takedowns": [
            t.model_dump(mode="json", exclude_unset=True) for t in [*(parent.manifest.takedowns or []), record]
        ],
    }
    return validated(Provenance, stated)


def denylist_entries(record: TakedownRecord) -> list[DenylistEntry]:
    return [
        DenylistEntry(
            image_id=image.image_id,
            sha256=image.sha256,
            pixel_sha256=image.pixel_sha256,
            url=image.url,
            final_url=image.final_url,
            reason=record.reason,
            date=record.date,
            version=record.version,
            removed_from=record.parent,
        )
        for image in record.removed
    ]


def record_denylist(parent: ParentRelease, record: TakedownRecord, held: HeldDenylist | None = None) -> str:
    """Merge the takedown's images into the release root's denylist (through `held` when the takedown holds its
    lock already); returns its path."""
    if held is not None:
        path, _ = held.merge(denylist_entries(record))
    else:
        path, _ = write_denylist(parent.root, parent.name, denylist_entries(record))
    return path
