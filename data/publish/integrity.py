"""A release (or result) folder as untrusted input: its manifest read strictly, and its files checked against it.

Everything that opens a folder someone handed us (`validate`, `evaluate`, `fetch-release`, `takedown`) reads its
manifest here: readable UTF-8 JSON (`data.publish.json_file`), an object, validated through its model
(`data.publish.manifest`: a `name` that is a plain token and a semver `version`, both used to build paths, a `files`
map whose names stay inside the folder, and the provenance's typed fields).

`verify_files` then hashes every listed file again and names each one that is missing, has another size or another
sha256, and each file on disk that the manifest does not list. `verify_image_bytes` checks each image's released
bytes against its `sha256` column where the release kept the source's bytes (MixCuBe; 3XCM rows whose source was a
JPEG: a converted PNG's bytes are not its source's, and are covered by its Parquet file's sha256); the caller names
the image config (`data.publish.format.ImageConfig`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar, overload

from pydantic import ValidationError

from data.publish.format import MANIFEST, ImageConfig, ReleaseReadError
from data.publish.json_file import read_json_object
from data.publish.manifest import FileEntry, FolderManifest, ReleaseManifest, first_problem

#: A manifest is a few MB at most (one line per file); a bigger one is not ours.
MAX_MANIFEST_BYTES = 64 << 20

M = TypeVar("M", bound=FolderManifest)


class ReleaseIntegrityError(ReleaseReadError):
    """A release whose files are not those its manifest lists: the message names each mismatch."""

    def __init__(self, folder: Path, problems: list[str]) -> None:
        self.problems = problems
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        super().__init__(f"{folder}: {len(problems)} file(s) differ from {MANIFEST}: {shown}")


@dataclass(frozen=True)
class Manifest(Generic[M]):
    folder: Path
    model: M  # the manifest, validated (`data.publish.manifest`)
    sha256: str  # of manifest.json itself, as results and patches cite it

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def version(self) -> str:
        return self.model.version

    @property
    def files(self) -> dict[str, FileEntry]:
        return self.model.files


@overload
def read_manifest(folder: Path) -> Manifest[ReleaseManifest]: ...
@overload
def read_manifest(folder: Path, kind: type[M]) -> Manifest[M]: ...
def read_manifest(folder: Path, kind: type[FolderManifest] = ReleaseManifest) -> Manifest[Any]:
    """The folder's manifest, validated through `kind` (a release's by default); ReleaseReadError names the file
    and the field, on one line."""
    path = folder / MANIFEST
    if not path.is_file():
        raise ReleaseReadError(f"{folder}: no {MANIFEST}; not a release folder")
    data, raw = read_json_object(
        path, MAX_MANIFEST_BYTES, error=ReleaseReadError, too_big="not a culturebench manifest"
    )
    try:
        model = kind.model_validate(data)
    except ValidationError as exc:
        raise ReleaseReadError(f"{path}: {first_problem(exc)}") from None
    return Manifest(folder, model, hashlib.sha256(raw).hexdigest())


def file_digest(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def verify_files(manifest: Manifest[M], only: Iterable[str] | None = None) -> list[str]:
    """Each mismatch between the folder and its manifest, named: a listed file missing, or of another size or
    sha256, and a file on disk the manifest does not list. `only`: the folder prefixes (config names) to check,
    for a reader that needs only some tables; None checks everything."""
    prefixes = tuple(f"{p.rstrip('/')}/" for p in only) if only is not None else None

    def wanted(rel: str) -> bool:
        return prefixes is None or rel.startswith(prefixes)

    folder, problems = manifest.folder, []
    for rel, entry in sorted(manifest.files.items()):
        if not wanted(rel):
            continue
        path = folder / rel
        if not path.is_file() or path.is_symlink():
            problems.append(f"{rel} is missing")
        elif path.stat().st_size != entry.bytes:
            problems.append(f"{rel} has {path.stat().st_size} bytes, the manifest says {entry.bytes}")
        elif file_digest(path) != entry.sha256:
            problems.append(f"{rel} has another sha256 than the manifest's")
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if (path.is_file() or path.is_symlink()) and rel != MANIFEST and rel not in manifest.files and wanted(rel):
            problems.append(f"{rel} is not in the manifest")
    return problems


def verify_image_bytes(manifest: Manifest[M], images: ImageConfig) -> list[str]:
    """Each image of the config `images` whose released bytes do not hash to its `sha256` column, where the release
    kept the source's bytes (a row whose `format` is JPEG, or every row of a table without `format`: every MixCuBe
    row, a 3XCM row whose source was a JPEG). A URL-only release's missing bytes are not a mismatch."""
    config, key = images
    import pyarrow.parquet as pq

    problems = []
    for file in sorted((manifest.folder / config).glob("*.parquet")):
        try:
            reader = pq.ParquetFile(file)
            names = reader.schema_arrow.names
            if "image" not in names or "sha256" not in names or key not in names:
                continue
            columns = [key, "sha256", "image"] + (["format"] if "format" in names else [])
            for group in range(reader.num_row_groups):
                part = reader.read_row_group(group, columns=columns).to_pydict()
                formats = part.get("format") or ["JPEG"] * len(part[key])
                for name, sha, image, fmt in zip(part[key], part["sha256"], part["image"], formats, strict=True):
                    data = image.get("bytes") if isinstance(image, dict) else None
                    if data and fmt == "JPEG" and hashlib.sha256(data).hexdigest() != sha:
                        problems.append(
                            f"{file.relative_to(manifest.folder)}: image {name!r} does not hash to its sha256"
                        )
        except Exception as exc:
            problems.append(f"{file.relative_to(manifest.folder)}: not a readable image table ({type(exc).__name__})")
    return problems


def verified(
    folder: Path, only: Iterable[str] | None = None, images: ImageConfig | None = None
) -> Manifest[ReleaseManifest]:
    """The manifest of a folder whose files (those under `only`, or all) are what it lists, and, with `images`,
    whose image bytes are what their `sha256` column says (`verify_image_bytes`); raises ReleaseIntegrityError
    naming each mismatch."""
    manifest = read_manifest(folder)
    problems = verify_files(manifest, only)
    if images is not None and not problems:
        problems = verify_image_bytes(manifest, images)
    if problems:
        raise ReleaseIntegrityError(folder, problems)
    return manifest
