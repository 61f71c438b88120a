"""`culturebench validate`: a release folder checked whole, whichever benchmark it holds.

1. Its files against its manifest (`data/publish/integrity.py`: every file's size and sha256, no file unlisted,
   each image's bytes against its `sha256` where the release kept the source's bytes, in the config the benchmark's
   record names, `Benchmark.image_config`). A mismatch is a violation of the rule `integrity`, and nothing else is
   checked: the tables are not the release's.
2. The benchmark's own rules (`Benchmark.validate_release`: 3XCM's `curation/validate.py`, MixCuBe's
   `curation/validate_mixcube.py`).
3. A takedown patch (a manifest naming a `parent` or `takedowns`) is derived again from its parent, which must sit
   beside it and be valid itself, and must equal that derivation (`Benchmark.derive_patch`) table by table. Its
   rows kept from the parent were chosen least-used over the parent's pool, so the patch alone cannot replay the
   balance; the parent can.

What the manifest says decides no check away: a manifest that claims a patch gets the stricter check, not a
weaker one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from curation.takedown import TakedownRequest
from curation.validate import ValidationReport, Violation
from data.publish.format import ReleaseReadError
from data.publish.integrity import Manifest, read_manifest, verify_files, verify_image_bytes
from data.publish.manifest import ReleaseManifest, TakedownRecord
from flows import benchmarks


def check_release(folder: Path) -> tuple[Manifest[ReleaseManifest], ValidationReport]:
    """The release's manifest and its report; ReleaseReadError when it is no readable release of a benchmark we
    know, or a table cannot be read."""
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
    patch = declares_patch(manifest.model)
    report = validate(folder, patch)
    if patch:
        report.violations += replay_patch(manifest)
    report.rows_checked = {"files": len(manifest.files), **report.rows_checked}
    return manifest, report


def declares_patch(manifest: ReleaseManifest) -> bool:
    return bool({"parent", "takedowns"} & manifest.model_fields_set)


def _violation(rule: str, detail: str) -> Violation:
    return Violation(table="manifest", row=None, rule=f"patch.{rule}", detail=detail)


def replay_patch(manifest: Manifest[ReleaseManifest]) -> list[Violation]:
    """A patch against its parent: the parent beside it, valid, the one the patch names (by its manifest's sha256),
    and the patch's tables exactly what taking the last takedown's request down from it gives."""
    from data.publish.patch import ParentRelease, PatchInputError
    from flows.takedown import derive_patch

    # The model checked the shapes (a semver parent version, takedown records); what is left is the replay.
    parent, takedowns = manifest.model.parent, manifest.model.takedowns
    if parent is None or not takedowns:
        return [_violation("manifest", "a patch names its parent ({version, manifest_sha256}) and its takedowns")]
    version, record = parent.version, takedowns[-1]
    folder = manifest.folder.parent / version
    if not (folder / "manifest.json").is_file():
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
    requested = record.requested
    if requested is None:
        return [_violation("manifest", "the last takedown has no `requested` image ids, sha256 and URLs")]
    request = TakedownRequest(
        image_ids=tuple(requested.get("image_ids", [])),
        sha256s=tuple(requested.get("sha256", [])),
        urls=tuple(requested.get("urls", [])),
    )
    try:
        derived = derive_patch(ParentRelease.open(folder), request)
    except (PatchInputError, ValueError) as exc:
        return [_violation("replay", f"the takedown cannot be derived again from {version}: {exc}")]
    patch = ParentRelease.open(manifest.folder)
    return [
        _violation(
            "replay",
            f"{name} is not what taking the requested images down from {version} gives",
        )
        for name, expected in derived.tables.items()
        if not _same_rows(_patch_table(patch, name), expected)
    ]


def _dumped(records: list[TakedownRecord]) -> list[dict[str, Any]]:
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
