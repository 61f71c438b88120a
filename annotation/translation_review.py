"""Native-speaker review of a reference pack's translations in Label Studio (`culturebench review translations`).

The 3XCM authors drafted their translations by machine and had native speakers review them (paper §3.2.1,
App. R). Here each draft entry of a language (`data/pack_entries.py`: a concept's text or template, a country's
name or its form in the template, the language's own name or RQ3 template) is one task of that language's project:
the reviewer sees the English source, what the entry is, the draft and an RQ3 query written with it, and accepts,
corrects (writing the text) or rejects it.

Collecting reads the project's export and decides each entry as the image reviews decide (`annotation/aggregate`):
a verdict wins with more than half of the votes cast, so a tie stays undecided; Fleiss' kappa is computed over the
entries every configured reviewer voted on. A "correct" verdict takes the corrected text that more than half of
the correcting reviewers wrote (our reading: the reviewers must agree on the text too; if they do not, the entry is
undecided, `corrections_differ`). An accepted or corrected entry becomes native-reviewed, with the number of
reviewers who voted; a rejected one stays a draft, listed for a new draft or a sheet.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from dataclasses import dataclass
from typing import Any, TypedDict

import pyarrow as pa

from annotation.aggregate import Agreement, Vote, decide, latest_per_annotator, parse_export
from annotation.label_configs import (
    GUIDELINES,
    SPECS,
    TRANSLATION_ACCEPT,
    TRANSLATION_CORRECT,
    TRANSLATION_REJECT,
)
from annotation.tasks import LabelStudioTask
from data.pack_entries import ENGLISH_TEMPLATE, EntryChange, PackEntry, pack_entries
from data.reference_models import ReferencePack
from data.reference_parse import language_names

SPEC = SPECS["translation_review"]
KIND = SPEC.kind

#: The columns of the decisions file `review translations --collect` writes.
DECISION_FIELDS = pa.schema(
    [
        pa.field("language", pa.string(), nullable=False),
        pa.field("file", pa.string(), nullable=False),
        pa.field("key", pa.string(), nullable=False),
        pa.field("status", pa.string(), nullable=False),  # decided, undecided, pending
        pa.field("decision", pa.string()),  # accept, correct, reject
        pa.field("reason", pa.string()),
        pa.field("value", pa.string()),  # what the entry holds now
        pa.field("votes", pa.string()),
        pa.field("reviewers", pa.int64(), nullable=False),
        pa.field("majority_share", pa.float64()),
    ]
)


def project_name(pack: ReferencePack, code: str) -> str:
    """What keys a language's project on the server (`culturebench:<this>:translation_review`)."""
    return f"{pack.info.name}-{pack.info.version}-{code}"


def item_key(entry: PackEntry) -> str:
    return f"{entry.file}#{entry.key}"


def review_entries(pack: ReferencePack, code: str) -> list[PackEntry]:
    """The entries of `code` a native speaker reviews: every draft (a missing entry has nothing to review)."""
    return [e for e in pack_entries(pack, [code]) if e.status == "awaiting_native_review"]


def _example(pack: ReferencePack, entry: PackEntry) -> str:
    """An RQ3 query written with the draft, where one can be: the concept's own, or the language's template with the
    pack's first concept and country, or a country's form in the language's template."""
    language = pack.languages.get(entry.language)
    if language is None:
        return ""
    first_concept = next((c for c in pack.concepts if c.concept_id in language.concepts), None)
    first_country = next((c for c in pack.countries if c.name in language.countries), None)
    concept_text = language.concepts[first_concept.concept_id].text if first_concept else "{concept}"
    form = language.countries[first_country.name].descriptor_country if first_country else "{country}"
    try:
        if entry.key == "descriptor_template" or entry.key.endswith(".descriptor_template"):
            return entry.draft.replace("{concept}", concept_text).replace("{country}", form)
        if entry.key.endswith(".descriptor_country"):
            template = language.language.descriptor_template or ENGLISH_TEMPLATE
            return template.replace("{concept}", concept_text).replace("{country}", entry.draft)
    except KeyError:
        return ""
    return entry.context if entry.context.startswith("RQ3 query") else ""


def translation_tasks(pack: ReferencePack, code: str) -> list[LabelStudioTask]:
    """One Label Studio task per draft entry of `code`."""
    english, native = language_names(code)
    guideline = GUIDELINES[KIND]
    return [
        {
            "data": {
                "item_key": item_key(entry),
                "language_name": f"{english} ({native})",
                "guideline": guideline,
                "source": entry.source,
                "context": f"{entry.file}, {entry.key}: {entry.context}".rstrip(": "),
                "draft": entry.draft,
                "example": _example(pack, entry) or "-",
            }
        }
        for entry in review_entries(pack, code)
    ]


class TranslationDecision(TypedDict):
    """A row of the decisions file (DECISION_FIELDS): what the review decided of one entry."""

    language: str
    file: str
    key: str
    status: str
    decision: str | None
    reason: str | None
    value: str
    votes: str  # JSON {choice: count}
    reviewers: int
    majority_share: float | None


@dataclass
class CollectedReview:
    """What a language's review decided: the changes to write, one decision row per entry, and the agreement."""

    code: str
    changes: list[EntryChange]
    decisions: list[TranslationDecision]
    agreement: Agreement

    def counts(self) -> Counter[str]:
        return Counter(row["decision"] or f"undecided ({row['reason']})" for row in self.decisions)


def _normal(text: str) -> str:
    return unicodedata.normalize("NFC", " ".join(text.split()))


def _correction(votes: list[Vote]) -> str | None:
    """The corrected text more than half of the correcting reviewers wrote; None when they disagree."""
    texts = Counter(_normal(v.text) for v in votes if v.choice == TRANSLATION_CORRECT and v.text and _normal(v.text))
    correcting = sum(1 for v in votes if v.choice == TRANSLATION_CORRECT)
    if not texts:
        return None
    text, count = texts.most_common(1)[0]
    return text if 2 * count > correcting else None


def collect_language(pack: ReferencePack, code: str, export: Any, annotators: int) -> CollectedReview:
    """Decide every entry of `code`'s export (a `MalformedExport` for one that is not this review's)."""
    entries = {item_key(e): e for e in pack_entries(pack, [code])}
    votes = [v for v in parse_export(export, SPEC) if v.item_key in entries]
    keys = list(dict.fromkeys(v.item_key for v in votes))
    table, agreement = decide(votes, keys, SPEC, annotators, complete=True)
    by_key: dict[str, list[Vote]] = {}
    for vote in votes:
        by_key.setdefault(vote.item_key, []).append(vote)
    changes: list[EntryChange] = []
    rows: list[TranslationDecision] = []
    for row in table.to_pylist():
        entry = entries[row["item_key"]]
        decision, reason, value = row["decision"], row["reason"], entry.draft
        reviewers = row["annotations"]
        if decision == TRANSLATION_CORRECT:
            corrected = _correction(latest_per_annotator(by_key[row["item_key"]]))
            if corrected is None:
                decision, reason = None, "corrections_differ"
            else:
                value = corrected
                changes.append(EntryChange(entry.file, entry.key, corrected, "native_reviewed", "review", reviewers))
        elif decision == TRANSLATION_ACCEPT and entry.draft:
            changes.append(
                EntryChange(entry.file, entry.key, entry.draft, "native_reviewed", entry.origin or "hand", reviewers)
            )
        elif decision == TRANSLATION_REJECT:
            reason = "rejected: draft it again (reference translate) or write it (reference sheet)"
        rows.append(
            {
                "language": code,
                "file": entry.file,
                "key": entry.key,
                "status": "decided" if decision else "undecided",
                "decision": decision,
                "reason": reason,
                "value": value,
                "votes": row["votes"],
                "reviewers": reviewers,
                "majority_share": row["majority_share"],
            }
        )
    return CollectedReview(code, changes, rows, agreement)
