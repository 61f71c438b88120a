"""The records of a reference pack (countries, concepts, languages, MixCuBe's cultures) and the pack itself.

A `ReferencePack` is what a build is made for and what a release carries: every stage that needs a country, a
language or a concept asks the pack the build was given, never package data. `data/reference.py` loads one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from data.bias_audit_prompt_sets import AuditPrompts
from data.reference_files import AUDIT_PROMPTS_FILE, MIXCUBE_FILE, PackError, PackFiles
from data.reference_values import (
    IdPart,
    Key,
    Name,
    Prose,
    Text,
    check_concept_template,
    check_fields,
    check_language_template,
    template_fields,
)

REVIEW_AWAITING: Literal["awaiting_native_review"] = "awaiting_native_review"
ENGLISH = "en"
#: The region of a country outside the pack (`ReferencePack.region_of`).
UNKNOWN_REGION = "unknown"
#: What a translation's `review_status` may be: a draft awaits a native speaker; `source` is the source language.
#: App. B.1's inpainting prompts: the ethnicity's name goes in once.
INPAINTING_TEMPLATE = {"ethnicity": (1, 1)}
#: Where an entry came from: CLDR's data (`cldr`), a model's draft (`model`, or `model:<id>`), a filled sheet
#: (`sheet`), a native reviewer's correction (`review`), written by hand in the file (`hand`). Packs written before it
#: existed record none.
Origin = Annotated[str, Field(pattern=r"^(cldr|sheet|hand|review|model(:[A-Za-z0-9._/:-]{1,120})?)$")]
ReviewStatus = Literal["awaiting_native_review", "native_reviewed", "source"]


class DemoSelection(BaseModel):
    """What `culturebench build 3xcm --demo` draws for this pack: a few concepts, and its countries."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    concepts: list[str] = Field(min_length=2, description="Concept names of the pack: a few are enough.")
    countries: list[str] | None = Field(default=None, description="Country names of the pack; None for all.")


class PackInfo(BaseModel):
    """`pack.json`: what the pack is, under which licence, and where its data comes from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,99}$", description="A plain name: [a-z0-9][a-z0-9_.-]*.")
    version: str = Field(pattern=r"^\d+\.\d+\.\d+([-+][0-9A-Za-z.-]+)?$", description="A semantic version.")
    licence: Prose = Field(min_length=1)
    description: Prose = ""
    sources: dict[Key, Prose] = Field(default_factory=dict, description="What each part of the pack comes from.")
    demo: DemoSelection | None = Field(
        default=None,
        description="The demo build's concepts and countries (default: its first 4 concepts, all countries).",
    )


class SpokenLanguage(BaseModel):
    """One language a country's queries are written in: a row of `countries.csv` (a country of several languages
    has one row per language, the first its primary)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    code: str
    name: Name
    group: str
    ddg_region: str


class Country(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Name = Field(description="Country name exactly as in the image metadata (e.g. 'UK', 'USA').")
    iso2: str = Field(pattern=r"^[A-Z]{2}$", description="ISO 3166-1 alpha-2 code.")
    slug: str = Field(
        pattern=r"^[a-z]+( [a-z]+)*$",
        description="The name in lower case, spaces kept, as in the authors' image ids (data/authors/xcm-bench.csv: "
        "'saudi arabia-0-1-eng'): {slug}-{concept_id}-{rank}-{eng|nav}.",
    )
    language_code: str
    language_name: Name
    language_group: str = Field(
        pattern=r"^[a-z]{2,3}(-[a-z0-9]{1,8})*$",
        description="Countries sharing a group share the query language: a language code, or one followed by a "
        "label of the pack's own (`en-aa`).",
    )
    ddg_region: str = Field(pattern=r"^[a-z]{2}-[a-z]{2,3}$", description="The search engine's region (locale).")
    region: Name = Field(
        description="World region in the sense of GlobalRG (its §1 and §3, Table 1), the culture unit of its "
        "region-level diversity@k (§3.2); not `ddg_region`, the search engine's locale.",
    )

    spoken: tuple[SpokenLanguage, ...] = Field(
        default=(),
        description="Every language of the country, the primary (the fields above) first; a country of one language "
        "has just that one.",
    )

    @property
    def languages(self) -> tuple[SpokenLanguage, ...]:
        primary = SpokenLanguage(
            code=self.language_code, name=self.language_name, group=self.language_group, ddg_region=self.ddg_region
        )
        return self.spoken or (primary,)

    @property
    def language_codes(self) -> list[str]:
        """The languages the country's queries are written in, its primary first."""
        return [language.code for language in self.languages]

    @property
    def language_groups(self) -> list[str]:
        """The language groups of its languages (3XCM §3.2: a candidate's country is in the query's language group
        when any of its languages is in it; docs/reference-packs.md, "Countries of several languages")."""
        return list(dict.fromkeys(language.group for language in self.languages))

    def group_of(self, code: str) -> str:
        return next(language.group for language in self.languages if language.code == code)

    @model_validator(mode="after")
    def _slug_is_lower_name(self) -> Country:
        if self.slug != self.name.lower():
            raise ValueError(f"slug {self.slug!r} is not the lower-cased name {self.name.lower()!r}")
        return self


class Concept(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    concept_id: int = Field(ge=0, description="The authors' id (data/authors/xcm-bench.csv); accepted ones 1000+.")
    concept: str
    paper_image_count: int | None = Field(
        default=None, description="Image count in 3XCM paper, Table 10; None for the two concepts our copy lacks."
    )
    release_image_count: int | None = Field(
        default=None,
        description="Distinct image ids of this concept in the authors' release (data/authors/xcm-bench.csv).",
    )


class Language(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    code: str = Field(pattern=r"^[a-z]{2,3}(-[a-z0-9]{2,8})*$")
    name: Text
    native_name: Text
    descriptor_template: str | None = Field(
        description="RQ3 cultural-descriptor form, with {concept} and {country}; null until someone writes it "
        "(a build that queries in the language needs it)."
    )
    notes: Prose = ""
    review_status: ReviewStatus = Field(
        default=REVIEW_AWAITING, description="Of the names and the template: a draft until a native speaker reviews."
    )
    origin: Origin | None = None
    reviewers: int | None = Field(default=None, ge=1, le=1000)

    @field_validator("descriptor_template")
    @classmethod
    def _has_placeholders(cls, value: str | None) -> str | None:
        return None if value is None else check_language_template(value)

    @property
    def template(self) -> str:
        """The RQ3 template; a KeyError where the pack has none yet (a build's pre-flight names it first)."""
        if self.descriptor_template is None:
            raise KeyError(f"language {self.code!r} has no RQ3 descriptor template yet")
        return self.descriptor_template


class ConceptTranslation(BaseModel):
    model_config = ConfigDict(frozen=True)

    concept_id: int
    concept: str
    language_code: str
    text: Text
    descriptor_template: str | None = Field(
        default=None, description="Per-concept override of the language's RQ3 template (gender, noun class)."
    )
    review_status: ReviewStatus
    origin: Origin | None = None
    reviewers: int | None = Field(default=None, ge=1, le=1000)

    @field_validator("descriptor_template")
    @classmethod
    def _optional_template(cls, value: str | None) -> str | None:
        return check_concept_template(value) if value else None


class CountryName(BaseModel):
    model_config = ConfigDict(frozen=True)

    iso2: str
    country: str
    language_code: str
    name: Text = Field(description="Plain country name in the language (search queries).")
    descriptor_country: Text = Field(description="Form substituted into {country} of the template.")
    review_status: ReviewStatus = Field(
        default=REVIEW_AWAITING, description="A draft until a native speaker reviews the name and its form."
    )
    origin: Origin | None = None
    reviewers: int | None = Field(default=None, ge=1, le=1000)


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
        template = entry.descriptor_template or self.language.template
        return template.format(concept=entry.text, country=self.countries[country].descriptor_country)


class MixCubeCulture(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Name
    iso2: str = Field(pattern=r"^[A-Z]{2}$")
    adjective: Name = Field(description="Value of the public dataset's `country` column.")
    label_aliases: list[Name] = Field(
        description="Country Identification's accepted answers besides `name`, as App. A.5 lists them (the "
        "paper's; empty where it gives none)."
    )
    resource_level: Literal["low", "medium", "high"]
    our_aliases: list[Name] = Field(
        default_factory=list,
        description="Further accepted answers of our own, not the paper's: scored apart, as "
        "`accuracy_with_our_aliases` (evaluation/mixcube/task.py). Absent in packs written before it existed.",
    )


class MixCubeEthnicity(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    label: IdPart = Field(description="Value of the public dataset's `ethnicity` column (part of sample ids).")
    prompt_name: Name = Field(description="Text put into the {Ethnicity} slot of the App. B.1 prompts.")


class MixCubeReference(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    cultures: list[MixCubeCulture]
    categories: list[IdPart] = Field(description="MixCuBe's categories (part of sample ids: `demo-kr-food-00`).")
    ethnicities: list[MixCubeEthnicity]
    original_label: IdPart
    inpainting_prompts: dict[str, str] = Field(description="App. B.1's prompts: text with {ethnicity} once, bare.")
    tailored_prompt_examples: list[Text]
    evaluation_prompts: dict[str, Text]
    food_label_examples: dict[Name, Text]
    originals_per_culture_category: int = Field(ge=1, le=100_000)
    sources: dict[Key, Prose]

    @model_validator(mode="after")
    def _prompts_cover_categories(self) -> MixCubeReference:
        for table in (self.inpainting_prompts, self.evaluation_prompts):
            if set(table) != set(self.categories):
                raise ValueError(f"prompt table keys {sorted(table)} != categories {self.categories}")
        for category, template in self.inpainting_prompts.items():
            try:
                check_fields(template, INPAINTING_TEMPLATE)
            except ValueError as exc:
                raise ValueError(f"inpainting prompt of {category!r}: {exc}") from None
        for template in self.evaluation_prompts.values():
            if template_fields(template):
                raise ValueError(f"evaluation prompt {template!r} has a placeholder; it is sent as written")
        for what, values in (
            ("culture names", [c.name for c in self.cultures]),
            ("culture codes", [c.iso2 for c in self.cultures]),
            ("culture adjectives", [c.adjective for c in self.cultures]),
            ("categories", self.categories),
            ("ethnicity labels", [e.label for e in self.ethnicities]),
        ):
            repeated = sorted({v for v in values if values.count(v) > 1})
            if repeated:
                raise ValueError(f"{what} repeat: {repeated}")
        if self.original_label in {e.label for e in self.ethnicities}:
            raise ValueError(f"original_label {self.original_label!r} is also an ethnicity label")
        return self


@dataclass(frozen=True)
class ReferencePack:
    """A checked reference pack: what it is (`info`), its tables, and the bytes it was read from (`files`), which a
    release copies into its `reference/` folder."""

    info: PackInfo
    countries: tuple[Country, ...]
    concepts: tuple[Concept, ...]
    languages: Mapping[str, LanguagePack]
    mixcube_reference: MixCubeReference | None
    audit_prompts: AuditPrompts | None
    files: PackFiles = field(repr=False, compare=False)
    default_digest: str = field(default="", repr=False, compare=False)

    @property
    def location(self) -> str:
        return self.files.location

    @cached_property
    def digest(self) -> str:
        """sha256 over every file's name and content: the pack's identity, wherever it lies."""
        return self.files.digest()

    @property
    def is_default(self) -> bool:
        """Whether this is the shipped default pack, byte for byte (a copy edited by hand is not)."""
        return self.digest == self.default_digest

    @cached_property
    def _country_index(self) -> dict[str, Country]:
        return {c.name: c for c in self.countries}

    def country_by_name(self) -> dict[str, Country]:
        return self._country_index

    def region_of(self, country: str) -> str:
        """A country's region by its exact name; `UNKNOWN_REGION` for one outside the pack."""
        known = self._country_index.get(country)
        return known.region if known is not None else UNKNOWN_REGION

    def resolve_country(self, name: str) -> Country:
        """Find a country by its name, slug or ISO code (case-insensitive). The slug's old form, with `_` for the
        space (`saudi_arabia`, used by releases before the authors' ids were adopted), is still accepted."""
        key = " ".join(name.strip().lower().replace("_", " ").split())
        for country in self.countries:
            if key in (country.name.lower(), country.slug, country.iso2.lower()):
                return country
        raise KeyError(f"unknown country {name!r} in pack {self.info.name}; known: {[c.name for c in self.countries]}")

    def country_names(self, items: list[str]) -> list[str]:
        """Canonical names of countries given by name, slug or ISO code; an unknown one is a ValueError (for
        pydantic validators, which report it field by field)."""
        names = []
        for item in items:
            try:
                names.append(self.resolve_country(item).name)
            except KeyError as exc:
                raise ValueError(str(exc.args[0])) from None
        return names

    @cached_property
    def _concept_index(self) -> dict[str, Concept]:
        return {c.concept: c for c in self.concepts}

    def concept_by_name(self) -> dict[str, Concept]:
        return self._concept_index

    def language_pack(self, code: str) -> LanguagePack:
        try:
            return self.languages[code]
        except KeyError:
            raise KeyError(
                f"pack {self.info.name} ({self.location}) has no language {code!r}: add i18n/{code}/ "
                "(`culturebench reference translate` drafts it)"
            ) from None

    def mixcube(self) -> MixCubeReference:
        if self.mixcube_reference is None:
            raise PackError(self.location, MIXCUBE_FILE, "", "missing: a MixCuBe build or evaluation needs it")
        return self.mixcube_reference

    def prompts(self) -> AuditPrompts:
        if self.audit_prompts is None:
            raise PackError(self.location, AUDIT_PROMPTS_FILE, "", "missing: the bias audit needs it")
        return self.audit_prompts

    @property
    def regions(self) -> list[str]:
        return sorted({c.region for c in self.countries})

    @property
    def language_codes(self) -> list[str]:
        """The countries' languages (every one of a country of several), in first-seen order."""
        return list(dict.fromkeys(code for c in self.countries for code in c.language_codes))

    def record(self) -> dict[str, object]:
        """What a release's manifest records of the pack (`data/publish/manifest.py` `PackRecord`)."""
        return {
            "name": self.info.name,
            "version": self.info.version,
            "licence": self.info.licence,
            "sha256": self.digest,
            "default": self.is_default,
            "countries": [c.name for c in self.countries],
            "languages": self.language_codes,
            "regions": self.regions,
        }

    def summary(self) -> str:
        """One line: what the pack holds."""
        drafts = sum(
            entry.review_status == REVIEW_AWAITING
            for pack in self.languages.values()
            for entry in pack.concepts.values()
        )
        parts = [
            f"{len(self.countries)} countries",
            f"{len(self.regions)} regions",
            f"{len(self.languages)} languages",
            f"{len(self.concepts)} concepts",
            f"{drafts} draft translations",
        ]
        if self.mixcube_reference is not None:
            parts.append(
                f"MixCuBe {len(self.mixcube_reference.cultures)} cultures x {len(self.mixcube_reference.ethnicities)} "
                "ethnicities"
            )
        if self.audit_prompts is not None:
            parts.append(f"audit prompts in {len(self.audit_prompts.languages)} languages")
        default = ", the shipped default" if self.is_default else ""
        return f"{self.info.name} {self.info.version}{default}: {', '.join(parts)} (sha256 {self.digest[:12]})"
