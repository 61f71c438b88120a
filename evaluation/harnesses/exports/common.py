"""What every harness export shares: the release opened (its manifest read strictly; its reference pack checked
against the manifest and card, `Release.pack`; each exporter verifies the tables it reads against it,
`Release.verify`, as the evaluation does, and the values it writes), a URL-only release refused with the command
that fetches it, an output folder outside every input and release, and an immutable folder written atomically with a
manifest of every file's sha256 (a rerun with the same release writes the same bytes, or reports it unchanged)."""

from __future__ import annotations

import importlib
import io
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from data.output_paths import check_output
from data.publish.folder import ImmutableFolder, ReleaseResult
from data.publish.manifest import FolderManifest
from data.publish.reader import Release
from data.takedown.older_versions import refuse_taken_down
from data.text_safety import hidden_character
from evaluation.harnesses.exports import HARNESSES

README = "README.md"
#: What a MixCuBe `sample_id` may be (`<original_id>-<ethnicity>`, e.g. `demo-az-food-00-african`): it names a row in
#: the harness's own files, so never a formula, markup or a line break.
SAMPLE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


class ExportError(ValueError):
    """A release this harness cannot take (another benchmark, URL-only, a value it cannot write): the message says
    what to do, naming the file, the column and the row."""


@dataclass(frozen=True)
class Allowed:
    """What the values of a column must be, and how a refusal words it ("one of ...")."""

    test: Callable[[Any], bool]
    wanted: str


def one_of(values: Iterable[str], what: str) -> Allowed:
    allowed = frozenset(values)
    return Allowed(lambda value: isinstance(value, str) and value in allowed, f"{what} ({', '.join(sorted(allowed))})")


def plain_text(what: str) -> Allowed:
    """Text on one line without control or format characters: a name a harness writes one per line, or shows."""
    return Allowed(lambda value: isinstance(value, str) and bool(value) and hidden_character(value) is None, what)


def where(release: Release, config: str, row: int) -> str:
    """`<part file>, row N` for row `row` of `config` counted across its parts, in the order the reader joins them."""
    folder = release.path / config
    for file in sorted(p for p in folder.glob("*.parquet") if p.is_file()):
        rows = pq.read_metadata(file).num_rows
        if row < rows:
            return f"{file}, row {row}"
        row -= rows
    return f"{folder}, row {row}"


def refuse(release: Release, config: str, row: int, column: str, value: Any, wanted: str) -> ExportError:
    return ExportError(f"{where(release, config, row)}: column {column!r}: {repr(value)[:120]} is not {wanted}")


def require_columns(release: Release, config: str, columns: Iterable[str]) -> None:
    """Every part of `config` has `columns`; else ExportError naming the part and what it lacks."""
    wanted = list(columns)
    for file in sorted(p for p in (release.path / config).glob("*.parquet") if p.is_file()):
        names = pq.read_schema(file).names
        missing = [c for c in wanted if c not in names]
        if missing:
            raise ExportError(f"{file}: no column(s) {missing}, which the export needs")


def check_values(release: Release, config: str, table: pa.Table, rules: Mapping[str, Allowed]) -> None:
    """Each rule's column of `table` (rows of `config`, in the reader's order) holds only values it allows; else
    ExportError naming the part file, the column and the row of the first value that breaks it."""
    for column, rule in rules.items():
        for row, value in enumerate(table.column(column).to_pylist()):
            if not rule.test(value):
                raise refuse(release, config, row, column, value, rule.wanted)


def mixcube_rules(release: Release) -> dict[str, Allowed]:
    """MixCuBe's columns a harness export writes, each checked against the release's own reference pack: the
    cultures, the categories with an App. B.2 prompt, the ethnicities (and `original`), the sample id pattern."""
    ref = release.pack().mixcube()
    return {
        "country": one_of((c.adjective for c in ref.cultures), "a MixCuBe culture"),
        "category": one_of(ref.evaluation_prompts, "a category with an App. B.2 prompt"),
        "ethnicity": one_of([ref.original_label, *(e.label for e in ref.ethnicities)], "a MixCuBe ethnicity"),
        "sample_id": Allowed(
            lambda value: isinstance(value, str) and SAMPLE_ID.fullmatch(value) is not None,
            "a sample id (letters, digits, '.', '_' and '-', starting with a letter or digit)",
        ),
    }


def image_format(data: Any, release: Release, config: str, row: int, key: str) -> str:
    """The format PIL reads `data` (an image's released bytes) as; ExportError naming the part, the row and the
    image's id when there are no bytes or they are no image."""
    from PIL import Image, UnidentifiedImageError

    if not isinstance(data, bytes):
        raise ExportError(f"{where(release, config, row)}: image {key!r} has no bytes ({type(data).__name__})")
    try:
        with Image.open(io.BytesIO(data)) as image:
            return str(image.format)
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise ExportError(
            f"{where(release, config, row)}: image {key!r}: its bytes are no image ({type(exc).__name__})"
        ) from None


def released_images(release: Release, config: str, key: str) -> list[bytes]:
    """The one rule every export applies to the images it writes or points its harness at: in a release with its
    images (a URL-only one is refused before), each row of `config` holds bytes PIL reads (an HF Image struct's
    `bytes`, or a binary cell), as `validate`'s `release.mode` rule says; a null image or bytes that are no image is
    ExportError naming the part, the row and the image's `key`. The bytes per row, in the reader's order."""
    from evaluation.mixcube.task import _image_bytes

    require_columns(release, config, [key, "image"])
    table = release.table(config, [key, "image"])
    try:
        images: list[bytes] = _image_bytes(table).to_pylist()
    except ValueError as exc:
        raise ExportError(f"{release.path / config}: {exc}") from None
    for row, (name, data) in enumerate(zip(table[key].to_pylist(), images, strict=True)):
        image_format(data, release, config, row, str(name))
    return images


def spread(keys: list[str], count: int) -> list[int]:
    """The positions of `count` items of a list whose keys are `keys`, a key at a time (each key's first item, then
    each one's second, ...), in the list's order: a smoke test's few items, across as many keys (concepts,
    languages) as it can hold, where the first items of a list are often all one key's."""
    turn: list[int] = []  # how many items of its key come before each item
    seen: dict[str, int] = {}
    for key in keys:
        turn.append(seen.get(key, 0))
        seen[key] = turn[-1] + 1
    return sorted(sorted(range(len(keys)), key=lambda at: (turn[at], at))[:count])


class Exporter(Protocol):
    BENCHMARKS: tuple[str, ...]

    def export(self, release: Release, folder: ImmutableFolder) -> str: ...


#: How an exporter's command text starts a line that warns (`warning_line`): a shell comment, so that the text the
#: CLI prints after `export created` still runs as it is, and its first line says what the README says first.
WARNING = "# warning: "


def warning_line(text: str) -> str:
    """`text` as one warning line of an exporter's command text (`ExportResult.warnings` reads it back)."""
    return WARNING + " ".join(text.split()) + "\n"


@dataclass(frozen=True)
class ExportResult:
    folder: str
    status: str  # created | unchanged
    command: str  # how to run the harness on it, as its README says; its warnings first (`warning_line`)

    @property
    def warnings(self) -> tuple[str, ...]:
        """What the export warns of (one line each, printed by `culturebench export` with the command)."""
        return tuple(line.removeprefix(WARNING) for line in self.command.splitlines() if line.startswith(WARNING))


def exporter(harness: str) -> Exporter:
    if harness not in HARNESSES:
        raise ExportError(f"--harness {harness!r}: not one of {', '.join(sorted(HARNESSES))}")
    module: Exporter = importlib.import_module(HARNESSES[harness])
    return module


def utf8_path(path: Path) -> None:
    """ExportError when `path`, resolved, is not UTF-8: pyarrow opens files by UTF-8 paths, and a harness reads the
    path from a UTF-8 file (lmms-eval's task YAML)."""
    text = str(path.resolve())
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raw = os.fsencode(text)
        raise ExportError(
            f"{raw.decode('utf-8', 'backslashreplace')}: the release path is not UTF-8 (byte "
            f"{os.fsencode(text[exc.start])[0]:#04x}); pyarrow and the harnesses read paths as UTF-8: "
            "rename or move the release"
        ) from None


def run_export(release_path: Path, harness: str, out: Path) -> ExportResult:
    """Export `release_path` for `harness` into `out`."""
    module = exporter(harness)
    utf8_path(release_path)
    release = Release.open(release_path)
    if release.name not in module.BENCHMARKS:
        raise ExportError(f"{release_path}: a {release.name} release; --harness {harness} takes {module.BENCHMARKS}")
    if release.manifest.mode == "urls":
        raise ExportError(
            f"{release_path}: a URL-only release has no images; fetch them first: culturebench fetch-release "
            f"{release_path} --out <folder> --write-images"
        )
    # The release's pack, its files against the manifest and the pack against what the manifest and card state of
    # it (`Release.pack`): a forged pack is refused before anything is written, by every harness (mteb and
    # clip_benchmark read no pack, but a release whose pack was changed is not the one its manifest describes).
    release.pack()
    refuse_taken_down(release.path, release.name, "export")  # an older version's images taken down since
    check_output(out, inputs=[release_path], option="--out", immutable_target=True, what="an export")
    name = f"export-{harness}-{release.name}"
    folder = ImmutableFolder.at(str(out), name, release.version, FolderManifest)
    folder.refusal = (
        f"--out {{where}} already exists and is not this export of {release.name} {release.version} for {harness} "
        "({count} files differ, e.g. {examples}); an export folder is never written over: choose a new --out, "
        "or remove that folder"
    )
    try:
        command = module.export(release, folder)
        result: ReleaseResult = folder.commit(
            {"name": name, "version": release.version, "release_manifest_sha256": release.manifest_sha256}
        )
    except BaseException:
        folder.abort()
        raise
    return ExportResult(folder=str(out), status=result.status, command=command)
