"""A release's reference pack against what the release says of it: `manifest.reference` (the `PackRecord` the build
wrote from `ReferencePack.record()`) and the card's "Reference pack" section (`data/publish/card.py`
`reference_section`).

A forger who edits `reference/` and recomputes the manifest's `files` leaves these standing: the build's digest of
the pack, its `default` flag, its countries and regions, and the card's sentence and table. Every reader of a
release's pack goes through `data.publish.reader.release_pack`, which refuses the first problem found here, and
`culturebench validate` reports each as a violation of the rule `reference`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from data.publish.format import MANIFEST, ReleaseReadError
from data.publish.json_file import read_json_object
from data.publish.manifest import PackRecord, first_problem, shown
from data.reference import ReferencePack
from data.text_safety import code_span, markdown_text

#: The card a release carries (`data.publish.integrity.CARD`; not imported: integrity reads more than this needs).
CARD = "README.md"
MAX_MANIFEST_BYTES = 64 << 20  # as `data.publish.integrity.read_manifest`
MAX_CARD_BYTES = 16 << 20  # a card we write is some tens of KiB
MAX_PROBLEMS = 20
SECTION = "\n## Reference pack\n"
# What `reference_section` writes: "Built from the reference pack `NAME` `VERSION` (WHICH; sha256 `DIGEST`)".
_NAMED = re.compile(r"reference pack `([^`\n]*)` `([^`\n]*)`")
_DIGEST = re.compile(r"sha256 `([^`\n]*)`")
_DEFAULT = "the shipped default pack, unchanged"
#: A card's words for a pack of its own (the second: cards written before issue 57's part 9).
_NOT_DEFAULT_WORDS = ("not the default pack", "not the shipped default")
_CELL = re.compile(r"(?<!\\)\|")  # a cell's own `|` is escaped (`markdown_text`)


class ReleasePackError(ReleaseReadError):
    """A release whose pack is not the one its manifest or card states: the message names the file and field."""


class _Claim(BaseModel):
    """The one field of a manifest this module reads: a release's, a patch's or a reassembled benchmark's."""

    model_config = ConfigDict(extra="ignore")

    reference: PackRecord | None = None


def stated_pack(folder: Path) -> PackRecord | None:
    """What `folder`'s manifest records of its pack (None: no manifest, or one written before packs existed);
    ReleaseReadError naming the field when the record is malformed."""
    path = folder / MANIFEST
    if not path.is_file():
        return None
    data, _ = read_json_object(path, MAX_MANIFEST_BYTES, error=ReleaseReadError, too_big="not a culturebench manifest")
    try:
        return _Claim.model_validate(data).reference
    except ValidationError as exc:
        raise ReleaseReadError(f"{path}: {first_problem(exc)}") from None


def pack_problems(folder: Path, pack: ReferencePack, pack_dir: Path, carried: bool) -> list[str]:
    """Each way `pack` (read from `pack_dir`, or the default pack where the release carries none) differs from
    what `folder`'s manifest and card say of it, one line each naming the file and field; [] when they agree."""
    stated = stated_pack(folder)
    manifest = folder / MANIFEST
    if stated is None:
        if carried:
            return [
                f"{manifest}: no field 'reference', yet the release carries {pack_dir}; a build records the pack "
                "it was built from, so this pack was put there after the build"
            ]
        return []  # a release from before packs: built from the shipped data, the default pack
    problems = []
    if stated.sha256 != pack.digest:
        if carried:
            problems.append(
                f"{pack_dir}: its digest {pack.digest[:12]}… is not manifest.reference.sha256 {stated.sha256[:12]}…; "
                "the pack was changed after the build"
            )
        else:
            problems.append(
                f"{pack_dir}: missing, yet manifest.reference.sha256 {stated.sha256[:12]}… is not the shipped "
                f"default pack's {pack.digest[:12]}…; the release's pack was removed after the build"
            )
    where = f"the pack in {pack_dir}" if carried else "the shipped default pack"
    record = pack.record()  # what the build wrote: the same function, on the pack as it is now
    for key, actual in record.items():
        if key == "sha256" or key not in PackRecord.model_fields:
            continue
        claimed = getattr(stated, key)
        if claimed != actual:
            problems.append(f"{manifest}: field 'reference.{key}' {_differs(claimed, actual)} {where}")
    problems += card_problems(folder, pack, where)
    return problems[:MAX_PROBLEMS]


def _differs(claimed: Any, actual: Any) -> str:
    if isinstance(claimed, list) and isinstance(actual, list):
        extra = [v for v in claimed if v not in actual]
        lacking = [v for v in actual if v not in claimed]
        if not extra and not lacking:
            return "is in another order than"
        parts = [f"names {shown(extra)}" if extra else "", f"lacks {shown(lacking)}" if lacking else ""]
        return f"{' and '.join(p for p in parts if p)}, unlike"
    return f"is {shown(claimed)}, not {shown(actual)} as in"


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in _CELL.split(line.strip())[1:-1]]


def card_problems(folder: Path, pack: ReferencePack, where: str) -> list[str]:
    """What the card's "Reference pack" section states of the pack and `pack` does not hold: its name, version,
    sha256 and whether it is the shipped default; each table row's country or culture, its ISO code and region. A
    card without the section (or without a card) states nothing of the pack."""
    path = folder / CARD
    if not path.is_file():
        return []
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_CARD_BYTES + 1)
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return []  # `validate` reports an unreadable card (`data.publish.integrity.card_claims`)
    if len(raw) > MAX_CARD_BYTES:
        return [f"{path}: larger than {MAX_CARD_BYTES >> 20} MiB; not a card culturebench writes"]
    start = text.find(SECTION)
    if start < 0:
        return []
    end = text.find("\n## ", start + len(SECTION))
    section = text[start : end if end >= 0 else len(text)]
    field = f"{path}: section 'Reference pack'"
    problems = []
    named = _NAMED.search(section)
    if named and named.groups() != (_spanned(pack.info.name), _spanned(pack.info.version)):
        problems.append(f"{field} names the pack {shown(' '.join(named.groups()))}, not {where}")
    digest = _DIGEST.search(section)
    if digest and digest.group(1) != pack.digest:
        problems.append(f"{field} states sha256 {shown(digest.group(1)[:64])}, not that of {where}")
    not_default = next((words for words in _NOT_DEFAULT_WORDS if words in section), None)
    if (_DEFAULT in section and not pack.is_default) or (not_default is not None and pack.is_default):
        says = _DEFAULT if _DEFAULT in section else not_default
        problems.append(f"{field} says {says!r}, which is not so of {where}")
    problems += _table_problems(section, pack, field, where)
    return problems


def _spanned(value: str) -> str:
    """`value` as `code_span` writes it between its backticks."""
    return code_span(value)[1:-1]


def _table_problems(section: str, pack: ReferencePack, field: str, where: str) -> list[str]:
    """Each row of the section's table (`pack_country_rows` or MixCuBe's `culture_rows`) that is not the pack's:
    a country or culture the pack lacks under that ISO code, another name or country column, another region."""
    rows: list[list[str]] = []
    for line in section.splitlines():  # the first table only: a later one (translation origins) is not of places
        if line.startswith("|"):
            rows.append(_cells(line))
        elif rows:
            break
    if len(rows) < 2:
        return []
    header, body = rows[0], [r for r in rows[1:] if not all(set(c) <= set("-:") for c in r)]
    countries = {markdown_text(c.iso2): c for c in pack.countries}
    cultures = {markdown_text(c.iso2): c for c in (pack.mixcube_reference.cultures if pack.mixcube_reference else [])}
    problems = []
    for cells in body:
        row = dict(zip(header, cells, strict=False))
        iso = row.get("ISO 3166")
        if iso is None:
            continue
        at = f"{field}, row {shown(iso)}"
        if "country" in row:
            country = countries.get(iso)
            if country is None:
                problems.append(f"{at}: {shown(row['country'])} is no country of {where}")
                continue
            if row["country"] != markdown_text(country.name):
                problems.append(f"{at}: country {shown(row['country'])}, not {shown(country.name)} as in {where}")
        if "culture" in row:
            culture = cultures.get(iso)
            if culture is None:
                problems.append(f"{at}: {shown(row['culture'])} is no MixCuBe culture of {where}")
                continue
            if row["culture"] != markdown_text(culture.name):
                problems.append(f"{at}: culture {shown(row['culture'])}, not {shown(culture.name)} as in {where}")
            column = row.get("country column")
            if column is not None and column != markdown_text(culture.adjective):
                problems.append(f"{at}: country column {shown(column)}, not {shown(culture.adjective)} as in {where}")
        region = row.get("region")
        want = markdown_text(countries[iso].region) if iso in countries else "-"
        if region is not None and region != want:
            problems.append(f"{at}: region {shown(region)}, not {shown(want)} as in {where}")
    return problems
