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

`verify_claims` checks what the release says about its tables against them, since a forger who recomputes the
manifest makes every file "match": the card's `configs` (which files `datasets` and lmms-eval read as each table),
`croissant.json` (each FileObject's sha256 and size, the files each record set reads), the WebDataset tars (sample
by sample, in row order: each image's bytes and JSON are its row's), each image's size against its `num_bytes`
where the release kept the source's bytes, and the manifest's `mode` (a URL-only release holds no tars and only the
swaps' bytes, one with its images every row's).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Generic, TypeVar, overload

from pydantic import ValidationError

from data.publish.format import MANIFEST, WEBDATASET_FEATURES, ImageConfig, ReleaseReadError
from data.publish.json_file import read_json_object
from data.publish.manifest import FileEntry, FolderManifest, ReleaseManifest, first_problem, shown

#: A manifest is a few MB at most (one line per file); a bigger one is not ours.
MAX_MANIFEST_BYTES = 64 << 20

M = TypeVar("M", bound=FolderManifest)


class ReleaseIntegrityError(ReleaseReadError):
    """A release whose files are not those its manifest lists: the message names each mismatch."""

    def __init__(self, folder: Path, problems: list[str], what: str = f"file(s) differ from {MANIFEST}") -> None:
        self.problems = problems
        listed = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        super().__init__(f"{folder}: {len(problems)} {what}: {listed}")


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
    if images is not None and only is None:  # the whole release: what it claims about its tables must hold too
        claims = [detail for _, detail in verify_claims(manifest, images)]
        if claims:
            raise ReleaseIntegrityError(folder, claims, "claim(s) of the release do not hold against its tables")
    return manifest


# -- what the release claims about its tables -------------------------------------------------------------------------

CARD = "README.md"
CROISSANT = "croissant.json"
TARS = "images/*.tar"
#: Problems named per check; a forgery repeated on every row is counted past these.
NAMED = 20
#: The card's YAML front matter is a few KB; past this it is not ours (and YAML is not parsed without bound).
MAX_FRONT_MATTER = 1 << 20


@dataclass
class _Found:
    """The problems of one check (`rule`): the first NAMED spelled out, the rest counted."""

    rule: str
    details: list[str] = field(default_factory=list)
    more: int = 0

    def add(self, detail: str) -> None:
        if len(self.details) < NAMED:
            self.details.append(detail)
        else:
            self.more += 1

    def items(self) -> list[tuple[str, str]]:
        extra = [f"... and {self.more} more"] if self.more else []
        return [(self.rule, detail) for detail in [*self.details, *extra]]


def verify_claims(manifest: Manifest[ReleaseManifest], images: ImageConfig | None) -> list[tuple[str, str]]:
    """What the card, croissant.json, the tars and the manifest's `mode` claim about the tables, checked against
    them (call it once the files match the manifest): (rule, detail) for each claim that does not hold."""
    found = [*card_claims(manifest), *croissant_claims(manifest)]
    if images is not None:
        found += image_claims(manifest, images)
    return found


def _parquet_configs(files: Iterable[str]) -> dict[str, set[str]]:
    """The Parquet files of each config (a top-level folder of Parquet parts) the manifest lists."""
    configs: dict[str, set[str]] = {}
    for rel in files:
        parts = rel.split("/")
        if len(parts) == 2 and parts[1].endswith(".parquet"):
            configs.setdefault(parts[0], set()).add(rel)
    return configs


def _front_matter(text: str) -> Any:
    """The card's YAML front matter (between the first two `---` lines), or None when it has none that parses."""
    import yaml

    if not text.startswith("---\n"):
        return None
    end = text.find("\n---\n", 3)
    if end < 0 or end > MAX_FRONT_MATTER:
        return None
    try:
        return yaml.safe_load(text[4:end])
    except (yaml.YAMLError, RecursionError):
        return None


def _data_file_paths(value: Any) -> list[str] | None:
    """Every path of a config's `data_files` in the shapes `datasets` reads (a string, a list of strings or of
    {split, path}, a mapping of split to paths); None for any other shape."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        value = [{"split": k, "path": v} for k, v in value.items()]
    if not isinstance(value, list) or not value:
        return None
    paths = []
    for item in value:
        path = item.get("path") if isinstance(item, dict) else item
        for one in [path] if isinstance(path, str) else path if isinstance(path, list) else [None]:
            if not isinstance(one, str):
                return None
            paths.append(one)
    return paths


def card_claims(manifest: Manifest[Any]) -> list[tuple[str, str]]:
    """The card's `configs`: each names a table of the release and reads exactly that table's Parquet files, so
    `load_dataset(folder, name)` (and every harness through it) reads the rows the manifest verified."""
    found = _Found("card.configs")
    if CARD not in manifest.files:
        return []
    try:
        text = (manifest.folder / CARD).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        found.add(f"{CARD}: not UTF-8 text")
        return found.items()
    meta = _front_matter(text)
    configs = meta.get("configs") if isinstance(meta, dict) else None
    if not isinstance(configs, list) or not configs:
        found.add(f"{CARD}: its YAML front matter has no `configs` list: `datasets` would guess which files to read")
        return found.items()
    tables = _parquet_configs(manifest.files)
    seen: set[str] = set()
    for i, entry in enumerate(configs):
        where = f"{CARD}: configs[{i}]"
        name = entry.get("config_name") if isinstance(entry, dict) else None
        if not isinstance(name, str):
            found.add(f"{where} has no config_name")
            continue
        if name in seen:
            found.add(f"{where}: {name!r} is declared twice")
            continue
        seen.add(name)
        own = tables.get(name)
        if not own:
            found.add(f"{where}: {shown(name)} is no table of this release (no {name}/*.parquet in {MANIFEST})")
            continue
        paths = _data_file_paths(entry.get("data_files"))
        if paths is None:
            found.add(f"{where}: data_files is not a path or a list of {{split, path}}")
            continue
        read: set[str] = set()
        for path in paths:
            pure = PurePosixPath(path)
            if not path.startswith(f"{name}/") or pure.is_absolute() or ".." in pure.parts:
                found.add(f"{where}: data_files path {shown(path)} is not inside {name}/: `datasets` would read "
                          f"other files as {name!r}")  # fmt: skip
                continue
            read |= {rel for rel in manifest.files if fnmatch.fnmatchcase(rel, path)}
        if read != own and paths and all(p.startswith(f"{name}/") for p in paths):
            found.add(f"{where}: data_files read {sorted(read)}, not the Parquet files of {name!r} {sorted(own)}")
    return found.items()


def croissant_claims(manifest: Manifest[Any]) -> list[tuple[str, str]]:
    """`croissant.json`: each FileObject is a file of the manifest with its sha256 and size, and each record set
    named like a table reads exactly that table's Parquet files."""
    found = _Found("croissant")
    if CROISSANT not in manifest.files:
        return []
    try:
        doc, _ = read_json_object(manifest.folder / CROISSANT, MAX_MANIFEST_BYTES, error=ReleaseReadError)
    except ReleaseReadError as exc:
        found.add(f"{CROISSANT}: {str(exc).rsplit(': ', 1)[-1]}")
        return found.items()
    distribution = doc.get("distribution")
    if not isinstance(distribution, list):
        found.add(f"{CROISSANT}: `distribution` is not a list of the release's files")
        return found.items()
    covers: dict[str, set[str]] = {}  # @id -> the files of the manifest it stands for
    for i, entry in enumerate(distribution):
        where = f"{CROISSANT}: distribution[{i}]"
        kind = entry.get("@type") if isinstance(entry, dict) else None
        if kind == "cr:FileObject":
            url = entry.get("contentUrl")
            listed = manifest.files.get(url) if isinstance(url, str) else None
            if listed is None:
                found.add(f"{where}: contentUrl {shown(url)} is no file of {MANIFEST}")
                continue
            if entry.get("@id") != url:
                found.add(f"{where}: @id {shown(entry.get('@id'))} is not its contentUrl {url!r}")
                continue
            if entry.get("sha256") != listed.sha256:
                found.add(f"{where}: {url} has the sha256 {listed.sha256}, not {shown(entry.get('sha256'))}")
            size = entry.get("contentSize")
            if size is not None and size != f"{listed.bytes} B":
                found.add(f"{where}: {url} has {listed.bytes} bytes, not {shown(size)}")
            covers[url] = {url}
        elif kind == "cr:FileSet":
            ident, includes = entry.get("@id"), entry.get("includes")
            patterns = [includes] if isinstance(includes, str) else includes
            if (
                not isinstance(ident, str)
                or not isinstance(patterns, list)
                or not all(isinstance(p, str) for p in patterns)
            ):
                found.add(f"{where}: a FileSet without an @id and `includes` patterns")
                continue
            covers[ident] = {rel for rel in manifest.files if any(fnmatch.fnmatchcase(rel, p) for p in patterns)}
            if not covers[ident]:
                found.add(f"{where}: {ident!r} includes {patterns}, which match no file of {MANIFEST}")
        elif not isinstance(entry, dict):
            found.add(f"{where} is not an object")
    tables = _parquet_configs(manifest.files)
    record_sets = doc.get("recordSet") or []
    for j, record_set in enumerate(record_sets if isinstance(record_sets, list) else [None]):
        if not isinstance(record_set, dict):
            found.add(f"{CROISSANT}: recordSet[{j}] is not an object")
            continue
        name = record_set.get("@id")
        fields = record_set.get("field") or []
        read: set[str] = set()
        for item in fields if isinstance(fields, list) else [None]:
            source = item.get("source") if isinstance(item, dict) else None
            ref = (source.get("fileObject") or source.get("fileSet")) if isinstance(source, dict) else None
            if ref is None:
                continue  # a field read from another record set, or none
            ident = ref.get("@id") if isinstance(ref, dict) else None
            if not isinstance(ident, str) or ident not in covers:
                found.add(f"{CROISSANT}: recordSet {shown(name)} reads {shown(ident)}, which `distribution` lacks")
                continue
            read |= covers[ident]
        if isinstance(name, str) and name in tables and read and read != tables[name]:
            found.add(f"{CROISSANT}: recordSet {name!r} reads {sorted(read)}, not the Parquet files of {name!r}")
    return found.items()


class _Samples:
    """The tars' samples in order, one looked at before it is taken (`peek`)."""

    def __init__(self, samples: Iterator[tuple[str, str, dict[str, bytes]]]) -> None:
        self._samples = samples
        self._ahead: list[tuple[str, str, dict[str, bytes]]] = []

    def __iter__(self) -> Iterator[tuple[str, str, dict[str, bytes]]]:
        return self

    def __next__(self) -> tuple[str, str, dict[str, bytes]]:
        return self._ahead.pop() if self._ahead else next(self._samples)

    def peek(self) -> tuple[str, str, dict[str, bytes]] | None:
        if not self._ahead:
            following = next(self._samples, None)
            if following is None:
                return None
            self._ahead.append(following)
        return self._ahead[0]


def _tar_samples(folder: Path, tars: list[str], found: _Found) -> Iterator[tuple[str, str, dict[str, bytes]]]:
    """The WebDataset samples of the tars in order: (tar, key, {extension: bytes}); an unreadable tar is a problem
    in `found`, and ends the samples."""
    for rel in tars:
        try:
            with tarfile.open(folder / rel, "r:") as tar:
                key: str | None = None
                sample: dict[str, bytes] = {}
                for member in tar:
                    if not member.isfile():
                        found.add(f"{rel}: {shown(member.name)} is not a file")
                        continue
                    name, _, ext = member.name.partition(".")
                    if key is not None and name != key:
                        yield rel, key, sample
                        sample = {}
                    key = name
                    handle = tar.extractfile(member)
                    sample[ext] = handle.read() if handle is not None else b""
                if key is not None:
                    yield rel, key, sample
        except (tarfile.TarError, OSError) as exc:
            found.add(f"{rel}: not a readable tar ({type(exc).__name__})")
            return


@dataclass
class _Unsaid:
    """Rows whose bytes the manifest's mode denies: how many, and the first few ids (a false mode lies about all)."""

    count: int = 0
    first: list[str] = field(default_factory=list)

    def add(self, name: str) -> None:
        self.count += 1
        if len(self.first) < 3:
            self.first.append(name)


def _sidecar_keys(manifest: Manifest[Any]) -> list[str] | None:
    """The columns the tars' JSON holds, as the features file beside them names them (`json`'s keys); None (every
    column, as releases before the features file named fewer wrote them) when it names none. Its bytes are the
    manifest's (`verify_files`), so a forged one is reported there."""
    path = manifest.folder / WEBDATASET_FEATURES
    if WEBDATASET_FEATURES not in manifest.files or not path.is_file():
        return None
    try:
        doc, _ = read_json_object(path, MAX_MANIFEST_BYTES, error=ReleaseReadError, too_big="not a features file")
    except ReleaseReadError:
        return None  # verify_files names the file
    sidecar = doc.get("json")
    return [str(name) for name in sidecar] if isinstance(sidecar, dict) else None


def _canonical_json(data: bytes | str) -> str | None:
    try:
        return json.dumps(json.loads(data), sort_keys=True, ensure_ascii=False)
    except (ValueError, RecursionError):
        return None


def image_claims(manifest: Manifest[ReleaseManifest], images: ImageConfig) -> list[tuple[str, str]]:
    """The image rows against what else the release says of them: the manifest's `mode` (a row holds its bytes
    in a release of mode `images`, and in a URL-only one only where it is `synthesized`, a MixCuBe swap; a
    URL-only release holds no tars), each kept source's size (`num_bytes`, where `verify_image_bytes` checks its
    sha256), and the tars, which hold each row with bytes, in order, with those bytes and the row as its JSON."""
    import pyarrow.parquet as pq

    config, key = images
    model, folder = manifest.model, manifest.folder
    modes, sizes, samples = _Found("release.mode"), _Found("image.num_bytes"), _Found("webdataset")
    stated = model.config.get("release", {}).get("mode")
    if stated is not None and stated != model.mode:
        modes.add(f"{MANIFEST}: mode {model.mode!r}, but its config.release.mode is {shown(stated)}")
    tars = sorted(rel for rel in manifest.files if fnmatch.fnmatchcase(rel, TARS))
    if model.mode == "urls" and tars:
        modes.add(f"{MANIFEST}: mode 'urls', yet the release holds its images in {len(tars)} tar(s), {tars[0]} first")
    pending = _Samples(_tar_samples(folder, tars, samples))
    sidecar = _sidecar_keys(manifest) if tars else None
    unsaid = {True: _Unsaid(), False: _Unsaid()}  # rows holding (True) or lacking bytes, against the mode
    for file in sorted((folder / config).glob("*.parquet")):
        rel = file.relative_to(folder).as_posix()
        try:
            reader = pq.ParquetFile(file)
            if "image" not in reader.schema_arrow.names:  # a URL-only 3XCM table: no bytes at all
                if model.mode == "images":
                    modes.add(f"{rel}: no image column, against the manifest's mode 'images'")
                continue
            for group in range(reader.num_row_groups):
                for row in reader.read_row_group(group).to_pylist():
                    _check_row(rel, row, key, model.mode, tars, pending, unsaid, sizes, samples, sidecar)
        except Exception as exc:  # verify_image_bytes names an unreadable table
            samples.add(f"{rel}: not a readable image table ({type(exc).__name__})")
    for tar, extra, _ in pending:
        samples.add(f"{tar}: sample {shown(extra)} is no image row of {config}")
    for holds, rows in unsaid.items():
        if rows.count:  # one line for a mode that lies about every row
            what = "hold their image bytes" if holds else "have no image bytes"
            first = ", ".join(shown(n) for n in rows.first)
            modes.add(
                f"{config}: {rows.count} row(s) {what} ({first}, ...), against the manifest's mode {model.mode!r}"
            )
    return [*modes.items(), *sizes.items(), *samples.items()]


def _check_row(
    rel: str,
    row: dict[str, Any],
    key: str,
    mode: str,
    tars: list[str],
    pending: _Samples,
    unsaid: dict[bool, _Unsaid],
    sizes: _Found,
    samples: _Found,
    sidecar: list[str] | None = None,
) -> None:
    """One image row against the mode, its num_bytes and its sample in the tars (the next one of `pending`), whose
    JSON holds the row's `sidecar` columns (all of them when None)."""
    image = row.pop("image")
    data = image.get("bytes") if isinstance(image, dict) else None
    name = row.get(key)
    embedded = mode == "images" or bool(row.get("synthesized"))  # as the release writers embed
    if bool(data) != embedded:
        unsaid[bool(data)].add(str(name))
    fmt = row.get("format", "JPEG")  # a table without `format` kept every source's bytes (MixCuBe)
    size = row.get("num_bytes")
    if data and fmt == "JPEG" and isinstance(size, int) and len(data) != size:
        sizes.add(f"{rel}: image {shown(name)} has {len(data)} bytes, its num_bytes says {size}")
    if not tars:
        return
    if not data:
        # A row that lost its bytes keeps its place in the tars: its sample is passed over (the mode's line names
        # the row), so the rows after it are compared with their own samples, not each blamed for a shift.
        ahead = pending.peek()
        if ahead is not None and ahead[1] == name:
            next(pending)
        return
    sample = next(pending, None)
    if sample is None:
        samples.add(f"{rel}: image {shown(name)} has no sample in {TARS}")
        return
    tar, sample_key, parts = sample
    if sample_key != name:
        samples.add(f"{tar}: sample {shown(sample_key)} where the image of row {shown(name)} of {rel} belongs")
        return
    if parts.get("jpg") != data:
        samples.add(f"{tar}: {sample_key}.jpg is not the image of {rel} row {shown(name)}")
    held = row if sidecar is None else {name: row.get(name) for name in sidecar}
    written = json.dumps(held, sort_keys=True, ensure_ascii=False, default=str)  # as the shard writer writes it
    if _canonical_json(parts.get("json", b"")) != _canonical_json(written):
        samples.add(f"{tar}: {sample_key}.json is not the row {shown(name)} of {rel}")
