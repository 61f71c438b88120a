"""`culturebench validate`: a release folder checked whole, whichever benchmark it holds.

1. Its files against its manifest (`data/publish/integrity.py`: every file's size and sha256, no file unlisted,
   each image's bytes against its `sha256` where the release kept the source's bytes, in the config the benchmark's
   record names, `Benchmark.image_config`). A mismatch is a violation of the rule `integrity`, and nothing else is
   checked: the tables are not the release's. Then what the release claims about its tables, which a forger who
   recomputes the manifest leaves standing (`verify_claims`): the card's `configs`, croissant.json, the WebDataset
   tars, each kept source's `num_bytes` and the manifest's `mode`, each a rule of its own (`card.configs`,
   `croissant`, `webdataset`, `image.num_bytes`, `release.mode`).
2. The benchmark's own rules (`Benchmark.validate_release`: 3XCM's `curation/validate.py`, MixCuBe's
   `curation/validate_mixcube.py`), and the denylist of its release root (`<root>/<name>/denylist.json`, read
   when the folder lies at `<root>/<name>/<version>`): no image may match an entry of a takedown at or before the
   release's version (rule `denylist`). A release earlier than a takedown held the image when it was published.
3. A takedown patch (a manifest naming a `parent` or `takedowns`) is derived again from its parent, which must be
   an earlier version, sit beside it and be valid itself, and must equal that derivation (`Benchmark.derive_patch`)
   table by table, with the removed images and row changes its takedown record states. Its rows kept from the
   parent were chosen least-used over the parent's pool, so the patch alone cannot replay the balance; the parent
   can.

What the manifest says decides no check away: a manifest that claims a patch gets the stricter check, not a
weaker one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import JsonValue

from curation.takedown import TakedownRequest
from curation.validate import ValidationReport, Violation
from data.publish.format import MANIFEST, ImageConfig, ReleaseReadError
from data.publish.integrity import Manifest, read_manifest, verify_claims, verify_files, verify_image_bytes
from data.publish.manifest import ReleaseManifest, TakedownRecord
from data.publish.reader import read_parquet_parts, release_pack_problems
from data.takedown.denylist import Denylist, denylist_location, read_denylist
from flows import benchmarks

#: Denylisted images named one by one; the rest are counted.
DENYLISTED_NAMED = 20


def check_release(folder: Path) -> tuple[Manifest[ReleaseManifest], ValidationReport]:
    """The release's manifest and its report; ReleaseReadError when it is no readable release of a benchmark we
    know, or a table cannot be read; DenylistError when its root's denylist cannot be read."""
    manifest = read_manifest(folder)
    if manifest.name not in benchmarks.names():
        raise ReleaseReadError(
            f"{folder}: a release of {manifest.name!r}; validate knows {', '.join(benchmarks.names())}"
        )
    benchmark = benchmarks.get(manifest.name)
    problems = verify_files(manifest)
    if not problems and benchmark.image_config is not None:
        problems = verify_image_bytes(manifest, benchmark.image_config)
    if problems:
        violations = [Violation(table="files", row=None, rule="integrity", detail=p) for p in problems]
        return manifest, ValidationReport(violations=violations, rows_checked={"files": len(manifest.files)})
    validate = benchmark.validate_release
    if validate is None:
        raise ReleaseReadError(f"{folder}: no rule checker for {manifest.name}")
    claims = [
        Violation(table="release", row=None, rule=rule, detail=detail)
        for rule, detail in verify_claims(manifest, benchmark.image_config)
    ]
    # The pack the rules read, against what the manifest and card state of it (a forger's recomputed manifest
    # leaves `reference` standing): the rules are not checked against a pack the release does not state.
    pack = [Violation(table="release", row=None, rule="reference", detail=p) for p in release_pack_problems(folder)]
    if pack:
        return manifest, ValidationReport(violations=[*pack, *claims], rows_checked={"files": len(manifest.files)})
    patch = declares_patch(manifest.model)
    report = validate(folder, patch)
    # The rules first: a summary shows the first violations, and a forged table's broken rule says most.
    report.violations = [*report.violations, *denylisted(manifest, benchmark.image_config), *claims]
    if patch:
        report.violations += replay_patch(manifest)
    report.rows_checked = {"files": len(manifest.files), **report.rows_checked}
    return manifest, report


def declares_patch(manifest: ReleaseManifest) -> bool:
    return bool({"parent", "takedowns"} & manifest.model_fields_set)


def _violation(rule: str, detail: str) -> Violation:
    return Violation(table="manifest", row=None, rule=f"patch.{rule}", detail=detail)


def _applies(entry_version: str, release_version: str) -> bool:
    """Whether a takedown of `entry_version` binds a release of `release_version`: it does unless the release is
    earlier (one whose version cannot be ordered binds, on the safe side)."""
    from data.takedown.patch import PatchInputError, is_later

    try:
        return not is_later(entry_version, release_version)
    except PatchInputError:
        return True


def denylisted(manifest: Manifest[ReleaseManifest], images: ImageConfig | None) -> list[Violation]:
    """Each image of the release that an entry of its root's denylist names, where that takedown is not later than
    the release: a patch applies every takedown before it, so none may come back (rule `denylist`)."""
    from data.takedown.patch import DENYLIST_HASHES, DENYLIST_URLS

    folder = manifest.folder
    if images is None or folder.parent.name != manifest.name:
        return []  # not laid out in a release root: there is no root's denylist to check against
    root = str(folder.parent.parent)
    entries = [e for e in read_denylist(root, manifest.name).entries if _applies(e.version, manifest.version)]
    if not entries:
        return []
    table = read_parquet_parts(folder / images.config, [images.key, *DENYLIST_HASHES, *DENYLIST_URLS])
    if table is None:
        return []
    hit = Denylist(benchmark=manifest.name, entries=entries).matching(table, DENYLIST_HASHES, DENYLIST_URLS)
    rows = table.filter(hit).to_pylist()
    where = denylist_location(root, manifest.name)
    violations = []
    for row in rows[:DENYLISTED_NAMED]:
        values = {v for k, v in row.items() if k != images.key and v}
        versions = sorted({e.version for e in entries if values & {e.sha256, e.pixel_sha256, e.url, e.final_url}})
        violations.append(
            Violation(
                table=images.config,
                row=None,
                rule="denylist",
                detail=f"{images.key} {row[images.key]!r} is on {where}, taken down in {', '.join(versions)}, "
                f"not later than this release {manifest.version}",
            )
        )
    if len(rows) > DENYLISTED_NAMED:
        more = f"... and {len(rows) - DENYLISTED_NAMED} more images on {where}"
        violations.append(Violation(table=images.config, row=None, rule="denylist", detail=more))
    return violations


def replay_patch(manifest: Manifest[ReleaseManifest]) -> list[Violation]:
    """A patch against its parent: an earlier version, beside it, valid, the one the patch names (by its manifest's
    sha256), and the patch's tables exactly what taking the last takedown's request down from it gives."""
    from data.takedown.patch import ParentRelease, PatchInputError, is_later
    from flows.operations.takedown import derive_patch

    # The model checked the shapes (a semver parent version, takedown records); what is left is the replay.
    parent, takedowns = manifest.model.parent, manifest.model.takedowns
    if parent is None or not takedowns:
        return [_violation("manifest", "a patch names its parent ({version, manifest_sha256}) and its takedowns")]
    version, record = parent.version, takedowns[-1]
    path, last = manifest.folder / MANIFEST, f"takedowns[{len(takedowns) - 1}]"
    # Before the parent is opened: a patch naming itself (or a later release) would be checked without end.
    if not is_later(manifest.version, version):
        return [
            _violation(
                "parent",
                f"{path}: field 'parent.version' is {version}, not a version before the patch's own "
                f"{manifest.version}; a patch is derived from an earlier release",
            )
        ]
    if record.version != manifest.version or record.parent != version:
        return [
            _violation(
                "manifest",
                f"{path}: field '{last}' is the takedown of {record.version!r} from {record.parent!r}, not of this "
                f"patch {manifest.version} from its parent {version}",
            )
        ]
    # The record's own faults, in validate's words (deriving it would answer in the takedown command's).
    if not record.removed:
        return [_violation("manifest", f"{path}: field '{last}.removed' is empty; a takedown removes an image")]
    requested = record.requested or {}
    if not (requested.get("image_ids") or requested.get("sha256") or requested.get("urls")):
        return [_violation("manifest", f"{path}: field '{last}.requested' names no image id, sha256 or URL")]
    folder = manifest.folder.parent / version
    if not (folder / MANIFEST).is_file():
        return [
            _violation(
                "parent",
                f"the parent release {version} is not beside the patch ({folder}): a patch is checked by deriving "
                "it again from its parent; put the parent there",
            )
        ]
    try:
        parent_manifest, parent_report = check_release(folder)
    except ReleaseReadError as exc:
        return [_violation("parent", f"the parent release cannot be read: {exc}")]
    if not parent_report.ok:
        return [_violation("parent", f"the parent release {version} is not valid: {parent_report.summary(3)}")]
    if parent_manifest.sha256 != parent.manifest_sha256:
        return [_violation("parent", f"{folder}/manifest.json is not the parent manifest the patch names")]
    if _dumped([*(parent_manifest.model.takedowns or []), record]) != _dumped(takedowns):
        return [_violation("manifest", "the patch's takedowns are not its parent's followed by its own")]
    try:
        request = TakedownRequest(
            image_ids=tuple(requested.get("image_ids", [])),
            sha256s=tuple(requested.get("sha256", [])),
            urls=tuple(requested.get("urls", [])),
            denylisted=tuple(requested.get("denylisted", [])),
        )
        derived = derive_patch(ParentRelease.open(folder), request)
    except (PatchInputError, ValueError) as exc:
        return [_violation("replay", f"the takedown cannot be derived again from {version}: {exc}")]
    patch = ParentRelease.open(manifest.folder)
    violations = [
        _violation(
            "replay",
            f"{name} is not what taking the requested images down from {version} gives",
        )
        for name, expected in derived.tables.items()
        if not _same_rows(_patch_table(patch, name), expected)
    ]
    # The record is what the changelog and the denylist were written from: it must state what the replay removed.
    stated = {
        "removed": [r.model_dump(mode="json", exclude_unset=True) for r in record.removed],
        "rows": record.rows.model_dump(mode="json", exclude_unset=True),
    }
    for key, value in json.loads(json.dumps({"removed": derived.removed, "rows": derived.rows})).items():
        if stated[key] != value:
            violations.append(
                _violation(
                    "replay",
                    f"{path}: field '{last}.{key}' is not what taking the requested images down from {version} gives",
                )
            )
    return violations


def _dumped(records: list[TakedownRecord]) -> list[dict[str, JsonValue]]:
    return [r.model_dump(mode="json", exclude_unset=True) for r in records]


def _patch_table(patch: Any, name: str) -> pa.Table | None:
    try:
        return patch.table(name)
    except ValueError:
        return None


def _same_rows(found: pa.Table | None, expected: pa.Table) -> bool:
    """The same rows, the columns compared by name (the writer orders a table's columns its own way)."""
    if found is None:
        return expected.num_rows == 0
    columns = [c for c in expected.column_names if c in found.column_names]
    if found.num_rows != expected.num_rows or len(columns) != len(found.column_names):
        return False
    return all(found[c].to_pylist() == expected[c].to_pylist() for c in columns)
