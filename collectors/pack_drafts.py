"""Drafts of what a reference pack lacks for a language: the language itself, its country names and descriptor
forms, and its concept translations, each marked `awaiting_native_review`.

- The language's English and native names, and each country's plain name in the language, come from CLDR (Babel's
  locale data), the maintained list of names that native speakers review; they are data, not a model's guess.
- The RQ3 descriptor template, each country's form inside it, and the concept translations are drafted by a model
  (Gemini, or any OpenAI-compatible endpoint): the concepts with the translation stage's own request (3XCM paper
  App. R, `collectors/translations.py`), the template and country forms with the request below.
- Without a model (`drafter` None) only CLDR's part is written: the language's names with no template yet, and each
  country's CLDR name, which also stands as the draft of its form in the template (our reading: in most languages
  the plain name is the form; a native speaker corrects it where the language declines it). Nothing else is guessed.

`culturebench reference translate DIR --languages xx,yy` writes the drafts into a pack; a build whose translation
backend is Gemini drafts what its pack lacks into its workspace's copy of the pack before the first stage.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Protocol

from pydantic import BaseModel, Field

from data.clients.gemini import GeminiClient, failure_row
from data.reference import ENGLISH, REVIEW_AWAITING, ConceptTranslation, CountryName, Language, ReferencePack
from data.reference_parse import language_names
from data.reference_values import check_language_template, text_problem
from data.schemas import LlmFailureRow

STAGE = "reference_drafts"


class ConceptTranslator(Protocol):
    """What drafts concept translations for a language the pack may not hold yet (the translation stage's model
    translator: `collectors.translations.GeminiTranslator`), and the client and model its other requests use."""

    @property
    def model(self) -> str: ...

    def client(self, cache_dir: str | None) -> GeminiClient: ...

    def translate_new(
        self,
        pack: ReferencePack,
        language: Language,
        country_forms: dict[str, CountryName],
        concepts: list[tuple[int, str]],
        cache_dir: str | None,
    ) -> NewTranslations: ...


class NewTranslations(Protocol):
    @property
    def rows(self) -> list[tuple[int, str, str, str]]: ...  # (concept_id, concept, text, descriptor_template)

    @property
    def failures(self) -> list[LlmFailureRow]: ...


@dataclass
class LanguageDrafts:
    """What was drafted for one language; `language` is None when the pack already had it."""

    code: str
    language: Language | None = None
    country_names: list[CountryName] = field(default_factory=list)
    translations: list[ConceptTranslation] = field(default_factory=list)
    failures: list[LlmFailureRow] = field(default_factory=list)

    @property
    def count(self) -> int:
        return (self.language is not None) + len(self.country_names) + len(self.translations)


class CountryForm(BaseModel):
    iso2: str = Field(description="The country's ISO 3166-1 alpha-2 code, unchanged from the input.")
    descriptor_country: str = Field(
        description="The country's name as it stands in the place of {country} in descriptor_template."
    )


class LanguageForms(BaseModel):
    descriptor_template: str = Field(
        description="'{concept} of {country}' in the language, with {concept} and {country} once each."
    )
    countries: list[CountryForm]


def cldr_language(code: str, template: str | None = "{concept} of {country}") -> Language:
    """The language's names from CLDR; its template a placeholder until the forms request answers (None: none
    yet, for a person to write)."""
    english, native = language_names(code)
    drafted = "descriptor template drafted by a model" if template else "no descriptor template yet"
    return Language(
        code=code,
        name=english,
        native_name=native,
        descriptor_template=template,
        notes=f"Drafted by culturebench: names from CLDR, {drafted}; awaiting review.",
        origin="cldr" if template is None else None,
    )


def cldr_country_name(code: str, iso2: str) -> str | None:
    """The country's name in the language, from CLDR; None where CLDR has no locale or name for it."""
    from babel import Locale, UnknownLocaleError

    try:
        return Locale.parse(code.replace("-", "_")).territories.get(iso2)
    except (UnknownLocaleError, ValueError):
        return None


def forms_prompt(language: Language, countries: list[tuple[str, str, str]]) -> str:
    """The request for the RQ3 template and the countries' forms in it; role and constraints as App. R's."""
    data = {
        "target_language": f"{language.name} ({language.native_name})",
        "language_code": language.code,
        "countries": [{"iso2": iso2, "english_name": english, "name": name} for iso2, english, name in countries],
    }
    return (
        "**Role:** You are a Senior Computational Linguist and Polyglot with native-level fluency in "
        f"{language.name} ({language.native_name}).\n\n"
        "**Task:**\n"
        '1. Write `descriptor_template`: the phrase "{concept} of {country}" (e.g. "train of Japan") as a '
        f"native speaker of {language.name} would say it, with the placeholders {{concept}} and {{country}} once "
        "each.\n"
        "2. For each country in `countries`, write `descriptor_country`: the form of its name that stands in the "
        "place of {country} in your template (with the article, case or preposition contraction the language "
        "needs), keeping its `iso2`.\n\n"
        "**Strict Constraints:** keep the phrase culture agnostic: only the country's name, no added descriptors.\n\n"
        "**Input Data:**\n"
        "```json\n"
        f"{json.dumps(data, ensure_ascii=False)}\n"
        "```\n\n"
        "Return ONLY a JSON object following the response schema, with every input iso2 exactly once."
    )


def _forms_validator(codes: list[str]) -> Callable[[LanguageForms], None]:
    def validate(answer: LanguageForms) -> None:
        check_language_template(answer.descriptor_template)  # {concept} and {country} once each, bare
        got = [c.iso2 for c in answer.countries]
        if sorted(got) != sorted(codes):
            raise ValueError(f"countries: expected {sorted(codes)}, got {sorted(got)}")
        for country in answer.countries:  # what a pack may hold, checked before the draft is kept
            problem = text_problem(country.descriptor_country)
            if problem is not None:
                raise ValueError(f"countries: {country.iso2} descriptor_country {problem}")

    return validate


def cldr_drafts(pack: ReferencePack, code: str) -> LanguageDrafts:
    """What CLDR knows of `code` that the pack lacks: the language's names, and the countries' names (each also the
    draft of its form in the template); no network, no model."""
    drafts = LanguageDrafts(code)
    existing = pack.languages.get(code)
    if existing is None:
        drafts.language = cldr_language(code, template=None)
    have_names = existing.countries if existing is not None else {}
    for country in pack.countries:
        name = cldr_country_name(code, country.iso2) if country.name not in have_names else None
        if name and text_problem(name) is None:
            drafts.country_names.append(
                CountryName(
                    iso2=country.iso2,
                    country=country.name,
                    language_code=code,
                    name=name,
                    descriptor_country=name,
                    origin="cldr",
                )
            )
    return drafts


def draft_language(
    pack: ReferencePack,
    code: str,
    translator: ConceptTranslator | None,
    cache_dir: str | None = None,
    concept_ids: Collection[int] | None = None,
) -> LanguageDrafts:
    """Draft what `pack` lacks in `code`: the language, the countries' names and forms, the translations of the
    concepts (those of `concept_ids`, or all of the pack's), with `translator`'s model; CLDR's part only without
    one (`cldr_drafts`)."""
    if translator is None:
        return cldr_drafts(pack, code)
    drafts = LanguageDrafts(code)
    existing = pack.languages.get(code)
    language = existing.language if existing is not None else cldr_language(code)
    have_names = existing.countries if existing is not None else {}
    missing_countries = [c for c in pack.countries if c.name not in have_names]
    client = translator.client(cache_dir)
    model = translator.model
    if existing is None or missing_countries:
        rows = [(c.iso2, c.name, cldr_country_name(code, c.iso2) or c.name) for c in missing_countries]
        key = f"forms:{code}:{','.join(iso2 for iso2, _, _ in rows)}"
        answer = client.generate_structured(
            [forms_prompt(language, rows)], LanguageForms, _forms_validator([r[0] for r in rows]), key
        )
        if not answer.ok or answer.value is None:
            drafts.failures.append(failure_row(STAGE, key, model, answer))
            return drafts  # without a template and forms, nothing of this language can be drafted
        forms = {f.iso2: " ".join(f.descriptor_country.split()) for f in answer.value.countries}
        if existing is None:  # validated again, as a pack's language.json is (model_copy would not)
            language = Language.model_validate(
                {
                    **language.model_dump(),
                    "descriptor_template": answer.value.descriptor_template,
                    "origin": f"model:{model}",
                }
            )
            drafts.language = language
        drafts.country_names = [
            CountryName(
                iso2=iso2,
                country=english,
                language_code=code,
                name=name,
                descriptor_country=forms[iso2],
                origin=f"model:{model}",  # the name may be CLDR's, its form in the template is the model's
            )
            for iso2, english, name in rows
        ]
    if code == ENGLISH:
        return drafts  # English concepts are the pack's concept names
    have = existing.concepts if existing is not None else {}
    wanted = [
        (c.concept_id, c.concept)
        for c in pack.concepts
        if c.concept_id not in have and (concept_ids is None or c.concept_id in concept_ids)
    ]
    if not wanted:
        return drafts
    names = {**have_names, **{n.country: n for n in drafts.country_names}}
    output = translator.translate_new(pack, language, names, wanted, cache_dir)
    drafts.failures += output.failures
    drafts.translations = [
        ConceptTranslation(
            concept_id=cid,
            concept=concept,
            language_code=code,
            text=text,
            # The language's template is stored once; a concept keeps its own only where it differs.
            descriptor_template=template if template != language.descriptor_template else None,
            review_status=REVIEW_AWAITING,
            origin=f"model:{model}",
        )
        for cid, concept, text, template in output.rows
    ]
    return drafts
