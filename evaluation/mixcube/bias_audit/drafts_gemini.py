"""Production backend drafting the Multilingual CLIP bias audit's App. B prompts in a language with Gemini (its
authors had GPT o3 translate their templates, §3.3 and §7): one structured request per language × prompt set, the
answer checked (every id once, no empty text), and each draft marked `awaiting_native_review` with origin
`gemini:<model>`. A request that never gives a usable answer is an LLM_FAILURES row, and that set keeps the text it
had."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from data.clients.gemini import GeminiClient, GeminiSettings, failure_row, failures_table
from data.reference_parse import language_names
from data.stage import BackendConfig
from evaluation.mixcube.bias_audit.prompts import (
    PROMPT_SETS,
    REVIEW_AWAITING,
    AuditPrompts,
    DraftOutput,
    LanguageSet,
    ShippedPromptDraftsConfig,
    to_draft,
)

STAGE = "audit prompts"


class GeminiPromptDraftsConfig(BackendConfig["GeminiPromptDrafter"]):
    backend: Literal["gemini"] = "gemini"
    gemini: GeminiSettings = Field(default_factory=GeminiSettings)
    policy: Literal["fill_missing", "redraft"] = Field(
        default="fill_missing",
        description="fill_missing: only sets without text (English fallback, or a new language). redraft: every "
        "set that is not the seed's own text.",
    )

    def build(self) -> GeminiPromptDrafter:
        return GeminiPromptDrafter(self)


PromptDraftsConfig = Annotated[ShippedPromptDraftsConfig | GeminiPromptDraftsConfig, Field(discriminator="backend")]


class DraftedPrompt(BaseModel):
    id: str = Field(description="The id of the input prompt, unchanged.")
    text: str = Field(description="The prompt in the target language.")


class DraftBatch(BaseModel):
    prompts: list[DraftedPrompt]


def _language_name(code: str) -> str:
    english, native = language_names(code)  # CLDR's names: the language need not be in any pack yet
    return f"{english} ({native})" if english != code else code


def draft_prompt(code: str, prompt_set: str, prompts: AuditPrompts) -> str:
    """The request: App. B's English prompts of one set, to be written in `code`."""
    name = _language_name(code)
    data = {
        "language_code": code,
        "prompt_set": prompt_set,
        "prompts": [{"id": s.id, "en": s.en} for s in prompts.sets[prompt_set]],
    }
    return (
        f"**Role:** You are a professional translator with native-level fluency in {name}.\n\n"
        "**Task:** Translate each English caption in `prompts` into "
        f"{name}. They are the prompt labels of a bias audit of multilingual vision-language models "
        "(Al Sahili et al., App. B): a model "
        "compares a photo with each caption, so each must read as a natural caption of a photo.\n\n"
        "**Strict Constraints:**\n"
        "1. Keep the frame 'a photo of ...' in every caption, worded the same way across the set.\n"
        "2. Translate the descriptor faithfully: do not soften, intensify or explain it; keep the positive and "
        "negative descriptors antonyms where the English pairs them (trustworthy / untrustworthy).\n"
        "3. Keep 'person' gender-neutral where the language allows; 'man' and 'woman' keep their gender.\n"
        "4. No added words, quotation marks or notes.\n\n"
        "**Input Data:**\n```json\n"
        f"{json.dumps(data, ensure_ascii=False)}\n```\n\n"
        "**Output Format:** Return ONLY a valid JSON object following the response schema: "
        '{"prompts": [{"id": "<id>", "text": "..."}]}, with every input id exactly once and no other ids.'
    )


def _validator(ids: list[str]) -> Callable[[DraftBatch], None]:
    def validate(answer: DraftBatch) -> None:
        got = [item.id for item in answer.prompts]
        if sorted(got) != sorted(ids):
            raise ValueError(
                f"prompt ids: missing {sorted(set(ids) - set(got))}, not asked for "
                f"{sorted(set(got) - set(ids))}, repeated {sorted({i for i in got if got.count(i) > 1})}"
            )
        empty = [item.id for item in answer.prompts if not item.text.strip()]
        if empty:
            raise ValueError(f"empty text for {empty}")

    return validate


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", " ".join(text.split()))


class GeminiPromptDrafter:
    def __init__(self, config: GeminiPromptDraftsConfig) -> None:
        self.config = config
        self.origin = f"gemini:{config.gemini.model}"

    def draft(self, prompts: AuditPrompts, languages: list[str], cache_dir: str | None = None) -> DraftOutput:
        client = GeminiClient(self.config.gemini, cache_dir=cache_dir)
        translations: dict[str, dict[str, LanguageSet]] = {
            code: dict(sets) for code, sets in prompts.translations.items()
        }
        failures = []
        drafted: dict[tuple[str, str], LanguageSet] = {}
        for code, prompt_set in to_draft(prompts, languages, self.config.policy):
            ids = prompts.ids(prompt_set)
            key = f"{code}:{prompt_set}"
            answer = client.generate_structured(
                [draft_prompt(code, prompt_set, prompts)], DraftBatch, _validator(ids), key
            )
            if not answer.ok:
                failures.append(failure_row(STAGE, key, self.config.gemini.model, answer))
                continue
            assert answer.value is not None  # an ok structured answer holds its validated value
            texts = {item.id: _nfc(item.text) for item in answer.value.prompts}
            drafted[(code, prompt_set)] = LanguageSet(
                review_status=REVIEW_AWAITING, origin=self.origin, texts={i: texts[i] for i in ids}
            )
        for (code, prompt_set), entry in drafted.items():
            translations.setdefault(code, {})[prompt_set] = entry
        # A new language is added only when all its sets were drafted (the file holds complete languages).
        complete = {
            code: {name: sets[name] for name in PROMPT_SETS}
            for code, sets in sorted(translations.items())
            if all(name in sets for name in PROMPT_SETS)
        }
        out = AuditPrompts.model_validate({**prompts.model_dump(), "translations": complete})
        return DraftOutput(out, failures_table(failures))
