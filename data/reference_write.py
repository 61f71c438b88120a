"""Writing into a reference pack: a new pack from another (`reference init`), and drafts added to a language
(`reference translate`, a build's Gemini pre-flight). Every file is replaced whole and atomically (a temporary
sibling renamed over it on a local disk, a single put on an object store), so a crash leaves the old file or the
new one, never half of one."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Mapping, Sequence

from fsspec.core import url_to_fs

from data.reference_files import CONCEPTS_FILE, COUNTRIES_FILE, LANGUAGE_DIR, LANGUAGE_FILE, PackFiles
from data.reference_models import ConceptTranslation, CountryName, Language
from data.reference_parse import (
    COUNTRY_NAME_COLUMNS,
    COUNTRY_NAME_OPTIONAL_COLUMNS,
    PROVENANCE_COLUMNS,
    TRANSLATION_COLUMNS,
    parse_pack,
)
from data.text_safety import csv_bytes


def write_file(location: str, relative: str, data: bytes) -> None:
    """Replace `relative` inside the pack at `location` with `data`, atomically."""
    fs, root = url_to_fs(location)
    path = f"{root.rstrip('/')}/{relative}"
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    if "file" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)):
        temporary = f"{path}.partial-{os.getpid()}"
        with open(temporary, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    else:
        fs.pipe_file(path, data)


def _existing_rows(files: PackFiles, relative: str) -> tuple[list[str], list[list[str]]]:
    if relative not in files.files:
        return [], []
    rows = list(csv.reader(io.StringIO(files.text(relative), newline="")))
    return (rows[0], [r for r in rows[1:] if any(cell.strip() for cell in r)]) if rows else ([], [])


def add_language_drafts(
    files: PackFiles,
    code: str,
    language: Language | None,
    country_names: Sequence[CountryName],
    translations: Sequence[ConceptTranslation],
) -> list[str]:
    """Add drafts to language `code` of the pack read as `files`; the files written, relative to the pack. The pack
    with the drafts is checked as a hand-written one is (`parse_pack`) before any file is written: drafts that a
    pack may not hold raise `PackErrors`, and nothing is written."""
    folder = f"{LANGUAGE_DIR}/{code}"
    changed: dict[str, bytes] = {}
    if language is not None:
        text = json.dumps(language.model_dump(mode="json"), ensure_ascii=False, indent=2) + "\n"
        changed[f"{folder}/{LANGUAGE_FILE}"] = text.encode("utf-8")
    if country_names:
        relative = f"{folder}/{COUNTRIES_FILE}"
        header = list(COUNTRY_NAME_COLUMNS + COUNTRY_NAME_OPTIONAL_COLUMNS)
        old_header, old_rows = _existing_rows(files, relative)
        rows = [[dict(zip(old_header, r, strict=False)).get(c, "") for c in header] for r in old_rows]
        rows += [
            [n.iso2, n.country, n.name, n.descriptor_country, n.review_status, n.origin or "", str(n.reviewers or "")]
            for n in country_names
        ]
        changed[relative] = csv_bytes(header, rows)
    if translations:
        relative = f"{folder}/{CONCEPTS_FILE}"
        header = list(TRANSLATION_COLUMNS + PROVENANCE_COLUMNS)
        old_header, old_rows = _existing_rows(files, relative)
        rows = [[dict(zip(old_header, r, strict=False)).get(c, "") for c in header] for r in old_rows]
        rows += [
            [str(t.concept_id), t.concept, t.text, t.descriptor_template or "", t.review_status, t.origin or "",
             str(t.reviewers or "")]
            for t in translations
        ]  # fmt: skip
        changed[relative] = csv_bytes(header, rows)
    write_checked(files, changed)
    return list(changed)


def write_checked(files: PackFiles, changed: Mapping[str, bytes]) -> None:
    """Write `changed` into the pack read as `files`, once the pack they make passes every check of `parse_pack`
    (`PackErrors` otherwise, with nothing written)."""
    if not changed:
        return
    parse_pack(PackFiles(files.location, {**files.files, **changed}))
    for relative, data in changed.items():
        write_file(files.location, relative, data)
