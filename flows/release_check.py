"""`culturebench validate`: a release folder checked whole, whichever benchmark it holds.

First its files against its manifest (`data/release_integrity.py`: every file's size and sha256, no file unlisted,
each image's bytes against its `sha256` where the release kept the source's bytes); a mismatch is a violation of
the rule `integrity`, and the benchmark's rules are then not checked (the tables are not the release's). Then the
benchmark's own rules (`Benchmark.validate_release`: 3XCM's `curation/validate.py`, MixCuBe's
`curation/validate_mixcube.py`). Which checks run depends on nothing the manifest says but the benchmark's name.
"""

from __future__ import annotations

from pathlib import Path

from curation.validate import ValidationReport, Violation
from data.release_format import ReleaseReadError
from data.release_integrity import Manifest, read_manifest, verify_files, verify_image_bytes
from flows import benchmarks


def check_release(folder: Path) -> tuple[Manifest, ValidationReport]:
    """The release's manifest and its report; ReleaseReadError when it is no readable release of a benchmark we
    know, or a table cannot be read."""
    manifest = read_manifest(folder)
    if manifest.name not in benchmarks.names():
        raise ReleaseReadError(
            f"{folder}: a release of {manifest.name!r}; validate knows {', '.join(benchmarks.names())}"
        )
    problems = verify_files(manifest) or verify_image_bytes(manifest)
    if problems:
        violations = [Violation(table="files", row=None, rule="integrity", detail=p) for p in problems]
        return manifest, ValidationReport(violations=violations, rows_checked={"files": len(manifest.files)})
    validate = benchmarks.get(manifest.name).validate_release
    if validate is None:
        raise ReleaseReadError(f"{folder}: no rule checker for {manifest.name}")
    report = validate(folder)
    report.rows_checked = {"files": len(manifest.files), **report.rows_checked}
    return manifest, report
