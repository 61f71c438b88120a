"""A reference pack's files, read as untrusted input: which names a pack may hold, size caps, no path outside the
folder, and the bytes of each file (so one read serves checking, loading, hashing and copying into a release).

A pack is a folder (a local path or an fsspec URL). Its files:

| file | what |
|---|---|
| `pack.json` | name, version, licence, sources |
| `countries.csv` | one row per country: name, ISO code, slug, language, language group, search region, region |
| `concepts.csv` | one row per concept: id, name (and, for the 3XCM concepts, the paper's and release's counts) |
| `i18n/<language>/language.json` | the language: names and the RQ3 descriptor template |
| `i18n/<language>/concepts.csv` | the concepts in the language, each row draft or reviewed |
| `i18n/<language>/countries.csv` | the countries' names in the language, plain and in descriptor form |
| `mixcube.json` | MixCuBe's cultures, categories, ethnicities and prompts (optional: a 3XCM-only pack has none) |
| `audit_prompts.json` | the bias audit's prompt sets (optional) |
| `README.md` | what the pack is and where its data comes from (optional) |
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fsspec
from fsspec.core import url_to_fs

PACK_FILE = "pack.json"
COUNTRIES_FILE = "countries.csv"
CONCEPTS_FILE = "concepts.csv"
MIXCUBE_FILE = "mixcube.json"
AUDIT_PROMPTS_FILE = "audit_prompts.json"
README_FILE = "README.md"
LANGUAGE_DIR = "i18n"
LANGUAGE_FILE = "language.json"
TOP_LEVEL_FILES = (PACK_FILE, COUNTRIES_FILE, CONCEPTS_FILE, MIXCUBE_FILE, AUDIT_PROMPTS_FILE, README_FILE)
LANGUAGE_FILES = (LANGUAGE_FILE, CONCEPTS_FILE, COUNTRIES_FILE)
REQUIRED_FILES = (PACK_FILE, COUNTRIES_FILE, CONCEPTS_FILE)
#: A language folder's name: a BCP 47-style code in lower case (`ja`, `fil`, `zh-hant`); `check` looks it up.
_LANGUAGE_DIR_NAME = re.compile(r"^[a-z]{2,3}(-[a-z0-9]{2,8})*$")

#: Caps on what a pack may make us read. The default pack is about 0.1 MB; a pack for 100 languages and 10,000
#: concepts stays well under them.
MAX_FILE_BYTES = 16 * 2**20
MAX_PACK_BYTES = 256 * 2**20
MAX_FILES = 5_000


class PackError(ValueError):
    """One thing wrong with a pack, naming its file and field: `<pack>/<file>: <field>: <message>`."""

    def __init__(self, location: str, file: str, field: str, message: str) -> None:
        self.location, self.file, self.field, self.message = location, file, field, message
        where = f"{location.rstrip('/')}/{file}" if file else location
        super().__init__(f"{where}: {field}: {message}" if field else f"{where}: {message}")


class PackErrors(ValueError):
    """Every error found in a pack; `str()` is one line per error."""

    def __init__(self, errors: list[PackError]) -> None:
        self.errors = errors
        super().__init__("\n".join(str(e) for e in errors))


def pack_file_kind(relative: str) -> str | None:
    """What a file name is in a pack (`countries.csv`, `i18n/language.json`, ...), or None for a name a pack does
    not hold."""
    parts = relative.split("/")
    if len(parts) == 1 and parts[0] in TOP_LEVEL_FILES:
        return parts[0]
    if (
        len(parts) == 3
        and parts[0] == LANGUAGE_DIR
        and _LANGUAGE_DIR_NAME.match(parts[1])
        and parts[2] in LANGUAGE_FILES
    ):
        return f"{LANGUAGE_DIR}/{parts[2]}"
    return None


@dataclass(frozen=True)
class PackFiles:
    """The bytes of every file of a pack, by path relative to its root (`/`-separated)."""

    location: str
    files: Mapping[str, bytes]

    def sha256s(self) -> dict[str, str]:
        return {name: hashlib.sha256(data).hexdigest() for name, data in sorted(self.files.items())}

    def digest(self) -> str:
        """One sha256 over every file's name and content: equal packs have equal digests wherever they lie."""
        lines = "".join(f"{name}\0{sha}\n" for name, sha in self.sha256s().items())
        return hashlib.sha256(lines.encode("utf-8")).hexdigest()

    def text(self, name: str) -> str:
        """A file as UTF-8 text (a BOM dropped); anything else is a `PackError` with the byte's offset."""
        data = self.files[name]
        try:
            return data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise PackError(
                self.location,
                name,
                "",
                f"not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start}); save it as UTF-8",
            ) from None

    def languages(self) -> list[str]:
        """The language folders, in name order."""
        return sorted({n.split("/")[1] for n in self.files if n.startswith(f"{LANGUAGE_DIR}/")})


def listing_key(location: str | os.PathLike[str]) -> tuple[str, tuple[tuple[str, int, Any], ...]]:
    """The pack's files with their sizes and modification times: a cheap key that changes when a file does."""
    fs, root = url_to_fs(str(location))
    try:
        found = fs.find(root, detail=True, withdirs=False)
    except (OSError, ValueError):
        return str(location), ()
    entries = tuple(
        sorted((str(k), int(v.get("size") or 0), v.get("mtime") or v.get("LastModified")) for k, v in found.items())
    )
    return str(location), entries[: MAX_FILES + 1]


def read_pack_files(location: str | os.PathLike[str]) -> PackFiles:
    """Every file of the pack at `location`, read within the caps. Refused, each in one `PackError` line: a missing
    folder, a name a pack does not hold, a link that leads outside the folder, a file over the cap, too many files."""
    where = str(location)
    try:
        fs, root = url_to_fs(where)
    except (ValueError, ImportError) as exc:
        raise PackErrors([PackError(where, "", "", f"not a folder this machine can read ({exc})")]) from None
    root = root.rstrip("/") or "/"
    if not fs.isdir(root):
        what = "is a file, not a pack folder" if fs.isfile(root) else "does not exist"
        raise PackErrors([PackError(where, "", "", what)])
    local = "file" in fs.protocol if isinstance(fs.protocol, tuple) else fs.protocol == "file"
    errors: list[PackError] = []
    found = fs.find(root, detail=True, withdirs=False)
    if len(found) > MAX_FILES:
        raise PackErrors([PackError(where, "", "", f"holds more than {MAX_FILES} files; a pack holds far fewer")])
    files: dict[str, bytes] = {}
    total = 0
    real_root = os.path.realpath(root) if local else root
    for path, info in sorted(found.items()):
        relative = posixpath.relpath(str(path).replace(os.sep, "/"), root.replace(os.sep, "/"))
        if relative.startswith("../") or relative == "..":
            errors.append(PackError(where, relative, "", "lies outside the pack folder"))
            continue
        if local and not _inside(real_root, os.path.realpath(path)):
            errors.append(PackError(where, relative, "", "is a link that leads outside the pack folder"))
            continue
        if pack_file_kind(relative) is None:
            errors.append(PackError(where, relative, "", f"is not a file a pack holds ({_layout_hint(relative)})"))
            continue
        size = int(info.get("size") or 0)
        if size > MAX_FILE_BYTES:
            errors.append(PackError(where, relative, "", f"{size:,} bytes, over the {MAX_FILE_BYTES:,}-byte cap"))
            continue
        total += size
        if total > MAX_PACK_BYTES:
            errors.append(PackError(where, "", "", f"over {MAX_PACK_BYTES:,} bytes in all"))
            break
        with fs.open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            errors.append(PackError(where, relative, "", f"over the {MAX_FILE_BYTES:,}-byte cap"))
            continue
        files[relative] = data
    errors += [
        PackError(where, name, "", "missing: every pack has one") for name in REQUIRED_FILES if name not in files
    ]
    if errors:
        raise PackErrors(errors)
    return PackFiles(where, files)


def _inside(root: str, path: str) -> bool:
    return os.path.commonpath([root, path]) == root


def _layout_hint(relative: str) -> str:
    if relative.startswith(f"{LANGUAGE_DIR}/"):
        return f"a language folder is {LANGUAGE_DIR}/<code>/ holding {', '.join(LANGUAGE_FILES)}"
    return f"top-level files are {', '.join(TOP_LEVEL_FILES)}; languages go under {LANGUAGE_DIR}/<code>/"


def write_pack_files(files: PackFiles, target: str | os.PathLike[str]) -> None:
    """Write a pack's files into a new folder `target`, atomically: into a temporary sibling, renamed at the end.
    An existing `target` is refused (nothing is overwritten)."""
    destination = Path(target)
    if destination.exists():
        raise FileExistsError(f"{destination} exists; `reference init` writes a new folder")
    staging = destination.with_name(f".{destination.name}.partial-{os.getpid()}")
    if staging.exists():
        fsspec.filesystem("file").rm(str(staging), recursive=True)
    for name, data in files.files.items():
        path = staging / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    staging.rename(destination)
