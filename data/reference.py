"""Shipped reference data: countries, languages, the 3XCM concept list, translations, MixCuBe constants.

Everything here is read from `data/reference/` and validated into pydantic models once per process.
"""

from __future__ import annotations

import csv
import json
import unicodedata
from functools import cache
from importlib import resources
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

REVIEW_AWAITING = "awaiting_native_review"
ENGLISH = "en"
#: The region of a country outside the reference data (`region_of`).
UNKNOWN_REGION = "unknown"
#: The 11 non-English native languages of the 3XCM countries (3XCM paper Table 9; data/reference/countries.csv).
NATIVE_LANGUAGES = ("de", "zh", "ja", "es", "fr", "pt", "ar", "th", "hi", "sw", "yo")


class Country(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str = Field(description="Country name exactly as in the authors' image_metadata (e.g. 'UK', 'USA').")
    iso2: str = Field(pattern=r"^[A-Z]{2}$")
    slug: str = Field(
        pattern=r"^[a-z]+( [a-z]+)*$",
        description="The name in lower case, spaces kept, as in the authors' image ids (data/reference/xcm-bench.csv: "
        "'saudi arabia-0-1-eng'): {slug}-{concept_id}-{rank}-{eng|nav}.",
    )
    language_code: str
    language_name: str
    language_group: str = Field(description="Countries sharing a group share the query language.")
    ddg_region: str = Field(pattern=r"^[a-z]{2}-[a-z]{2,3}$")
    region: str = Field(
        min_length=1,
        description="World region in the sense of GlobalRG (its §1 and §3: 50 countries in 10 regions, Table 1), the "
        "culture unit of its region-level diversity@k (§3.2); not `ddg_region`, the search engine's locale. "
        "data/reference/README.md says how the names were chosen.",
    )

    @model_validator(mode="after")
    def _slug_is_lower_name(self) -> Country:
        if self.slug != self.name.lower():
            raise ValueError(f"slug {self.slug!r} is not the lower-cased name {self.name.lower()!r}")
        return self


class Concept(BaseModel):
    model_config = ConfigDict(frozen=True)

    concept_id: int = Field(ge=0, description="The authors' id (data/reference/xcm-bench.csv); accepted ones 1000+.")
    concept: str
    paper_image_count: int | None = Field(
        default=None, description="Image count in 3XCM paper, Table 10; None for the two concepts our copy lacks."
    )
    release_image_count: int | None = Field(
        default=None,
        description="Distinct image ids of this concept in the authors' release (data/reference/xcm-bench.csv).",
    )


class Language(BaseModel):
    model_config = ConfigDict(frozen=True)

    code: str
    name: str
    native_name: str
    descriptor_template: str = Field(description="RQ3 cultural-descriptor form, with {concept} and {country}.")
    notes: str = ""

    @field_validator("descriptor_template")
    @classmethod
    def _has_placeholders(cls, value: str) -> str:
        return _check_template(value)


class ConceptTranslation(BaseModel):
    model_config = ConfigDict(frozen=True)

    concept_id: int
    concept: str
    language_code: str
    text: str = Field(min_length=1)
    descriptor_template: str | None = Field(
        default=None, description="Per-concept override of the language's RQ3 template (gender, noun class)."
    )
    review_status: Literal["awaiting_native_review", "native_reviewed", "source"]

    @field_validator("descriptor_template")
    @classmethod
    def _optional_template(cls, value: str | None) -> str | None:
        return _check_template(value) if value else None


class CountryName(BaseModel):
    model_config = ConfigDict(frozen=True)

    iso2: str
    country: str
    language_code: str
    name: str = Field(min_length=1, description="Plain country name in the language (search queries).")
    descriptor_country: str = Field(min_length=1, description="Form substituted into {country} of the template.")


class LanguagePack(BaseModel):
    """One language: its metadata, concept translations and country names."""

    model_config = ConfigDict(frozen=True)

    language: Language
    concepts: dict[int, ConceptTranslation]
    countries: dict[str, CountryName]  # keyed by the English country name

    def concept_text(self, concept_id: int) -> str:
        return self.concepts[concept_id].text

    def descriptor(self, concept_id: int, country: str) -> str:
        """The RQ3 query "{concept} of {country}" written in this language (3XCM paper §3.2.3)."""
        entry = self.concepts[concept_id]
        template = entry.descriptor_template or self.language.descriptor_template
        return template.format(concept=entry.text, country=self.countries[country].descriptor_country)


class MixCubeCulture(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    iso2: str
    adjective: str = Field(description="Value of the public dataset's `country` column.")
    label_aliases: list[str] = Field(description="Accepted answers for country identification (App. A.5).")
    resource_level: Literal["low", "medium", "high"]


class MixCubeEthnicity(BaseModel):
    model_config = ConfigDict(frozen=True)

    label: str = Field(description="Value of the public dataset's `ethnicity` column.")
    prompt_name: str = Field(description="Text put into the {Ethnicity} slot of the App. B.1 prompts.")


class MixCubeReference(BaseModel):
    model_config = ConfigDict(frozen=True)

    cultures: list[MixCubeCulture]
    categories: list[str]
    ethnicities: list[MixCubeEthnicity]
    original_label: str
    inpainting_prompts: dict[str, str]
    tailored_prompt_examples: list[str]
    evaluation_prompts: dict[str, str]
    food_label_examples: dict[str, str]
    originals_per_culture_category: int
    sources: dict[str, str]

    @model_validator(mode="after")
    def _prompts_cover_categories(self) -> MixCubeReference:
        for table in (self.inpainting_prompts, self.evaluation_prompts):
            if set(table) != set(self.categories):
                raise ValueError(f"prompt table keys {sorted(table)} != categories {self.categories}")
        for template in self.inpainting_prompts.values():
            if "{ethnicity}" not in template:
                raise ValueError(f"inpainting prompt without {{ethnicity}}: {template!r}")
        return self


def _check_template(value: str) -> str:
    if "{concept}" not in value or "{country}" not in value:
        raise ValueError(f"template needs {{concept}} and {{country}}: {value!r}")
    value.format(concept="", country="")
    return value


def _reference_file(*parts: str) -> str:
    return resources.files("data").joinpath("reference", *parts).read_text(encoding="utf-8")


def _csv_rows(*parts: str) -> list[dict[str, str]]:
    text = _reference_file(*parts)
    return [{k: unicodedata.normalize("NFC", v) for k, v in row.items()} for row in csv.DictReader(text.splitlines())]


def _optional_int(value: str) -> int | None:
    return int(value) if value.strip() else None


@cache
def countries() -> tuple[Country, ...]:
    return tuple(Country(**row) for row in _csv_rows("countries.csv"))


@cache
def country_by_name() -> dict[str, Country]:
    return {c.name: c for c in countries()}


def region_of(country: str) -> str:
    """A country's GlobalRG region by its exact name; `UNKNOWN_REGION` for one outside the reference data (a
    synthetic or extended build's), so a release with such countries can still be evaluated by region."""
    known = country_by_name().get(country)
    return known.region if known is not None else UNKNOWN_REGION


def resolve_country(name: str) -> Country:
    """Find a country by its name, slug or ISO code (case-insensitive). The slug's old form, with `_` for the
    space (`saudi_arabia`, used by releases before the authors' ids were adopted), is still accepted."""
    key = " ".join(name.strip().lower().replace("_", " ").split())
    for country in countries():
        if key in (country.name.lower(), country.slug, country.iso2.lower()):
            return country
    raise KeyError(f"unknown country {name!r}; known: {[c.name for c in countries()]}")


def country_names(items: list[str]) -> list[str]:
    """Canonical names of countries given by name, slug or ISO code; an unknown one is a ValueError (for
    pydantic validators, which report it field by field)."""
    names = []
    for item in items:
        try:
            names.append(resolve_country(item).name)
        except KeyError as exc:
            raise ValueError(str(exc.args[0])) from None
    return names


@cache
def concepts() -> tuple[Concept, ...]:
    """The 139 concepts in the authors' id order (0 is train, 29 congress; data/reference/xcm-bench.csv)."""
    return tuple(
        Concept(
            concept_id=int(r["concept_id"]),
            concept=r["concept"],
            paper_image_count=_optional_int(r["paper_image_count"]),
            release_image_count=_optional_int(r["release_image_count"]),
        )
        for r in _csv_rows("concepts.csv")
    )


@cache
def concept_by_name() -> dict[str, Concept]:
    return {c.concept: c for c in concepts()}


@cache
def language_pack(code: str) -> LanguagePack:
    language = Language(**json.loads(_reference_file("i18n", code, "language.json")))
    country_names = {
        r["country"]: CountryName(language_code=code, **r) for r in _csv_rows("i18n", code, "countries.csv")
    }
    if code == ENGLISH:
        entries = {
            c.concept_id: ConceptTranslation(
                concept_id=c.concept_id,
                concept=c.concept,
                language_code=code,
                text=c.concept,
                review_status="source",
            )
            for c in concepts()
        }
    else:
        entries = {
            # The CSV's review_status is text until the model validates it against its Literal.
            int(r["concept_id"]): ConceptTranslation.model_validate(
                {
                    "concept_id": int(r["concept_id"]),
                    "concept": r["concept"],
                    "language_code": code,
                    "text": r["text"],
                    "descriptor_template": r["descriptor_template"] or None,
                    "review_status": r["review_status"],
                }
            )
            for r in _csv_rows("i18n", code, "concepts.csv")
        }
    return LanguagePack(language=language, concepts=entries, countries=country_names)


@cache
def mixcube() -> MixCubeReference:
    return MixCubeReference(**json.loads(_reference_file("mixcube.json")))
