"""A reference pack's files parsed and checked as untrusted input, every error at once.

Each error is one line naming the file and the field (`PackError`): duplicate countries, ISO codes or concept ids,
an unknown language code, a country in two regions, a language group that names no language, a template
placeholder that does not exist, a CSV formula cell, a file that is not UTF-8. Language codes are checked against
CLDR's list (Babel), the one maintained list of the codes people write.
"""

from __future__ import annotations

import csv
import io
import json
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from data.bias_audit_prompt_sets import AuditPrompts
from data.concept_names import invalid_name
from data.reference_files import (
    AUDIT_PROMPTS_FILE,
    CONCEPTS_FILE,
    COUNTRIES_FILE,
    LANGUAGE_DIR,
    LANGUAGE_FILE,
    MIXCUBE_FILE,
    PACK_FILE,
    PackError,
    PackErrors,
    PackFiles,
)
from data.reference_models import (
    ENGLISH,
    Concept,
    ConceptTranslation,
    Country,
    CountryName,
    Language,
    LanguagePack,
    MixCubeReference,
    PackInfo,
    ReferencePack,
)
from data.text_safety import FORMULA_PREFIXES

COUNTRY_COLUMNS = ("name", "iso2", "slug", "language_code", "language_name", "language_group", "ddg_region", "region")
CONCEPT_COLUMNS = ("concept_id", "concept")
CONCEPT_OPTIONAL_COLUMNS = ("paper_image_count", "release_image_count")
TRANSLATION_COLUMNS = ("concept_id", "concept", "text", "descriptor_template", "review_status")
#: Where an entry came from and how many native speakers reviewed it (`data/pack_entries.py`): optional columns of
#: both `i18n/` tables, absent from packs written before them.
PROVENANCE_COLUMNS = ("origin", "reviewers")
COUNTRY_NAME_COLUMNS = ("iso2", "country", "name", "descriptor_country")
COUNTRY_NAME_OPTIONAL_COLUMNS = ("review_status", *PROVENANCE_COLUMNS)

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


@cache
def known_languages() -> frozenset[str]:
    """Every language code CLDR names (ISO 639 and the like: `en`, `yo`, `fil`), lower case."""
    from babel import Locale

    return frozenset(str(code).lower().replace("_", "-") for code in Locale("en").languages)


def language_names(code: str) -> tuple[str, str]:
    """A language's English and native names from CLDR (`yo` -> Yoruba, Èdè Yorùbá); the code where CLDR has none."""
    from babel import Locale, UnknownLocaleError

    english = Locale("en").languages.get(code) or Locale("en").languages.get(code.split("-")[0]) or code
    try:
        native = Locale.parse(code.replace("-", "_")).display_name or english
    except (UnknownLocaleError, ValueError):
        native = english
    return english, native


def known_language(code: str) -> bool:
    """`ja`, or a code with a subtag whose language is known (`zh-hant`)."""
    return code in known_languages() or code.split("-", 1)[0] in known_languages()


#: Errors shown per file; past them a file's check stops, and one line says so (a file of 250,000 bad rows costs
#: what 50 do).
MAX_ERRORS_PER_FILE = 50
#: Rows a table may hold: ISO 3166-1 has 249 codes; 100,000 concepts is far past any benchmark's.
MAX_ROWS = {COUNTRIES_FILE: 1_000, CONCEPTS_FILE: 100_000}
#: The largest integer a pack's JSON may hold (a count, a version): a 5,000-digit one is refused, not converted.
MAX_INT_DIGITS = 18


class _FileFull(Exception):
    """A file reached its error cap: its check stops at `field` (the row or field of the last error shown)."""

    def __init__(self, file: str, field: str) -> None:
        super().__init__(file)
        self.file, self.field = file, field


class _Parser:
    def __init__(self, files: PackFiles) -> None:
        self.files = files
        self.errors: list[PackError] = []
        self.per_file: dict[str, int] = {}

    def error(self, file: str, field: str, message: str) -> None:
        """Record one error; past the file's cap, raise `_FileFull` so that its check stops."""
        count = self.per_file.get(file, 0) + 1
        self.per_file[file] = count
        self.errors.append(PackError(self.files.location, file, field, message))
        if count >= MAX_ERRORS_PER_FILE:
            raise _FileFull(file, field or "its end")

    def stopped(self, file: str, where: str) -> None:
        self.errors.append(
            PackError(
                self.files.location,
                file,
                "",
                f"{MAX_ERRORS_PER_FILE} errors shown; its check stopped there ({where}): fix those, then check again",
            )
        )

    def failed(self, file: str) -> bool:
        return self.per_file.get(file, 0) > 0

    def checked(self, file: str, check: Callable[[], T]) -> T | None:
        """`check()` of one file; None when it stopped at the file's error cap."""
        try:
            return check()
        except _FileFull as full:  # `file`'s, or that of a file it checks against
            self.stopped(full.file, full.field)
            return None

    def text(self, name: str) -> str | None:
        try:
            return self.files.text(name)
        except PackError as exc:
            self.errors.append(exc)
            return None

    def json(self, name: str) -> Any:
        text = self.text(name)
        if text is None:
            return None
        try:
            return json.loads(text, parse_int=_bounded_int)
        except RecursionError:
            self.error(name, "", "not valid JSON (nested too deep)")
        except ValueError as exc:  # JSONDecodeError, and an integer too long to be a pack's
            self.error(name, "", f"not valid JSON ({exc})")
        return None

    def model(self, model: type[M], name: str, where: str, raw: Any) -> M | None:
        try:
            return model.model_validate(raw)
        except ValidationError as exc:
            for err in exc.errors(include_url=False, include_input=False)[:20]:
                loc = ".".join(str(p) for p in err["loc"])
                field = ", ".join(p for p in (where, loc) if p) or "(root)"
                self.error(name, field, err["msg"].removeprefix("Value error, "))
            return None

    def csv_rows(self, name: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> list[dict[str, str]]:
        """The rows of a CSV, NFC-normalised; a missing or unknown column, a short row or a formula cell is an
        error naming the row and column."""
        text = self.text(name)
        if text is None:
            return []
        reader = csv.reader(io.StringIO(text, newline=""))
        try:
            header = next(reader, None)
            body = list(reader)
        except csv.Error as exc:
            self.error(name, "", f"not a CSV file ({exc})")
            return []
        if header is None:
            self.error(name, "header", "the file is empty")
            return []
        missing = [c for c in required if c not in header]
        unknown = [c for c in header if c not in required and c not in optional]
        if missing or unknown:
            wanted = ", ".join(required + tuple(f"[{c}]" for c in optional))
            what = f"missing {missing}" if missing else f"unknown {unknown}"
            self.error(name, "header", f"columns {what}; the columns are {wanted}")
            return []
        rows: list[dict[str, str]] = []
        cap = MAX_ROWS.get(name, MAX_ROWS[CONCEPTS_FILE])
        for number, cells in enumerate(body, start=2):
            if not any(cell.strip() for cell in cells) or cells[0].lstrip().startswith("#"):
                continue  # a blank row, or a comment (the skeleton's examples)
            if len(rows) == cap:
                self.error(name, f"row {number}", f"more than {cap:,} rows; a pack holds far fewer")
                break
            if len(cells) != len(header):
                self.error(name, f"row {number}", f"{len(cells)} cells for {len(header)} columns")
                continue
            row = {}
            for column, cell in zip(header, cells, strict=True):
                value = unicodedata.normalize("NFC", cell)
                if value.startswith(FORMULA_PREFIXES):
                    self.error(name, f"row {number}, {column}", f"{value[:40]!r} starts like a spreadsheet formula")
                row[column] = value
            row["__row__"] = str(number)
            rows.append(row)
        return rows

    def unique(self, name: str, rows: list[dict[str, str]], column: str, what: str) -> None:
        seen: dict[str, str] = {}
        for row in rows:
            key = row[column].strip().lower()
            if key in seen:
                self.error(name, f"row {row['__row__']}, {column}", f"{what} {row[column]!r} repeats row {seen[key]}")
            else:
                seen[key] = row["__row__"]


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text.lstrip('-')):,} digits, longer than a pack's numbers are")
    return int(text)


def _optional(row: dict[str, str], columns: tuple[str, ...]) -> dict[str, str]:
    """The optional columns a row fills (an empty cell is the column's default)."""
    return {c: row[c].strip() for c in columns if row.get(c, "").strip()}


def _fields(row: dict[str, str], columns: tuple[str, ...]) -> dict[str, str]:
    return {c: row[c] for c in columns if c in row}


def parse_pack(files: PackFiles, default_digest: str = "") -> ReferencePack:
    """The pack in `files`, checked; every problem found is raised together as `PackErrors`.

    Each problem is reported once, where it lies: a file's check stops at its 50th error, rows of `i18n/` that name
    a country or concept the pack no longer holds are one line per file with their count, and the files of `i18n/`
    are not checked against a `countries.csv` or `concepts.csv` that has errors of its own (one line says so)."""
    p = _Parser(files)
    info = p.checked(PACK_FILE, lambda: p.model(PackInfo, PACK_FILE, "", p.json(PACK_FILE)))
    countries = p.checked(COUNTRIES_FILE, lambda: _countries(p)) or []
    concepts = p.checked(CONCEPTS_FILE, lambda: _concepts(p)) or []
    tables = _Tables(countries, concepts, p.failed(COUNTRIES_FILE), p.failed(CONCEPTS_FILE))
    languages = {code: pack for code in files.languages() if (pack := _language(p, code, tables))}
    _unchecked_line(p, tables)
    # Every build queries in English too: a pack without `i18n/en/` uses the paper's form and the countries' names.
    # A country language without a folder is a build's problem (its pre-flight names it), not the pack's.
    english = languages.get(ENGLISH) or _english_default(countries)
    languages[ENGLISH] = _with_english_concepts(english, concepts)
    if info is not None and info.demo is not None:
        p.checked(PACK_FILE, lambda: _demo(p, info, tables))
    mixcube = None
    if MIXCUBE_FILE in files.files:
        mixcube = p.checked(MIXCUBE_FILE, lambda: p.model(MixCubeReference, MIXCUBE_FILE, "", p.json(MIXCUBE_FILE)))
    audit = p.checked(AUDIT_PROMPTS_FILE, lambda: _audit_prompts(p)) if AUDIT_PROMPTS_FILE in files.files else None
    if p.errors or info is None:
        raise PackErrors(p.errors)
    return ReferencePack(
        info=info,
        countries=tuple(countries),
        concepts=tuple(concepts),
        languages=languages,
        mixcube_reference=mixcube,
        audit_prompts=audit,
        files=files,
        default_digest=default_digest,
    )


@dataclass
class _Tables:
    """The pack's countries and concepts as the files of `i18n/` are checked against them, and which of those files
    were left unchecked because the table has errors of its own."""

    countries: list[Country]
    concepts: list[Concept]
    countries_failed: bool
    concepts_failed: bool
    unchecked: dict[str, list[str]] = field(default_factory=dict)  # table -> files not checked against it

    def __post_init__(self) -> None:
        self.by_iso = {c.iso2: c for c in self.countries}
        self.by_id = {c.concept_id: c for c in self.concepts}
        self.concept_names = {c.concept for c in self.concepts}


def _demo(p: _Parser, info: PackInfo, tables: _Tables) -> None:
    assert info.demo is not None
    checks = []
    if not tables.concepts_failed:
        checks.append(("demo.concepts", info.demo.concepts, tables.concept_names, "concepts.csv", "concept"))
    if not tables.countries_failed:
        names = {c.name for c in tables.countries}
        checks.append(("demo.countries", info.demo.countries or [], names, "countries.csv", "country"))
    for name, wanted, known, table, what in checks:
        unknown = [w for w in wanted if w not in known]
        if unknown:
            shown = ", ".join(repr(u[:40]) for u in unknown[:5]) + (", ..." if len(unknown) > 5 else "")
            p.error(PACK_FILE, name, f"{len(unknown)} name(s) that are no {what} of {table}: {shown}")


def _unchecked_line(p: _Parser, tables: _Tables) -> None:
    for table, unchecked in sorted(tables.unchecked.items()):
        shown = ", ".join(unchecked[:3]) + (f" and {len(unchecked) - 3} more" if len(unchecked) > 3 else "")
        p.errors.append(
            PackError(
                p.files.location,
                table,
                "",
                f"has errors, so {shown} ({len(unchecked)} file(s)) were not checked against it; fix it first",
            )
        )


def _countries(p: _Parser) -> list[Country]:
    """The countries of `countries.csv`: one row per (country, language), a country of several languages on several
    rows that agree on every column but the language's (`language_code`, `language_name`, `language_group`,
    `ddg_region`); its first row is its primary language."""
    rows = p.csv_rows(COUNTRIES_FILE, COUNTRY_COLUMNS)
    _two_regions(p, rows)
    _repeats(p, rows)
    merged: dict[str, list[Country]] = {}
    for row in rows:
        where = f"row {row['__row__']}"
        for column in ("language_code",):
            if row[column] and not known_language(row[column]):
                p.error(COUNTRIES_FILE, f"{where}, {column}", f"{row[column]!r} is not a language code CLDR knows")
        group = row["language_group"]
        if group and not known_language(group.split("-", 1)[0]):
            p.error(
                COUNTRIES_FILE,
                f"{where}, language_group",
                f"{group!r} names no language: a group is a language code, or one followed by a label (en-aa)",
            )
        country = p.model(Country, COUNTRIES_FILE, where, _fields(row, COUNTRY_COLUMNS))
        if country is not None:
            merged.setdefault(country.name, []).append(country)
    out = []
    for versions in merged.values():
        first = versions[0]
        if len(versions) > 1:
            first = first.model_copy(update={"spoken": tuple(language for v in versions for language in v.languages)})
        out.append(first)
    groups: dict[str, set[str]] = {}
    for country in out:
        for language in country.languages:
            groups.setdefault(language.group, set()).add(language.code)
    for group, codes in sorted(groups.items()):
        if len(codes) > 1:
            p.error(
                COUNTRIES_FILE,
                "language_group",
                f"group {group!r} holds countries of the languages {sorted(codes)}; a group shares one query language",
            )
    return out


def _repeats(p: _Parser, rows: list[dict[str, str]]) -> None:
    """A country may take several rows, one per language, alike in all but the language's columns; an ISO code
    names one country."""
    first: dict[str, dict[str, str]] = {}
    by_iso: dict[str, dict[str, str]] = {}
    languages: dict[tuple[str, str], str] = {}
    for row in rows:
        where, name = f"row {row['__row__']}", row["name"].strip().lower()
        earlier = first.setdefault(name, row)
        if earlier is not row:
            differs = [c for c in ("iso2", "slug") if row[c].strip() != earlier[c].strip()]
            if differs:
                p.error(
                    COUNTRIES_FILE,
                    f"{where}, name",
                    f"country {row['name']!r} repeats row {earlier['__row__']} with another {differs[0]}: a country "
                    "of several languages has one row per language, alike in every other column",
                )
                continue
        seen = languages.setdefault((name, row["language_code"].strip()), row["__row__"])
        if seen != row["__row__"]:
            p.error(
                COUNTRIES_FILE,
                f"{where}, name",
                f"country {row['name']!r} repeats row {seen} in the language {row['language_code']!r}",
            )
        iso = row["iso2"].strip().upper()
        named = by_iso.setdefault(iso, row)
        if named["name"].strip().lower() != name:
            p.error(COUNTRIES_FILE, f"{where}, iso2", f"ISO code {row['iso2']!r} repeats row {named['__row__']}")


def _two_regions(p: _Parser, rows: list[dict[str, str]]) -> None:
    """A country named twice with two regions is reported as that, before the plain repeat."""
    regions: dict[str, set[str]] = {}
    named: dict[str, str] = {}  # each key's country as its first row names it
    for row in rows:
        for key in (row["name"].strip().lower(), row["iso2"].strip().upper()):
            regions.setdefault(key, set()).add(row["region"])
            named.setdefault(key, row["name"].strip())
    reported: set[tuple[str, tuple[str, ...]]] = set()  # a country by name and by code is one error
    for key, names in sorted(regions.items()):
        found = (named[key], tuple(sorted(names)))
        if len(names) > 1 and found not in reported:
            reported.add(found)
            p.error(COUNTRIES_FILE, "region", f"country {named[key]!r} is in two regions: {sorted(names)}")


def _concepts(p: _Parser) -> list[Concept]:
    rows = p.csv_rows(CONCEPTS_FILE, CONCEPT_COLUMNS, CONCEPT_OPTIONAL_COLUMNS)
    p.unique(CONCEPTS_FILE, rows, "concept_id", "concept id")
    p.unique(CONCEPTS_FILE, rows, "concept", "concept")
    out = []
    for row in rows:
        where = f"row {row['__row__']}"
        problem = invalid_name(row["concept"])
        if problem:
            p.error(CONCEPTS_FILE, f"{where}, concept", f"{row['concept'][:40]!r}: {problem}")
            continue
        raw: dict[str, str | None] = {
            k: (v.strip() or None) for k, v in _fields(row, CONCEPT_COLUMNS + CONCEPT_OPTIONAL_COLUMNS).items()
        }
        concept = p.model(Concept, CONCEPTS_FILE, where, raw)
        if concept is not None:
            out.append(concept)
    return out


class _Orphans:
    """Rows of an `i18n/` file that name a country or concept the pack does not hold (left behind when rows were
    removed by hand): one line per file, with their count (`culturebench reference prune` drops them)."""

    def __init__(self, p: _Parser, file: str, what: str) -> None:
        self.p, self.file, self.what = p, file, what
        self.rows: list[str] = []

    def add(self, row: dict[str, str], key: str) -> None:
        self.rows.append(f"row {row['__row__']} ({key[:40]!r})")

    def report(self) -> None:
        if self.rows:
            shown = ", ".join(self.rows[:3]) + (", ..." if len(self.rows) > 3 else "")
            self.p.error(
                self.file,
                "",
                f"{len(self.rows)} row(s) name {self.what} the pack does not hold ({shown}); "
                f"`culturebench reference prune {self.p.files.location}` drops them",
            )


def _language(p: _Parser, code: str, tables: _Tables) -> LanguagePack | None:
    folder = f"{LANGUAGE_DIR}/{code}"
    if not known_language(code):
        p.error(folder, "", f"{code!r} is not a language code CLDR knows")
        return None
    names = set(p.files.files)
    language_file = f"{folder}/{LANGUAGE_FILE}"
    if language_file not in names:
        p.error(language_file, "", "missing: every language folder has one")
        return None
    language = p.checked(language_file, lambda: _language_file(p, language_file, code))
    name_file = f"{folder}/{COUNTRIES_FILE}"
    country_names: dict[str, CountryName] = {}
    if name_file in names:
        if tables.countries_failed:
            tables.unchecked.setdefault(COUNTRIES_FILE, []).append(name_file)
        else:
            country_names = p.checked(name_file, lambda: _country_names(p, name_file, code, tables)) or {}
    translations: dict[int, ConceptTranslation] = {}
    concept_file = f"{folder}/{CONCEPTS_FILE}"
    if code == ENGLISH and concept_file in names:
        p.error(concept_file, "", "English concepts are the names in concepts.csv; remove this file")
    elif concept_file in names:
        if tables.concepts_failed:
            tables.unchecked.setdefault(CONCEPTS_FILE, []).append(concept_file)
        else:
            translations = p.checked(concept_file, lambda: _translations(p, concept_file, code, tables)) or {}
    if language is None:
        return None
    return LanguagePack(language=language, concepts=translations, countries=country_names)


def _language_file(p: _Parser, file: str, code: str) -> Language | None:
    language = p.model(Language, file, "", p.json(file))
    if language is not None and language.code != code:
        p.error(file, "code", f"{language.code!r} in the folder of {code!r}")
    return language


def _country_names(p: _Parser, file: str, code: str, tables: _Tables) -> dict[str, CountryName]:
    rows = p.csv_rows(file, COUNTRY_NAME_COLUMNS, COUNTRY_NAME_OPTIONAL_COLUMNS)
    p.unique(file, rows, "iso2", "ISO code")
    orphans = _Orphans(p, file, "countries")
    out: dict[str, CountryName] = {}
    for row in rows:
        where = f"row {row['__row__']}"
        known = tables.by_iso.get(row["iso2"])
        if known is None:
            orphans.add(row, f"{row['iso2']} {row['country']}")
            continue
        if known.name != row["country"]:
            p.error(
                file, f"{where}, country", f"{row['country']!r} is not the name of {row['iso2']!r} ({known.name!r})"
            )
            continue
        raw_name: dict[str, str] = {**_fields(row, COUNTRY_NAME_COLUMNS), "language_code": code}
        raw_name.update(_optional(row, COUNTRY_NAME_OPTIONAL_COLUMNS))
        entry = p.model(CountryName, file, where, raw_name)
        if entry is not None:
            out[entry.country] = entry
    orphans.report()
    return out


def _translations(p: _Parser, file: str, code: str, tables: _Tables) -> dict[int, ConceptTranslation]:
    rows = p.csv_rows(file, TRANSLATION_COLUMNS, PROVENANCE_COLUMNS)
    p.unique(file, rows, "concept_id", "concept id")
    orphans = _Orphans(p, file, "concepts")
    out: dict[int, ConceptTranslation] = {}
    for row in rows:
        where = f"row {row['__row__']}"
        concept_id = row["concept_id"].strip()
        known = (
            tables.by_id.get(int(concept_id))
            if concept_id.isascii() and concept_id.isdigit() and len(concept_id) < 19
            else None
        )
        if known is None and row["concept"] not in tables.concept_names:
            orphans.add(row, row["concept"])
            continue
        if known is None or known.concept != row["concept"]:
            p.error(
                file,
                f"{where}, concept_id",
                f"{row['concept_id'][:20]!r} {row['concept'][:40]!r} is not a concept of concepts.csv",
            )
            continue
        raw: dict[str, str | int | None] = {**_fields(row, TRANSLATION_COLUMNS), "language_code": code}
        raw.update(_optional(row, PROVENANCE_COLUMNS))
        raw["concept_id"] = known.concept_id
        raw["descriptor_template"] = row["descriptor_template"] or None
        entry = p.model(ConceptTranslation, file, where, raw)
        if entry is not None:
            out[entry.concept_id] = entry
    orphans.report()
    return out


def _english_default(countries: list[Country]) -> LanguagePack:
    """English for a pack without an `i18n/en/` folder: the paper's template and the countries' own names."""
    language = Language(
        code=ENGLISH, name="English", native_name="English", descriptor_template="{concept} of {country}"
    )
    names = {
        c.name: CountryName(iso2=c.iso2, country=c.name, language_code=ENGLISH, name=c.name, descriptor_country=c.name)
        for c in countries
    }
    return LanguagePack(language=language, concepts={}, countries=names)


def _with_english_concepts(pack: LanguagePack, concepts: list[Concept]) -> LanguagePack:
    """English is the source language: each concept's English text is its name."""
    entries = {
        c.concept_id: ConceptTranslation(
            concept_id=c.concept_id, concept=c.concept, language_code=ENGLISH, text=c.concept, review_status="source"
        )
        for c in concepts
    }
    return pack.model_copy(update={"concepts": entries})


def _audit_prompts(p: _Parser) -> AuditPrompts | None:
    prompts = p.model(AuditPrompts, AUDIT_PROMPTS_FILE, "", p.json(AUDIT_PROMPTS_FILE))
    if prompts is None:
        return None
    for code in prompts.translations:
        if not known_language(code):
            p.error(AUDIT_PROMPTS_FILE, f"translations.{code}", f"{code!r} is not a language code CLDR knows")
    return prompts
