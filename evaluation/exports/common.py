"""What every harness export shares: the release opened (its manifest read strictly; each exporter verifies the
tables it reads against it, `Release.verify`, as the evaluation does), a URL-only release refused with the command
that fetches it, an output folder outside every input and release, and an immutable folder written atomically with a
manifest of every file's sha256 (a rerun with the same release writes the same bytes, or reports it unchanged)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from data.output_paths import check_output
from data.publish.folder import ImmutableFolder, ReleaseResult
from data.publish.manifest import FolderManifest
from data.publish.reader import Release
from evaluation.exports import HARNESSES

README = "README.md"


class ExportError(ValueError):
    """A release this harness cannot take (another benchmark, URL-only): the message says what to do."""


class Exporter(Protocol):
    BENCHMARKS: tuple[str, ...]

    def export(self, release: Release, folder: ImmutableFolder) -> str: ...


@dataclass(frozen=True)
class ExportResult:
    folder: str
    status: str  # created | unchanged
    command: str  # how to run the harness on it, as its README says


def exporter(harness: str) -> Exporter:
    if harness not in HARNESSES:
        raise ExportError(f"--harness {harness!r}: not one of {', '.join(sorted(HARNESSES))}")
    module: Exporter = importlib.import_module(HARNESSES[harness])
    return module


def run_export(release_path: Path, harness: str, out: Path) -> ExportResult:
    """Export `release_path` for `harness` into `out`."""
    module = exporter(harness)
    release = Release.open(release_path)
    if release.name not in module.BENCHMARKS:
        raise ExportError(f"{release_path}: a {release.name} release; --harness {harness} takes {module.BENCHMARKS}")
    if release.manifest.mode == "urls":
        raise ExportError(
            f"{release_path}: a URL-only release has no images; fetch them first: culturebench fetch-release "
            f"{release_path} --out <folder> --write-images"
        )
    check_output(out, inputs=[release_path], option="--out", immutable_target=True)
    name = f"export-{harness}-{release.name}"
    folder = ImmutableFolder.at(str(out), name, release.version, FolderManifest)
    try:
        command = module.export(release, folder)
        result: ReleaseResult = folder.commit(
            {"name": name, "version": release.version, "release_manifest_sha256": release.manifest_sha256}
        )
    except BaseException:
        folder.abort()
        raise
    return ExportResult(folder=str(out), status=result.status, command=command)
