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
COUNTRY_NAME_COLUMNS = ("iso2", "country", "name", "descriptor_country")
COUNTRY_NAME_OPTIONAL_COLUMNS = ("review_status",)

M = TypeVar("M", bound=BaseModel)


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


class _Parser:
    def __init__(self, files: PackFiles) -> None:
        self.files = files
        self.errors: list[PackError] = []

    def error(self, file: str, field: str, message: str) -> None:
        self.errors.append(PackError(self.files.location, file, field, message))

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
            return json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            self.error(name, "", f"not valid JSON ({exc})")
            return None

    def model(self, model: type[M], name: str, where: str, raw: Any) -> M | None:
        try:
            return model.model_validate(raw)
        except ValidationError as exc:
            for err in exc.errors()[:20]:
                loc = ".".join(str(p) for p in err["loc"])
                field = ", ".join(p for p in (where, loc) if p) or "(root)"
                self.error(name, field, err["msg"])
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
        rows = []
        for number, cells in enumerate(body, start=2):
            if not any(cell.strip() for cell in cells):
                continue
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


def _fields(row: dict[str, str], columns: tuple[str, ...]) -> dict[str, str]:
    return {c: row[c] for c in columns if c in row}


def parse_pack(files: PackFiles, default_digest: str = "") -> ReferencePack:
    """The pack in `files`, checked; every problem found is raised together as `PackErrors`."""
    p = _Parser(files)
    info = p.model(PackInfo, PACK_FILE, "", p.json(PACK_FILE))
    countries = _countries(p)
    concepts = _concepts(p)
    languages = {code: pack for code in files.languages() if (pack := _language(p, code, countries, concepts))}
    # Every build queries in English too: a pack without `i18n/en/` uses the paper's form and the countries' names.
    # A country language without a folder is a build's problem (its pre-flight names it), not the pack's.
    english = languages.get(ENGLISH) or _english_default(countries)
    languages[ENGLISH] = _with_english_concepts(english, concepts)
    if info is not None and info.demo is not None:
        known_concepts = {c.concept for c in concepts}
        known_countries = {c.name for c in countries}
        for name in info.demo.concepts:
            if name not in known_concepts:
                p.error(PACK_FILE, "demo.concepts", f"{name!r} is not a concept of concepts.csv")
        for name in info.demo.countries or []:
            if name not in known_countries:
                p.error(PACK_FILE, "demo.countries", f"{name!r} is not a country of countries.csv")
    mixcube = p.model(MixCubeReference, MIXCUBE_FILE, "", p.json(MIXCUBE_FILE)) if MIXCUBE_FILE in files.files else None
    audit = _audit_prompts(p) if AUDIT_PROMPTS_FILE in files.files else None
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


def _countries(p: _Parser) -> list[Country]:
    rows = p.csv_rows(COUNTRIES_FILE, COUNTRY_COLUMNS)
    _two_regions(p, rows)
    p.unique(COUNTRIES_FILE, rows, "name", "country")
    p.unique(COUNTRIES_FILE, rows, "iso2", "ISO code")
    out = []
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
            out.append(country)
    groups: dict[str, set[str]] = {}
    for country in out:
        groups.setdefault(country.language_group, set()).add(country.language_code)
    for group, codes in sorted(groups.items()):
        if len(codes) > 1:
            p.error(
                COUNTRIES_FILE,
                "language_group",
                f"group {group!r} holds countries of the languages {sorted(codes)}; a group shares one query language",
            )
    return out


def _two_regions(p: _Parser, rows: list[dict[str, str]]) -> None:
    """A country named twice with two regions is reported as that, before the plain repeat."""
    regions: dict[str, set[str]] = {}
    for row in rows:
        for key in (row["name"].strip().lower(), row["iso2"].strip().upper()):
            regions.setdefault(key, set()).add(row["region"])
    for key, names in sorted(regions.items()):
        if len(names) > 1:
            p.error(COUNTRIES_FILE, "region", f"country {key!r} is in two regions: {sorted(names)}")


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
        raw: dict[str, Any] = {
            k: (v.strip() or None) for k, v in _fields(row, CONCEPT_COLUMNS + CONCEPT_OPTIONAL_COLUMNS).items()
        }
        concept = p.model(Concept, CONCEPTS_FILE, where, raw)
        if concept is not None:
            out.append(concept)
    return out


def _language(p: _Parser, code: str, countries: list[Country], concepts: list[Concept]) -> LanguagePack | None:
    folder = f"{LANGUAGE_DIR}/{code}"
    if not known_language(code):
        p.error(folder, "", f"{code!r} is not a language code CLDR knows")
        return None
    names = set(p.files.files)
    if f"{folder}/{LANGUAGE_FILE}" not in names:
        p.error(f"{folder}/{LANGUAGE_FILE}", "", "missing: every language folder has one")
        return None
    language = p.model(Language, f"{folder}/{LANGUAGE_FILE}", "", p.json(f"{folder}/{LANGUAGE_FILE}"))
    if language is not None and language.code != code:
        p.error(f"{folder}/{LANGUAGE_FILE}", "code", f"{language.code!r} in the folder of {code!r}")
    by_iso = {c.iso2: c for c in countries}
    country_names: dict[str, CountryName] = {}
    name_file = f"{folder}/{COUNTRIES_FILE}"
    rows = p.csv_rows(name_file, COUNTRY_NAME_COLUMNS, COUNTRY_NAME_OPTIONAL_COLUMNS) if name_file in names else []
    p.unique(name_file, rows, "iso2", "ISO code")
    for row in rows:
        where = f"row {row['__row__']}"
        known = by_iso.get(row["iso2"])
        if known is None or known.name != row["country"]:
            p.error(
                name_file, f"{where}, iso2", f"{row['iso2']!r} {row['country']!r} is not a country of countries.csv"
            )
            continue
        raw_name: dict[str, Any] = {**_fields(row, COUNTRY_NAME_COLUMNS), "language_code": code}
        if row.get("review_status"):
            raw_name["review_status"] = row["review_status"]
        entry = p.model(CountryName, name_file, where, raw_name)
        if entry is not None:
            country_names[entry.country] = entry
    translations: dict[int, ConceptTranslation] = {}
    concept_file = f"{folder}/{CONCEPTS_FILE}"
    if code == ENGLISH and concept_file in names:
        p.error(concept_file, "", "English concepts are the names in concepts.csv; remove this file")
    elif concept_file in names:
        by_id = {c.concept_id: c for c in concepts}
        rows = p.csv_rows(concept_file, TRANSLATION_COLUMNS)
        p.unique(concept_file, rows, "concept_id", "concept id")
        for row in rows:
            where = f"row {row['__row__']}"
            try:
                known_concept = by_id.get(int(row["concept_id"]))
            except ValueError:
                known_concept = None
            if known_concept is None or known_concept.concept != row["concept"]:
                p.error(
                    concept_file,
                    f"{where}, concept_id",
                    f"{row['concept_id']!r} {row['concept']!r} is not a concept of concepts.csv",
                )
                continue
            raw: dict[str, Any] = {**_fields(row, TRANSLATION_COLUMNS), "language_code": code}
            raw["concept_id"] = known_concept.concept_id
            raw["descriptor_template"] = row["descriptor_template"] or None
            entry_t = p.model(ConceptTranslation, concept_file, where, raw)
            if entry_t is not None:
                translations[entry_t.concept_id] = entry_t
    if language is None:
        return None
    return LanguagePack(language=language, concepts=translations, countries=country_names)


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
