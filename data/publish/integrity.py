"""A release (or result) folder as untrusted input: its manifest read strictly, and its files checked against it.

Everything that opens a folder someone handed us (`validate`, `evaluate`, `fetch-release`, `takedown`) reads its
manifest here: readable UTF-8 JSON, an object, a `name` that is a plain token and a semver `version` (both are used
to build paths, so neither may hold a separator or `..`), and a `files` map whose names stay inside the folder.

`verify_files` then hashes every listed file again and names each one that is missing, has another size or another
sha256, and each file on disk that the manifest does not list. `verify_image_bytes` checks each image's released
bytes against its `sha256` column where the release kept the source's bytes (MixCuBe; 3XCM rows whose source was a
JPEG: a converted PNG's bytes are not its source's, and are covered by its Parquet file's sha256); the caller names
the image config (`data.publish.format.ImageConfig`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from data.publish.format import MANIFEST, SEMVER, ImageConfig, ReleaseReadError

#: A benchmark or model name as it appears in a path: no separator, no dot-dot, nothing hidden.
NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
#: A manifest is a few MB at most (one line per file); a bigger one is not ours.
MAX_MANIFEST_BYTES = 64 << 20


class ReleaseIntegrityError(ReleaseReadError):
    """A release whose files are not those its manifest lists: the message names each mismatch."""

    def __init__(self, folder: Path, problems: list[str]) -> None:
        self.problems = problems
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        super().__init__(f"{folder}: {len(problems)} file(s) differ from {MANIFEST}: {shown}")


@dataclass(frozen=True)
class Manifest:
    folder: Path
    name: str
    version: str
    data: dict[str, Any]
    sha256: str  # of manifest.json itself, as results and patches cite it

    @property
    def files(self) -> dict[str, dict[str, Any]]:
        files: dict[str, dict[str, Any]] = self.data["files"]
        return files


def read_manifest(folder: Path) -> Manifest:
    """The folder's manifest, checked field by field; ReleaseReadError names the file and the field."""
    path = folder / MANIFEST
    if not path.is_file():
        raise ReleaseReadError(f"{folder}: no {MANIFEST}; not a release folder")
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_MANIFEST_BYTES + 1)
    except OSError as exc:
        raise ReleaseReadError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if len(raw) > MAX_MANIFEST_BYTES:
        raise ReleaseReadError(f"{path}: larger than {MAX_MANIFEST_BYTES >> 20} MB; not a culturebench manifest")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ReleaseReadError(f"{path}: not UTF-8 text") from None
    except (ValueError, RecursionError) as exc:
        raise ReleaseReadError(f"{path}: not valid JSON ({' '.join(str(exc).split())[:200]})") from None
    if not isinstance(data, dict):
        raise ReleaseReadError(f"{path}: a JSON {type(data).__name__}, not an object")
    name, version = data.get("name"), data.get("version")
    if not isinstance(name, str) or not NAME.match(name):
        raise ReleaseReadError(f"{path}: field 'name' must be a plain name like 3xcm, not {_shown(name)}")
    if not isinstance(version, str) or not re.match(SEMVER, version):
        raise ReleaseReadError(f"{path}: field 'version' must be a semantic version (X.Y.Z), not {_shown(version)}")
    files = data.get("files")
    if not isinstance(files, dict):
        raise ReleaseReadError(f"{path}: field 'files' must map each file to its sha256 and size")
    for rel, entry in files.items():
        where = f"{path}: files[{_shown(rel)}]"
        if not _inside(rel):
            raise ReleaseReadError(f"{where}: not a relative path inside the release")
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str) or not SHA256.match(entry["sha256"]):
            raise ReleaseReadError(f"{where}: no sha256 of 64 hex digits")
        size = entry.get("bytes")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ReleaseReadError(f"{where}: 'bytes' must be a size in bytes")
    return Manifest(folder, name, version, data, hashlib.sha256(raw).hexdigest())


def _shown(value: Any) -> str:
    return repr(value)[:80]


def _inside(rel: Any) -> bool:
    if not isinstance(rel, str) or not rel or "\\" in rel or "\x00" in rel or rel == MANIFEST:
        return False
    parts = PurePosixPath(rel).parts
    return not PurePosixPath(rel).is_absolute() and ".." not in parts and "." not in parts


def file_digest(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def verify_files(manifest: Manifest, only: Iterable[str] | None = None) -> list[str]:
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
        elif path.stat().st_size != entry["bytes"]:
            problems.append(f"{rel} has {path.stat().st_size} bytes, the manifest says {entry['bytes']}")
        elif file_digest(path) != entry["sha256"]:
            problems.append(f"{rel} has another sha256 than the manifest's")
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if (path.is_file() or path.is_symlink()) and rel != MANIFEST and rel not in manifest.files and wanted(rel):
            problems.append(f"{rel} is not in the manifest")
    return problems


def verify_image_bytes(manifest: Manifest, images: ImageConfig) -> list[str]:
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


def verified(folder: Path, only: Iterable[str] | None = None, images: ImageConfig | None = None) -> Manifest:
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
