"""Seed 001's App. B prompt sets (communion, agency, crime vs non-human) as shipped reference data
(data/reference/audit_prompts.json), read and checked once per process, and the drafting interface for languages
whose prompts are not written yet.

Each language × set has a `review_status` (as the concept translations of data/reference/i18n): `source` for the
seed's own text (English, and its es/fr/pt communion translations), `awaiting_native_review` for a draft. Its
`origin` says where the text came from: `seed`, `draft` (written for culturebench), `gemini:<model>`, or
`english_fallback` (no text yet: the English is used, and the card says so).

Backends that draft prompts (`PromptDrafter`): the shipped file itself (`ShippedPromptDraftsConfig`, the embedded
default, offline) and Gemini (evaluation/audit_drafts_gemini.py).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Literal, Protocol

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, model_validator

from data.gemini import failures_table
from data.stage import BackendConfig

#: App. B's three sets, in its order; the English is the seed's.
PROMPT_SETS = ("communion", "agency", "crime")
ENGLISH = "en"
REVIEW_AWAITING: Literal["awaiting_native_review"] = "awaiting_native_review"
ENGLISH_FALLBACK = "english_fallback"
_FILE = ("reference", "audit_prompts.json")

Category = Literal["positive", "negative", "protected_class", "non_human", "criminal"]
#: Which categories each set may hold (App. B: antonym pairs for communion and agency; crime's three kinds).
_SET_CATEGORIES: dict[str, frozenset[str]] = {
    "communion": frozenset({"positive", "negative"}),
    "agency": frozenset({"positive", "negative"}),
    "crime": frozenset({"protected_class", "non_human", "criminal"}),
}


class PromptSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1, description="App. B's label (e.g. trustworthy, Black_Male, suspicious person).")
    category: Category
    en: str = Field(min_length=1, description="App. B's English prompt, verbatim.")


class LanguageSet(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    review_status: Literal["source", "awaiting_native_review", "native_reviewed"]
    origin: str = Field(min_length=1, description="seed | draft | gemini:<model> | english_fallback")
    texts: dict[str, str] = Field(description="prompt id -> text; empty for english_fallback")


class AuditPrompts(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    version: str
    description: str = ""
    sources: dict[str, str] = Field(default_factory=dict)
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
            if {s.category for s in specs} != _SET_CATEGORIES[name]:
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


def _file_text() -> str:
    return resources.files("data").joinpath(*_FILE).read_text(encoding="utf-8")


@cache
def load_audit_prompts() -> AuditPrompts:
    """The shipped prompt sets (data/reference/audit_prompts.json), validated."""
    return AuditPrompts.model_validate_json(_file_text())


def prompts_version(prompts: AuditPrompts | None = None) -> str:
    """The prompts' version and the sha256 prefix of their content, for a result's settings: a changed text
    changes it."""
    prompts = prompts or load_audit_prompts()
    digest = hashlib.sha256(prompts.to_json().encode("utf-8")).hexdigest()[:12]
    return f"{prompts.version}+{digest}"


def write_audit_prompts(prompts: AuditPrompts, path: str | Path) -> None:
    """Write prompts (e.g. with new drafts) in the shipped file's form, for review and shipping."""
    Path(path).write_text(prompts.to_json(), encoding="utf-8")


# -- drafting backends --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DraftOutput:
    prompts: AuditPrompts  # the input with the drafted language × sets replaced
    failures: pa.Table  # LLM_FAILURES: requests that never gave a usable draft (those sets keep their text)


class PromptDrafter(Protocol):
    def draft(self, prompts: AuditPrompts, languages: list[str], cache_dir: str | None) -> DraftOutput: ...


def to_draft(prompts: AuditPrompts, languages: list[str], policy: str) -> list[tuple[str, str]]:
    """The (language, set) pairs a drafter writes: fill_missing, those without text (English fallback, or a
    language the file lacks); redraft, every one that is not the seed's own text."""
    pairs = []
    for code in dict.fromkeys(languages):
        if code == ENGLISH:
            continue
        for name in PROMPT_SETS:
            entry = prompts.translations.get(code, {}).get(name)
            missing = entry is None or entry.origin == ENGLISH_FALLBACK
            if missing or (policy == "redraft" and entry is not None and entry.review_status != "source"):
                pairs.append((code, name))
    return pairs


class ShippedPromptDraftsConfig(BackendConfig["PromptDrafter"]):
    """The embedded default: the shipped file as it is (offline); a language it lacks is an error."""

    backend: Literal["shipped"] = "shipped"

    def build(self) -> ShippedPromptDrafter:
        return ShippedPromptDrafter()


class ShippedPromptDrafter:
    def draft(self, prompts: AuditPrompts, languages: list[str], cache_dir: str | None = None) -> DraftOutput:
        unknown = [code for code in languages if code != ENGLISH and code not in prompts.translations]
        if unknown:
            raise KeyError(
                f"no shipped audit prompts for {unknown}; draft them with the gemini backend "
                "(evaluation/audit_drafts_gemini.py)"
            )
        return DraftOutput(prompts, failures_table([]))
