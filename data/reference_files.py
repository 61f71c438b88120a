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

import errno
import hashlib
import os
import posixpath
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fsspec
from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem

from data.remote_folders import RemoteReadError, pack_filesystem

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
#: A pack's files lie at most three levels down (`i18n/<code>/<file>`).
_MAX_FOLDER_DEPTH = 3


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


@dataclass(frozen=True)
class _Entry:
    """One thing found in a pack folder: a path relative to its root, what it is, and (for a file) its size."""

    relative: str
    path: str
    kind: str  # file | other (a FIFO, a device, a socket) | outside (a link leading out of the folder) | deep
    size: int = 0
    mtime: float | str | None = None


def _local_root(where: str) -> str | None:
    """The folder a local location names (a path or `file://`), or None for any other URL."""
    protocol, _, rest = where.partition("://")
    if not rest:
        return where
    return rest if protocol in ("file", "local") and "::" not in where else None


def _walk_local(root: str) -> list[_Entry]:
    """Every entry under `root`, without recursion and never deeper than a pack is (`i18n/<code>/<file>`): a deeper
    folder is one entry of kind `deep`, not walked. Only regular files are `file`; a FIFO or a device is never
    opened, and a link that resolves outside `root` is `outside`."""
    real_root = os.path.realpath(root)
    entries: list[_Entry] = []
    folders = [("", root)]
    while folders:
        prefix, folder = folders.pop()
        with os.scandir(folder) as listing:
            items = sorted(listing, key=lambda e: e.name)
        for item in items:
            relative = f"{prefix}{item.name}"
            if len(entries) > MAX_FILES:
                return entries
            if not _inside(real_root, os.path.realpath(item.path)):
                entries.append(_Entry(relative, item.path, "outside"))
                continue
            info = os.stat(item.path)  # the link's target, which lies inside the folder
            if stat.S_ISDIR(info.st_mode):
                if relative.count("/") >= _MAX_FOLDER_DEPTH - 1:
                    entries.append(_Entry(relative + "/", item.path, "deep"))
                else:
                    folders.append((relative + "/", item.path))
            elif stat.S_ISREG(info.st_mode):
                entries.append(_Entry(relative, item.path, "file", info.st_size, info.st_mtime))
            else:
                entries.append(_Entry(relative, item.path, "other"))
    return entries


def _walk_remote(fs: AbstractFileSystem, root: str) -> list[_Entry]:
    found = fs.find(root, maxdepth=_MAX_FOLDER_DEPTH, detail=True, withdirs=False)
    entries = []
    for path, info in sorted(found.items())[: MAX_FILES + 1]:
        relative = posixpath.relpath(str(path), root)
        kind = "file" if info.get("type", "file") == "file" else "other"
        if relative.startswith("../") or relative == "..":
            kind = "outside"
        entries.append(_Entry(relative, str(path), kind, int(info.get("size") or 0), info.get("mtime")))
    return entries


def _listing(where: str) -> tuple[AbstractFileSystem, list[_Entry]]:
    """The filesystem of the pack at `where` and what its folder holds; `PackErrors` naming `where` for a location
    that cannot be read (a missing folder, a refused URL, a failing server)."""
    local = _local_root(where)
    try:
        if local is not None:
            if not os.path.isdir(local):
                what = "is a file, not a pack folder" if os.path.exists(local) else "does not exist"
                raise PackErrors([PackError(where, "", "", what)])
            return fsspec.filesystem("file"), _walk_local(local)
        fs, root = pack_filesystem(where)  # the SSRF guard for http(s); storage URLs only
        if not fs.isdir(root):
            raise PackErrors([PackError(where, "", "", "is not a folder (nothing is listed there)")])
        return fs, _walk_remote(fs, root.rstrip("/"))
    except RemoteReadError as exc:  # its line names the URL (credentials dropped) and why
        raise PackErrors([PackError(exc.location, "", "", exc.reason)]) from None
    except OSError as exc:
        raise PackErrors([PackError(where, "", "", f"cannot be read ({os_error_text(exc)})")]) from None


def os_error_text(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


def listing_key(location: str | os.PathLike[str]) -> tuple[str, tuple[tuple[str, int, Any], ...]]:
    """The pack's files with their sizes and modification times: a cheap key that changes when a file does. A
    location that cannot be listed gets an empty key: reading it then says why."""
    try:
        _, entries = _listing(str(location))
    except PackErrors:
        return str(location), ()
    return str(location), tuple((e.relative, e.size, e.mtime) for e in entries)


def read_pack_files(location: str | os.PathLike[str]) -> PackFiles:
    """Every file of the pack at `location`, read within the caps. Refused, each in one `PackError` line: a missing
    folder, a name a pack does not hold, a link that leads outside the folder, a FIFO or a device, a folder deeper
    than a pack's, a file over the cap, too many files."""
    where = str(location)
    fs, entries = _listing(where)
    if len(entries) > MAX_FILES:
        raise PackErrors([PackError(where, "", "", f"holds more than {MAX_FILES} files; a pack holds far fewer")])
    errors: list[PackError] = []
    files: dict[str, bytes] = {}
    total = 0
    for entry in entries:
        relative = entry.relative
        if entry.kind == "outside":
            errors.append(PackError(where, relative, "", "is a link that leads outside the pack folder"))
            continue
        if entry.kind == "deep":
            errors.append(
                PackError(where, relative, "", f"is a folder deeper than a pack holds ({_layout_hint(relative)})")
            )
            continue
        if pack_file_kind(relative) is None:
            errors.append(PackError(where, relative, "", f"is not a file a pack holds ({_layout_hint(relative)})"))
            continue
        if entry.kind != "file":
            errors.append(
                PackError(where, relative, "", "is not a regular file (a FIFO, a device or a socket); never opened")
            )
            continue
        if entry.size > MAX_FILE_BYTES:
            errors.append(PackError(where, relative, "", f"{entry.size:,} bytes, over the {MAX_FILE_BYTES:,}-byte cap"))
            continue
        total += entry.size
        if total > MAX_PACK_BYTES:
            errors.append(PackError(where, "", "", f"over {MAX_PACK_BYTES:,} bytes in all"))
            break
        try:
            data = _read_capped(fs, entry.path)
        except (OSError, RemoteReadError) as exc:
            text = os_error_text(exc) if isinstance(exc, OSError) else str(exc)
            errors.append(PackError(where, relative, "", f"cannot be read ({text})"))
            continue
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


def _read_capped(fs: AbstractFileSystem, path: str) -> bytes:
    """At most one byte past the cap: a file that grew after its listing is still refused, never read whole."""
    if isinstance(fs, LocalFileSystem):
        # O_NONBLOCK: a FIFO swapped in after the listing is not waited on.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file")
            with os.fdopen(fd, "rb", closefd=False) as handle:
                return handle.read(MAX_FILE_BYTES + 1)
        finally:
            os.close(fd)
    with fs.open(path, "rb") as handle:
        return bytes(handle.read(MAX_FILE_BYTES + 1))


def _inside(root: str, path: str) -> bool:
    return os.path.commonpath([root, path]) == root


def _layout_hint(relative: str) -> str:
    if relative.startswith(f"{LANGUAGE_DIR}/"):
        return f"a language folder is {LANGUAGE_DIR}/<code>/ holding {', '.join(LANGUAGE_FILES)}"
    return f"top-level files are {', '.join(TOP_LEVEL_FILES)}; languages go under {LANGUAGE_DIR}/<code>/"


def write_pack_files(files: PackFiles, target: str | os.PathLike[str]) -> None:
    """Write a pack's files into a new folder `target`, atomically: into a temporary sibling, renamed at the end.
    An existing `target` (a link to nothing included) is refused (nothing is overwritten); a failed write leaves no
    temporary folder behind."""
    destination = Path(target)
    if os.path.lexists(destination):
        raise FileExistsError(f"{destination} exists; `reference init` writes a new folder")
    staging = destination.with_name(f".{destination.name}.partial-{os.getpid()}")
    if os.path.lexists(staging):
        fsspec.filesystem("file").rm(str(staging), recursive=True)
    try:
        for name, data in files.files.items():
            path = staging / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        staging.rename(destination)
    except BaseException:
        if os.path.lexists(staging):
            fsspec.filesystem("file").rm(str(staging), recursive=True)
        raise
