"""The bias audit's prompt sets (the Multilingual CLIP bias audit, App. B: communion, agency, crime vs non-human)
as a reference pack holds them (`audit_prompts.json`, read and checked with the pack: `data/bias_audit_prompt_sets.py`),
and the drafting interface for languages whose prompts are not written yet.

Backends that draft prompts (`PromptDrafter`): the pack's own file (`ShippedPromptDraftsConfig`, the embedded
default, offline) and Gemini (evaluation/mixcube/bias_audit/drafts_gemini.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import pyarrow as pa

from data.bias_audit_prompt_sets import (
    ENGLISH,
    ENGLISH_FALLBACK,
    PROMPT_SETS,
    REVIEW_AWAITING,
    AuditPrompts,
    LanguageSet,
    PromptSpec,
)
from data.clients.gemini import failures_table
from data.stage import BackendConfig

__all__ = [
    "ENGLISH",
    "ENGLISH_FALLBACK",
    "PROMPT_SETS",
    "REVIEW_AWAITING",
    "AuditPrompts",
    "LanguageSet",
    "PromptSpec",
]


def write_audit_prompts(prompts: AuditPrompts, path: str | Path) -> None:
    """Write prompts (e.g. with new drafts) in a pack's file form (`audit_prompts.json`), for review."""
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
                "(evaluation/mixcube/bias_audit/drafts_gemini.py)"
            )
        return DraftOutput(prompts, failures_table([]))
