"""Translation stage: each concept in the native language of each build country, with its RQ3 descriptor form.

Embedded default: the build's reference pack (`i18n/<language>/concepts.csv`; the shipped pack's rows all
await native review). Production: Gemini (constraints of the 3XCM paper, App. R), used by default only where the
pack has no translation (new, operator-accepted concepts); it can also be compared with, or replace, the pack's
table, and every difference is written down as a TRANSLATION_CONFLICTS row.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Annotated, Literal, Protocol

import pyarrow as pa
from pydantic import BaseModel, Field

from data.clients.gemini import GeminiClient, GeminiSettings, failure_row, failures_table
from data.clients.openai_compatible import LanguageModelSettings, OpenAICompatibleSettings, structured_client
from data.reference import ENGLISH, ConceptTranslation, CountryName, Language, ReferencePack
from data.reference_values import check_concept_template, text_problem
from data.schemas import (
    TRANSLATION_CONFLICTS,
    TRANSLATIONS,
    LlmFailureRow,
    TranslationConflictRow,
    TranslationRow,
    empty,
    from_rows,
)
from data.stage import BackendConfig

STAGE = "translations"
#: review_status of a Gemini translation; it still awaits a native speaker like the shipped rows.
REVIEW_MACHINE = "machine_translated"
#: review_status of a Gemini translation that replaced a different shipped one (policy "replace").
REVIEW_MACHINE_REPLACED = "machine_translated_replaced_shipped"
#: source of an English row of a concept outside the shipped list: the concept name is the English text.
SOURCE_CONCEPT_LIST = "concept_list"


class ShippedTranslationsConfig(BackendConfig["Translator"]):
    backend: Literal["shipped"] = "shipped"

    def build(self) -> ShippedTranslator:
        return ShippedTranslator()

    def complete_pack(
        self,
        pack: ReferencePack,
        location: str,
        languages: list[str],
        concept_ids: Collection[int] | None,
        cache_dir: str | None,
    ) -> bool:
        """The pack's own rows only: nothing is drafted (False), so what the pack lacks is refused before a build."""
        return False


class ModelTranslationsConfig(BackendConfig["Translator"]):
    """A model drafts translations: Gemini (`backend: gemini`) or any OpenAI-compatible endpoint (`backend:
    openai`, a local vLLM, llama.cpp or Ollama server), with the same request (App. R) and the same checks."""

    batch_size: int = Field(default=40, ge=1, le=200, description="Concepts per request.")
    shipped_policy: Literal["fill_missing", "compare", "replace"] = Field(
        default="fill_missing",
        description=(
            "fill_missing: shipped rows as they are, Gemini only for concepts without one. "
            "compare: translate everything, keep shipped rows, record differences. "
            "replace: use Gemini's rows, record the shipped ones they replace."
        ),
    )

    @property
    def llm(self) -> LanguageModelSettings:
        raise NotImplementedError

    def build(self) -> GeminiTranslator:
        return GeminiTranslator(self)

    def complete_pack(
        self,
        pack: ReferencePack,
        location: str,
        languages: list[str],
        concept_ids: Collection[int] | None,
        cache_dir: str | None,
    ) -> bool:
        """Draft what `pack` lacks in `languages` (the language, its country names, the translations of
        `concept_ids`), marked awaiting native review, into the pack at `location` (a build's copy, never its
        source); True: drafted."""
        from collectors.pack_drafts import draft_language  # drafting builds on this module
        from data.reference import load_pack
        from data.reference_write import add_language_drafts

        translator = GeminiTranslator(self)
        for code in languages:
            current = load_pack(location)
            drafts = draft_language(current, code, translator, cache_dir, concept_ids)
            add_language_drafts(current.files, code, drafts.language, drafts.country_names, drafts.translations)
        return True


class GeminiTranslationsConfig(ModelTranslationsConfig):
    backend: Literal["gemini"] = "gemini"
    gemini: GeminiSettings = Field(default_factory=GeminiSettings)

    @property
    def llm(self) -> LanguageModelSettings:
        return self.gemini


class OpenAITranslationsConfig(ModelTranslationsConfig):
    backend: Literal["openai"] = "openai"
    openai: OpenAICompatibleSettings

    @property
    def llm(self) -> LanguageModelSettings:
        return self.openai


TranslationsConfig = Annotated[
    ShippedTranslationsConfig | GeminiTranslationsConfig | OpenAITranslationsConfig, Field(discriminator="backend")
]


@dataclass(frozen=True)
class TranslationOutput:
    translations: pa.Table  # TRANSLATIONS; a pair whose request failed is absent
    conflicts: pa.Table  # TRANSLATION_CONFLICTS
    failures: pa.Table  # LLM_FAILURES


class MissingTranslationError(LookupError):
    pass


class Translator(Protocol):
    def run(
        self, pack: ReferencePack, concepts: list[tuple[int, str]], language_codes: list[str], cache_dir: str | None
    ) -> TranslationOutput: ...


@dataclass(frozen=True)
class NewTranslations:
    """Gemini's translations of concepts a language lacks: (concept_id, concept, text, descriptor_template)."""

    rows: list[tuple[int, str, str, str]]
    failures: list[LlmFailureRow]


def _row(entry: ConceptTranslation, default_template: str, source: str) -> TranslationRow:
    return {
        "concept_id": entry.concept_id,
        "language_code": entry.language_code,
        "text": entry.text,
        "descriptor_template": entry.descriptor_template or default_template,
        "review_status": entry.review_status,
        "source": source,
    }


class ShippedTranslator:
    source = "shipped"

    def translate(self, pack: ReferencePack, concept_ids: list[int], language_code: str) -> list[ConceptTranslation]:
        language = pack.language_pack(language_code)
        missing = [cid for cid in concept_ids if cid not in language.concepts]
        if missing:
            raise MissingTranslationError(
                f"no {language_code} translation in pack {pack.info.name} for concept ids {missing}; "
                "use a translation backend that can translate new concepts (backend: gemini)"
            )
        return [language.concepts[cid] for cid in concept_ids]

    def run(
        self, pack: ReferencePack, concepts: list[tuple[int, str]], language_codes: list[str], cache_dir: str | None
    ) -> TranslationOutput:
        rows = []
        for code in sorted(set(language_codes)):
            default_template = pack.language_pack(code).language.template
            rows += [
                _row(e, default_template, self.source) for e in self.translate(pack, [c for c, _ in concepts], code)
            ]
        return TranslationOutput(from_rows(rows, TRANSLATIONS), empty(TRANSLATION_CONFLICTS), failures_table([]))


# -- Gemini ------------------------------------------------------------------------------------------------------
class TranslatedConcept(BaseModel):
    concept_id: int = Field(description="The concept_id of the input concept, unchanged.")
    text: str = Field(description="The concept in the target language: a short noun phrase, as typed in a search.")
    descriptor_template: str = Field(
        description="'{concept} of {country}' in the target language, with the {country} placeholder once."
    )


class TranslationBatch(BaseModel):
    translations: list[TranslatedConcept]


def check_descriptor_template(template: str) -> str:
    """An RQ3 template of one concept: {country} exactly once and {concept} at most once (a per-concept template
    may write the concept out), bare, no other fields: the pack's own rule (`data/reference_values.py`)."""
    return check_concept_template(template)


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", " ".join(text.split()))


def translation_prompt(
    language: Language,
    countries: list[str],
    country_forms: dict[str, CountryName],
    concepts: list[tuple[int, str]],
) -> str:
    """The translation request; role, strict constraints and the Nigeria mapping are those of 3XCM paper App. R
    (Figure 22), with its task rewritten from sentence translation to concept + descriptor translation.
    `countries`: the pack's countries of this language; `country_forms`: every country's form in the template."""
    code = language.code
    # App. R maps Nigeria to Yoruba explicitly (its role line says EN-NG); our own countries are listed after it.
    mapping = "".join(f"    *   {name}: {language.name}\n" for name in countries if name != "Nigeria")
    forms = "\n".join(f"    *   {name}: {entry.descriptor_country}" for name, entry in sorted(country_forms.items()))
    data = {
        "target_country": countries,
        "target_language": f"{language.name} ({language.native_name})",
        "language_code": code,
        "concepts": [{"concept_id": cid, "concept": name} for cid, name in concepts],
    }
    return (
        # App. R, Figure 22: role line (our one language and its countries in place of the paper's 16).
        "**Role:** You are a Senior Computational Linguist and Polyglot with native-level fluency in "
        f"{language.name} ({language.native_name}), the primary language of the following countries: "
        f"{', '.join(countries)}.\n\n"
        "**Task:**\n"
        "1. **Translate:** Translate each English concept in `concepts` into the native language of the "
        f'"Target Country" ({language.name}). Each concept is a basic-level, culturally-inclusive category used '
        "as an image-search query (e.g. train, food, wedding): give the short everyday noun phrase a native "
        "speaker would type, not a definition."
        + (
            " Where the countries word it differently, use the form common to all of them."
            if len(countries) > 1
            else ""
        )
        + "\n"
        "2. **Cultural descriptor:** For each concept also write `descriptor_template`: the phrase "
        f'"{{concept}} of {{country}}" (e.g. "train of Japan") as a native speaker of {language.name} would say it, '
        "with the placeholder {country} where the country goes and {concept} where your translated concept goes. "
        f"The usual form in {language.name} is {json.dumps(language.descriptor_template, ensure_ascii=False)}; "
        "keep it unless this concept needs another form (agreement, classifier, case); you may then write the "
        "concept out inside the template instead of {concept}. {country} must appear exactly once. It is filled "
        f"with these forms of the country names:\n{forms}\n\n"
        "**Strict Constraints:**\n"
        # App. R, Figure 22, constraints 1-3 verbatim; the line after 2 is ours, for concepts rather than sentences.
        "1. **Grammar & Fluency:** Adjust the sentence structure, classifiers (e.g., Thai 'khan'), and gender "
        "markers to ensure the sentence is natural for a native speaker in that country.\n"
        '2. **No Stereotypes:** Keep the sentences "Culture Agnostic." Do not add descriptors like "high-speed" '
        'for China or "vintage" for India. Only add the country name/adjective.\n'
        "   Translate the concept itself; never narrow it to one culture's instance or add cultural detail "
        "(e.g. food is not one national dish).\n"
        "3. **Target Language Mapping:**\n"
        "    *   Nigeria: Yoruba\n"
        f"{mapping}\n"
        "**Input Data:**\n"
        "```json\n"
        f"{json.dumps(data, ensure_ascii=False)}\n"
        "```\n\n"
        "**Output Format:**\n"
        "Return ONLY a valid JSON object following the response schema: "
        '{"translations": [{"concept_id": <id>, "text": "...", "descriptor_template": "..."}]}, '
        "with every input concept_id exactly once and no other ids."
    )


def _batch_validator(concept_ids: list[int]) -> Callable[[TranslationBatch], None]:
    def validate(answer: TranslationBatch) -> None:
        ids = [item.concept_id for item in answer.translations]
        repeated = sorted({i for i in ids if ids.count(i) > 1})
        missing = sorted(set(concept_ids) - set(ids))
        extra = sorted(set(ids) - set(concept_ids))
        if repeated or missing or extra:
            raise ValueError(f"concept ids: missing {missing}, not asked for {extra}, repeated {repeated}")
        for item in answer.translations:
            problem = text_problem(item.text)  # what a pack may hold, checked before the draft is kept
            if problem is not None:
                raise ValueError(f"concept {item.concept_id}: text {problem}")
            try:
                check_descriptor_template(item.descriptor_template)
            except ValueError as exc:
                raise ValueError(f"concept {item.concept_id}: {exc}") from None

    return validate


class GeminiTranslator:
    """Translations drafted by a model: Gemini's API or an OpenAI-compatible endpoint (`config.llm`)."""

    def __init__(self, config: ModelTranslationsConfig) -> None:
        self.config = config
        self.source = f"{config.backend}:{config.llm.model}"

    @property
    def model(self) -> str:
        return self.config.llm.model

    @property
    def endpoint(self) -> str:
        """Where the requests go, as an error line names it (no credentials)."""
        llm = self.config.llm
        if isinstance(llm, OpenAICompatibleSettings):
            return llm.endpoint
        return llm.base_url or "the Gemini API (generativelanguage.googleapis.com)"

    def client(self, cache_dir: str | None) -> GeminiClient:
        return structured_client(self.config.llm, cache_dir)

    def ask(
        self,
        client: GeminiClient,
        language: Language,
        countries: list[str],
        country_forms: dict[str, CountryName],
        concepts: list[tuple[int, str]],
    ) -> tuple[dict[int, TranslatedConcept], list[LlmFailureRow]]:
        """Gemini's answers for `concepts` in `language`, batch by batch, and a failure row per failed batch."""
        answered: dict[int, TranslatedConcept] = {}
        failures: list[LlmFailureRow] = []
        for start in range(0, len(concepts), self.config.batch_size):
            batch = concepts[start : start + self.config.batch_size]
            ids = [cid for cid, _ in batch]
            request_key = f"{language.code}:{','.join(map(str, ids))}"
            answer = client.generate_structured(
                [translation_prompt(language, countries, country_forms, batch)],
                TranslationBatch,
                _batch_validator(ids),
                request_key,
            )
            if answer.ok:
                assert answer.value is not None  # an ok structured answer holds its validated value
                answered.update({item.concept_id: item for item in answer.value.translations})
            else:
                failures.append(failure_row(STAGE, request_key, self.model, answer))
        return answered, failures

    def translate_new(
        self,
        pack: ReferencePack,
        language: Language,
        country_forms: dict[str, CountryName],
        concepts: list[tuple[int, str]],
        cache_dir: str | None,
    ) -> NewTranslations:
        """Drafts for concepts `language` lacks (a pack's new language included): `reference translate`."""
        countries = [c.name for c in pack.countries if language.code in c.language_codes]
        client = self.client(cache_dir)
        answered, failures = self.ask(client, language, countries, country_forms, concepts)
        rows = [
            (cid, name, _nfc(answered[cid].text), _nfc(answered[cid].descriptor_template))
            for cid, name in concepts
            if cid in answered
        ]
        return NewTranslations(rows, failures)

    def run(
        self, pack: ReferencePack, concepts: list[tuple[int, str]], language_codes: list[str], cache_dir: str | None
    ) -> TranslationOutput:
        client = self.client(cache_dir)
        rows: list[TranslationRow] = []
        conflicts: list[TranslationConflictRow] = []
        failures: list[LlmFailureRow] = []
        for code in sorted(set(language_codes)):
            language_pack = pack.language_pack(code)
            default_template = language_pack.language.template
            if code == ENGLISH:
                # English is the source language of the concept list: nothing to translate.
                rows += [
                    _row(language_pack.concepts[cid], default_template, "shipped")
                    if cid in language_pack.concepts
                    else _row(
                        ConceptTranslation(
                            concept_id=cid, concept=name, language_code=code, text=name, review_status="source"
                        ),
                        default_template,
                        SOURCE_CONCEPT_LIST,
                    )
                    for cid, name in concepts
                ]
                continue
            policy = self.config.shipped_policy
            to_ask = [
                (cid, name) for cid, name in concepts if policy != "fill_missing" or cid not in language_pack.concepts
            ]
            countries = [c.name for c in pack.countries if code in c.language_codes]
            answered, asked_failures = self.ask(
                client, language_pack.language, countries, language_pack.countries, to_ask
            )
            failures += asked_failures
            for cid, _ in concepts:
                shipped = language_pack.concepts.get(cid)
                proposed = answered.get(cid)
                row, conflict = self._resolve(code, cid, shipped, proposed, default_template)
                rows += [row] if row else []
                conflicts += [conflict] if conflict else []
        return TranslationOutput(
            from_rows(rows, TRANSLATIONS) if rows else empty(TRANSLATIONS),
            from_rows(conflicts, TRANSLATION_CONFLICTS) if conflicts else empty(TRANSLATION_CONFLICTS),
            failures_table(failures),
        )

    def _resolve(
        self,
        code: str,
        concept_id: int,
        shipped: ConceptTranslation | None,
        proposed: TranslatedConcept | None,
        default_template: str,
    ) -> tuple[TranslationRow | None, TranslationConflictRow | None]:
        """The row to use for one pair, and the conflict row when Gemini and the shipped table disagree."""
        gemini_row: TranslationRow | None = None
        if proposed is not None:
            gemini_row = {
                "concept_id": concept_id,
                "language_code": code,
                "text": _nfc(proposed.text),
                "descriptor_template": _nfc(proposed.descriptor_template),
                "review_status": REVIEW_MACHINE,
                "source": self.source,
            }
        if shipped is None:
            return gemini_row, None  # None when the request failed: the pair is absent, the failure is a row
        shipped_row = _row(shipped, default_template, "shipped")
        if gemini_row is None:
            return shipped_row, None  # nothing asked (fill_missing) or the request failed: the shipped row stands
        differs = (gemini_row["text"], gemini_row["descriptor_template"]) != (
            _nfc(shipped_row["text"]),
            _nfc(shipped_row["descriptor_template"]),
        )
        if not differs:
            return shipped_row, None  # agreement: keep the shipped row and its (more informative) review status
        replace = self.config.shipped_policy == "replace"
        conflict: TranslationConflictRow = {
            "concept_id": concept_id,
            "language_code": code,
            "shipped_text": shipped_row["text"],
            "proposed_text": gemini_row["text"],
            "shipped_template": shipped_row["descriptor_template"],
            "proposed_template": gemini_row["descriptor_template"],
            "source": self.source,
            "resolution": "replaced_shipped" if replace else "kept_shipped",
        }
        if replace:
            return {**gemini_row, "review_status": REVIEW_MACHINE_REPLACED}, conflict
        return shipped_row, conflict


def run_translations(
    config: ShippedTranslationsConfig | ModelTranslationsConfig,
    pack: ReferencePack,
    concepts: pa.Table,
    language_codes: list[str],
    cache_dir: str | None = None,
) -> TranslationOutput:
    """Translations of `concepts` (concept_id, concept) into every language; `cache_dir` holds model answers."""
    pairs = list(zip(concepts["concept_id"].to_pylist(), concepts["concept"].to_pylist(), strict=True))
    return config.build().run(pack, pairs, list(language_codes), cache_dir)
