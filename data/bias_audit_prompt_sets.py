"""The bias audit's prompt sets as a reference pack holds them (`audit_prompts.json`): the Multilingual CLIP bias
audit's App. B sets (communion, agency, crime vs non-human), in English as the paper gives them, with translations
per language, each marked with its review status and where its text came from.

Each language x set has a `review_status` (as the concept translations of a pack's `i18n/`): `source` for the
paper's own text (English, and its es/fr/pt communion translations), `awaiting_native_review` for a draft. Its
`origin` says where the text came from: `seed`, `draft` (written for culturebench), `gemini:<model>`, or
`english_fallback` (no text yet: the English is used, and the card says so).
"""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from data.reference_values import Key, Prose, Text

#: App. B's three sets, in its order; the English is the paper's.
PROMPT_SETS = ("communion", "agency", "crime")
ENGLISH = "en"
REVIEW_AWAITING: Literal["awaiting_native_review"] = "awaiting_native_review"
ENGLISH_FALLBACK = "english_fallback"

Category = Literal["positive", "negative", "protected_class", "non_human", "criminal"]
#: Which categories each set may hold (App. B: antonym pairs for communion and agency; crime's three kinds).
SET_CATEGORIES: dict[str, frozenset[str]] = {
    "communion": frozenset({"positive", "negative"}),
    "agency": frozenset({"positive", "negative"}),
    "crime": frozenset({"protected_class", "non_human", "criminal"}),
}


class PromptSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(
        pattern=r"^[A-Za-z][A-Za-z0-9_ -]{0,63}$",
        description="App. B's label (e.g. trustworthy, Black_Male, suspicious person): a key of metrics and a card "
        "cell, so plain letters, digits, '_', '-' and spaces.",
    )
    category: Category
    en: Text = Field(description="App. B's English prompt, verbatim.")


class LanguageSet(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    review_status: Literal["source", "awaiting_native_review", "native_reviewed"]
    origin: str = Field(
        pattern=r"^[a-z_]+(:[A-Za-z0-9._/-]{1,200})?$", description="seed | draft | gemini:<model> | english_fallback"
    )
    texts: dict[str, Text] = Field(description="prompt id -> text; empty for english_fallback")


class AuditPrompts(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    version: str = Field(pattern=r"^[0-9A-Za-z.+-]{1,40}$")
    description: Prose = ""
    sources: dict[Key, Prose] = Field(default_factory=dict)
    sets: dict[str, list[PromptSpec]]
    translations: dict[str, dict[str, LanguageSet]]

    @model_validator(mode="after")
    def _complete(self) -> AuditPrompts:
        if tuple(self.sets) != PROMPT_SETS:
            raise ValueError(f"prompt sets {list(self.sets)} != {list(PROMPT_SETS)}")
        for name, specs in self.sets.items():
            ids = [s.id for s in specs]
            if len(set(ids)) != len(ids):
                raise ValueError(f"{name}: repeated prompt ids")
            if {s.category for s in specs} != SET_CATEGORIES[name]:
                raise ValueError(f"{name}: categories {sorted({s.category for s in specs})}")
        for code, sets in self.translations.items():
            if code == ENGLISH or tuple(sets) != PROMPT_SETS:
                raise ValueError(f"{code}: needs exactly the sets {list(PROMPT_SETS)} (English lives in `sets`)")
            for name, entry in sets.items():
                wanted = {s.id for s in self.sets[name]}
                empty = entry.origin == ENGLISH_FALLBACK and not entry.texts
                if not empty and set(entry.texts) != wanted:
                    raise ValueError(f"{code}/{name}: texts for {sorted(entry.texts)}, expected {sorted(wanted)}")
                if entry.origin == ENGLISH_FALLBACK and entry.review_status != REVIEW_AWAITING:
                    raise ValueError(f"{code}/{name}: an English fallback awaits review")
                if any(not text.strip() for text in entry.texts.values()):
                    raise ValueError(f"{code}/{name}: an empty prompt")
        return self

    @property
    def languages(self) -> list[str]:
        return [ENGLISH, *sorted(self.translations)]

    def ids(self, prompt_set: str) -> list[str]:
        return [s.id for s in self.sets[prompt_set]]

    def categories(self, prompt_set: str) -> list[str]:
        return [s.category for s in self.sets[prompt_set]]

    def entry(self, language: str, prompt_set: str) -> LanguageSet:
        if language == ENGLISH:
            return LanguageSet(review_status="source", origin="seed", texts={s.id: s.en for s in self.sets[prompt_set]})
        return self.translations[language][prompt_set]

    def texts(self, language: str, prompt_set: str) -> list[str]:
        """The set's prompts in `language`, in the set's order; the English where the language has none yet."""
        entry = self.entry(language, prompt_set)
        return [entry.texts.get(s.id, s.en) for s in self.sets[prompt_set]]

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), ensure_ascii=False, indent=2) + "\n"

    def version_key(self) -> str:
        """The prompts' version and the sha256 prefix of their content, for a result's settings: a changed text
        changes it."""
        digest = hashlib.sha256(self.to_json().encode("utf-8")).hexdigest()[:12]
        return f"{self.version}+{digest}"
