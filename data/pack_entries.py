"""A pack's translations as entries, one per value a person writes or reviews: what the sheet lists
(`culturebench reference sheet`), what a filled sheet and a native speaker's review change (`reference fill`,
`review translations --collect`), and what a release card counts.

An entry is a value of one language's files, named by its file and key:

| file | key | value |
|---|---|---|
| `i18n/<code>/language.json` | `name`, `native_name`, `descriptor_template` | the language's names; the RQ3 template |
| `i18n/<code>/countries.csv` | `<ISO>.name`, `<ISO>.descriptor_country` | a country's name; its form in the template |
| `i18n/<code>/concepts.csv` | `<id>.text`, `<id>.descriptor_template` | a concept in the language; its own template |

Its status is `missing` (no value yet), `awaiting_native_review` (a draft) or `native_reviewed`; its origin says who
wrote the value (`cldr`, `model:<id>`, `sheet`, `hand`). A row of `countries.csv` or `concepts.csv` holds a few
entries and one status: a row is native-reviewed once all of its entries are. Changes are written through
`data/reference_write.write_checked`: the pack they make is checked as a whole, or nothing is written.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, JsonValue

from data.reference_files import CONCEPTS_FILE, COUNTRIES_FILE, LANGUAGE_DIR, LANGUAGE_FILE
from data.reference_models import ENGLISH, REVIEW_AWAITING, LanguagePack, ReferencePack
from data.reference_parse import (
    COUNTRY_NAME_COLUMNS,
    COUNTRY_NAME_OPTIONAL_COLUMNS,
    PROVENANCE_COLUMNS,
    TRANSLATION_COLUMNS,
    language_names,
)
from data.reference_write import write_checked
from data.text_safety import csv_bytes

EntryStatus = Literal["missing", "awaiting_native_review", "native_reviewed"]
REVIEWED = "native_reviewed"
#: A language's entries: its own name for itself, and its RQ3 template (its English name is CLDR's, not translated).
LANGUAGE_KEYS = ("native_name", "descriptor_template")
COUNTRY_KEYS = ("name", "descriptor_country")
CONCEPT_KEYS = ("text", "descriptor_template")
#: The RQ3 template of English, the source every other template translates.
ENGLISH_TEMPLATE = "{concept} of {country}"


class PackEntry(BaseModel):
    """One value of a pack's translations, as a sheet row or a review task shows it."""

    model_config = ConfigDict(frozen=True)

    file: str
    key: str
    language: str
    source: str  # the English it translates
    draft: str  # the value now ("" where missing)
    status: EntryStatus
    origin: str | None = None
    reviewers: int | None = None
    context: str = ""  # what a reviewer also sees: the concept, the country, an example query

    @property
    def ref(self) -> tuple[str, str]:
        return self.file, self.key


@dataclass(frozen=True)
class EntryChange:
    """A new value (or the same one, reviewed) for the entry `file`, `key`."""

    file: str
    key: str
    value: str
    status: Literal["awaiting_native_review", "native_reviewed"]
    origin: str
    reviewers: int | None = None


def language_folder(code: str) -> str:
    return f"{LANGUAGE_DIR}/{code}"


def entry_languages(pack: ReferencePack, languages: Iterable[str] | None = None) -> list[str]:
    """The languages whose entries a sheet or a review lists: `languages`, or every language the pack's countries
    speak and every language folder it holds; English only where named (its concepts are the source)."""
    if languages is not None:
        return list(dict.fromkeys(languages))
    codes = dict.fromkeys([*pack.language_codes, *sorted(pack.languages)])
    codes.pop(ENGLISH, None)
    return list(codes)


def pack_entries(pack: ReferencePack, languages: Iterable[str] | None = None) -> list[PackEntry]:
    """Every entry of `languages` (default `entry_languages`), in file and key order, missing ones included."""
    out: list[PackEntry] = []
    for code in entry_languages(pack, languages):
        out += _language_entries(pack, code)
    return out


def _language_entries(pack: ReferencePack, code: str) -> list[PackEntry]:
    folder = language_folder(code)
    have = pack.languages.get(code)
    english_name, native_name = language_names(code)
    entries: list[PackEntry] = []
    language = have.language if have is not None else None
    file = f"{folder}/{LANGUAGE_FILE}"
    sources = {"native_name": english_name, "descriptor_template": ENGLISH_TEMPLATE}
    contexts = {
        "native_name": f"the name of {english_name} in {english_name} (CLDR: {native_name})",
        "descriptor_template": "'{concept} of {country}' in the language, {concept} and {country} once each",
    }
    for key in LANGUAGE_KEYS:
        value = getattr(language, key) if language is not None else None
        entries.append(_entry(file, key, code, sources[key], value, language, contexts[key]))
    file = f"{folder}/{COUNTRIES_FILE}"
    names = have.countries if have is not None else {}
    for country in pack.countries:
        entry = names.get(country.name)
        for key in COUNTRY_KEYS:
            value = getattr(entry, key) if entry is not None else None
            context = f"{country.name} ({country.iso2})" + (
                "; the form that stands for {country} in the template" if key == "descriptor_country" else ""
            )
            entries.append(_entry(file, f"{country.iso2}.{key}", code, country.name, value, entry, context))
    if code == ENGLISH:
        return entries
    file = f"{folder}/{CONCEPTS_FILE}"
    translations = have.concepts if have is not None else {}
    for concept in pack.concepts:
        entry_t = translations.get(concept.concept_id)
        entries.append(
            _entry(file, f"{concept.concept_id}.text", code, concept.concept, entry_t.text if entry_t else None,
                   entry_t, _example(pack, have, concept.concept_id))
        )  # fmt: skip
        if entry_t is not None and entry_t.descriptor_template:
            entries.append(
                _entry(file, f"{concept.concept_id}.descriptor_template", code, ENGLISH_TEMPLATE,
                       entry_t.descriptor_template, entry_t, f"{concept.concept}'s own RQ3 template")
            )  # fmt: skip
    return entries


def _entry(file: str, key: str, code: str, source: str, value: str | None, record: Any, context: str) -> PackEntry:
    status: EntryStatus = "missing"
    if value:
        status = "native_reviewed" if getattr(record, "review_status", None) == REVIEWED else "awaiting_native_review"
    return PackEntry(
        file=file,
        key=key,
        language=code,
        source=source,
        draft=value or "",
        status=status,
        origin=getattr(record, "origin", None) if value else None,
        reviewers=getattr(record, "reviewers", None) if value else None,
        context=context,
    )


def _example(pack: ReferencePack, language: LanguagePack | None, concept_id: int) -> str:
    """An RQ3 query of the concept as a build would write it in the language (for a reviewer), where it can."""
    if language is None or concept_id not in language.concepts:
        return ""
    other = next((c for c in pack.countries if c.name in language.countries), None)
    if other is None:
        return ""
    try:
        return f"RQ3 query: {language.descriptor(concept_id, other.name)}"
    except KeyError:
        return ""


# -- changes -------------------------------------------------------------------------------------------------------


@dataclass
class _Table:
    """One `i18n/` CSV as rows by key, its header kept (provenance columns added when a change needs them)."""

    header: list[str]
    rows: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def read(cls, data: bytes | None, columns: Sequence[str], key: str) -> _Table:
        if data is None:
            return cls(list(columns))
        reader = csv.DictReader(io.StringIO(data.decode("utf-8-sig"), newline=""))
        table = cls(list(reader.fieldnames or columns))
        for row in reader:
            if any((v or "").strip() for v in row.values()):
                table.rows[row[key]] = {k: v or "" for k, v in row.items()}
        return table

    def bytes(self) -> bytes:
        return csv_bytes(self.header, [[row.get(c, "") for c in self.header] for row in self.rows.values()])

    def need(self, columns: Iterable[str]) -> None:
        self.header += [c for c in columns if c not in self.header]


def apply_changes(pack: ReferencePack, changes: Sequence[EntryChange]) -> list[str]:
    """Write `changes` into the pack (the files changed, relative to it), once the pack they make passes every
    check; a `ValueError` naming the entry for a change no file can hold (a country's name without its form),
    `PackErrors` for a value the pack may not hold. Nothing is written unless everything is."""
    files = pack.files.files
    by_file: dict[str, list[EntryChange]] = {}
    for change in changes:
        by_file.setdefault(change.file, []).append(change)
    changed: dict[str, bytes] = {}
    for file, group in sorted(by_file.items()):
        code = file.split("/")[1]
        name = file.rsplit("/", 1)[1]
        if name == LANGUAGE_FILE:
            changed[file] = _language_file(files.get(file), code, group)
        elif name == COUNTRIES_FILE:
            changed[file] = _country_file(pack, files.get(file), group)
        elif name == CONCEPTS_FILE:
            changed[file] = _concept_file(pack, files.get(file), group)
        else:
            raise ValueError(f"{file}: not a file of a pack's translations")
    for code in sorted({file.split("/")[1] for file in changed}):
        language_file = f"{language_folder(code)}/{LANGUAGE_FILE}"
        if language_file not in files and language_file not in changed:
            changed[language_file] = _language_file(None, code, [])  # a new language: its names from CLDR
    write_checked(pack.files, changed)
    return sorted(changed)


def _merged_status(old: object, changes: Sequence[EntryChange], untouched: int) -> str:
    """A row is native-reviewed when every entry of it is: the changes all reviewed, and no value left as it was
    unless it was reviewed before."""
    reviewed = all(c.status == REVIEWED for c in changes) and (untouched == 0 or old == REVIEWED)
    return REVIEWED if reviewed else REVIEW_AWAITING


def _provenance(row: dict[str, str], changes: Sequence[EntryChange]) -> None:
    origins = {c.origin for c in changes}
    row["origin"] = origins.pop() if len(origins) == 1 else "sheet" if "sheet" in origins else sorted(origins)[0]
    reviewers = [c.reviewers for c in changes if c.reviewers]
    row["reviewers"] = str(min(reviewers)) if reviewers and len(reviewers) == len(changes) else ""


def _language_file(data: bytes | None, code: str, changes: Sequence[EntryChange]) -> bytes:
    current: dict[str, JsonValue] = json.loads(data.decode("utf-8-sig")) if data else {}
    if not current:
        english, native = language_names(code)
        current = {"code": code, "name": english, "native_name": native, "descriptor_template": None}
        current["origin"] = "cldr"
    for change in changes:
        if change.key not in LANGUAGE_KEYS:
            raise ValueError(f"{change.file}: key {change.key!r} is not one of {', '.join(LANGUAGE_KEYS)}")
        current[change.key] = change.value
    if changes:
        untouched = sum(1 for k in LANGUAGE_KEYS if k not in {c.key for c in changes} and current.get(k))
        current["review_status"] = _merged_status(current.get("review_status"), changes, untouched)
        row: dict[str, str] = {}
        _provenance(row, changes)
        current["origin"] = row["origin"]
        current.pop("reviewers", None)
        if row["reviewers"]:
            current["reviewers"] = int(row["reviewers"])
    return (json.dumps(current, ensure_ascii=False, indent=2) + "\n").encode("utf-8")


def _split(change: EntryChange, keys: Sequence[str]) -> tuple[str, str]:
    head, _, key = change.key.rpartition(".")
    if not head or key not in keys:
        raise ValueError(f"{change.file}: key {change.key!r} is not <id>.{'|'.join(keys)}")
    return head, key


def _country_file(pack: ReferencePack, data: bytes | None, changes: Sequence[EntryChange]) -> bytes:
    by_iso = {c.iso2: c for c in pack.countries}
    table = _Table.read(data, (*COUNTRY_NAME_COLUMNS, *COUNTRY_NAME_OPTIONAL_COLUMNS), "iso2")
    table.need(("review_status", *PROVENANCE_COLUMNS))
    grouped: dict[str, list[EntryChange]] = {}
    for change in changes:
        iso, _ = _split(change, COUNTRY_KEYS)
        if iso not in by_iso:
            raise ValueError(f"{change.file}: key {change.key!r} names no country of the pack")
        grouped.setdefault(iso, []).append(change)
    for iso, group in grouped.items():
        row = table.rows.get(iso) or {"iso2": iso, "country": by_iso[iso].name}
        for change in group:
            row[_split(change, COUNTRY_KEYS)[1]] = change.value
        if not row.get("name") or not row.get("descriptor_country"):
            lacking = "name" if not row.get("name") else "descriptor_country"
            raise ValueError(
                f"{group[0].file}: {iso} has no {lacking}: a country's name and its form in the template are "
                f"written together (fill {iso}.name and {iso}.descriptor_country)"
            )
        touched = {_split(c, COUNTRY_KEYS)[1] for c in group}
        row["review_status"] = _merged_status(row.get("review_status"), group, len(set(COUNTRY_KEYS) - touched))
        _provenance(row, group)
        table.rows[iso] = row
    return table.bytes()


def _concept_file(pack: ReferencePack, data: bytes | None, changes: Sequence[EntryChange]) -> bytes:
    by_id = {str(c.concept_id): c for c in pack.concepts}
    table = _Table.read(data, TRANSLATION_COLUMNS, "concept_id")
    table.need(PROVENANCE_COLUMNS)
    grouped: dict[str, list[EntryChange]] = {}
    for change in changes:
        cid, _ = _split(change, CONCEPT_KEYS)
        if cid not in by_id:
            raise ValueError(f"{change.file}: key {change.key!r} names no concept of the pack")
        grouped.setdefault(cid, []).append(change)
    for cid, group in grouped.items():
        row = table.rows.get(cid) or {"concept_id": cid, "concept": by_id[cid].concept, "descriptor_template": ""}
        for change in group:
            row[_split(change, CONCEPT_KEYS)[1]] = change.value
        if not row.get("text"):
            raise ValueError(f"{group[0].file}: concept {cid} has a template but no text: fill {cid}.text")
        present = {"text"} | ({"descriptor_template"} if row.get("descriptor_template") else set())
        touched = {_split(c, CONCEPT_KEYS)[1] for c in group}
        row["review_status"] = _merged_status(row.get("review_status"), group, len(present - touched))
        _provenance(row, group)
        table.rows[cid] = row
    return table.bytes()


def provenance_counts(pack: ReferencePack, languages: Iterable[str]) -> dict[str, dict[str, int]]:
    """Per language, how many entries have a value from each origin, how many are native-reviewed, and the most
    reviewers any entry had: what a release card states of where its translations came from."""
    out: dict[str, dict[str, int]] = {}
    for code in languages:
        counts: dict[str, int] = {"entries": 0, "missing": 0, "reviewed": 0, "reviewers": 0}
        for entry in _language_entries(pack, code):
            counts["entries"] += 1
            if entry.status == "missing":
                counts["missing"] += 1
                continue
            origin = (entry.origin or "unrecorded").split(":")[0]
            counts[origin] = counts.get(origin, 0) + 1
            if entry.status == REVIEWED:
                counts["reviewed"] += 1
                counts["reviewers"] = max(counts["reviewers"], entry.reviewers or 0)
        out[code] = counts
    return out


def changes_by_ref(changes: Iterable[EntryChange]) -> Mapping[tuple[str, str], EntryChange]:
    return {(c.file, c.key): c for c in changes}
