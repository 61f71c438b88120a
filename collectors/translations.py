"""Translation stage: each concept in the native language of each build country, with its RQ3 descriptor form.

Embedded default: the shipped tables in `data/reference/i18n/` (every row awaiting native review).
"""

from __future__ import annotations

from typing import Literal, Protocol

import pyarrow as pa
from pydantic import BaseModel, ConfigDict

from data import reference
from data.reference import ConceptTranslation
from data.schemas import TRANSLATIONS, from_rows
from data.stage import Registry


class ShippedTranslationsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: Literal["shipped"] = "shipped"


TranslationsConfig = ShippedTranslationsConfig


class MissingTranslationError(LookupError):
    pass


class Translator(Protocol):
    source: str

    def translate(self, concept_ids: list[int], language_code: str) -> list[ConceptTranslation]: ...


translators: Registry[Translator] = Registry("translations")


class ShippedTranslator:
    source = "shipped"

    def translate(self, concept_ids: list[int], language_code: str) -> list[ConceptTranslation]:
        pack = reference.language_pack(language_code)
        missing = [cid for cid in concept_ids if cid not in pack.concepts]
        if missing:
            raise MissingTranslationError(
                f"no shipped {language_code} translation for concept ids {missing}; "
                "use a translation backend that can translate new concepts"
            )
        return [pack.concepts[cid] for cid in concept_ids]


@translators.register("shipped")
def _shipped(config: ShippedTranslationsConfig) -> Translator:
    return ShippedTranslator()


def run_translations(config: TranslationsConfig, concepts: pa.Table, language_codes: list[str]) -> pa.Table:
    translator = translators.build(config)
    concept_ids = concepts["concept_id"].to_pylist()
    rows = []
    for code in sorted(set(language_codes)):
        default_template = reference.language_pack(code).language.descriptor_template
        for entry in translator.translate(concept_ids, code):
            rows.append(
                {
                    "concept_id": entry.concept_id,
                    "language_code": code,
                    "text": entry.text,
                    "descriptor_template": entry.descriptor_template or default_template,
                    "review_status": entry.review_status,
                    "source": translator.source,
                }
            )
    return from_rows(rows, TRANSLATIONS)
