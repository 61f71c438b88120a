"""From a Label Studio JSON export to votes, majority decisions and agreement.

The export is the same whether it came from the server's snapshot API or from a file an annotator team handed
over, so one parser serves both, and any shape it does not expect is a `MalformedExport` naming the task.

Every annotation that was not cancelled is a vote cast: "unsure", and a verdict that cannot be read (a renamed
choice), are votes for nobody. A task is decided when one choice holds more than half of the votes cast (2 of 3,
3 of 4), so a tie never decides, whatever the export order. Everything else is undecided, with the reason, and is
reported rather than guessed.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict, TypeGuard

import numpy as np
import pyarrow as pa

from annotation.label_configs import MASK_CONTROL, UNSURE, ReviewSpec
from data import schemas


class MalformedExport(ValueError):
    """The export is not a Label Studio JSON export of this review."""


@dataclass(frozen=True)
class Vote:
    item_key: str
    task_id: int
    annotator: str
    choice: str | None  # None: the annotation has no (known) verdict
    text: str | None = None  # the tailored prompt, synthesis QA only
    mask_rle: list[int] | None = None  # the brush painted on the original, synthesis QA only
    mask_size: tuple[int, int] | None = None  # (width, height) of the image the brush was painted on, as exported


class AgreementSummary(TypedDict):
    """What a review's stats say of its agreement (`data.stage_stats.ReviewSummary.agreement`)."""

    tasks_rated: int
    fleiss_kappa: float | None
    unanimous_share: float | None
    disagreements: int


@dataclass
class Agreement:
    tasks_rated: int  # tasks with exactly the configured number of valid votes
    fleiss_kappa: float | None  # None when it is undefined (no rated task, or every vote alike)
    unanimous_share: float | None
    disagreements: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> AgreementSummary:
        return {
            "tasks_rated": self.tasks_rated,
            "fleiss_kappa": self.fleiss_kappa,
            "unanimous_share": self.unanimous_share,
            "disagreements": len(self.disagreements),
        }


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)  # JSON true is no number


def _is_str_list(value: object) -> TypeGuard[list[str]]:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _value(region: Mapping[str, object], where: str) -> Mapping[str, object]:
    value = region.get("value")
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise MalformedExport(f"{where}: `value` is not an object")
    return value


def _side(region: Mapping[str, object], name: str, where: str) -> int:
    size = region.get(name)
    if not _is_int(size) or size <= 0:
        raise MalformedExport(f"{where}: brush without a positive integer `{name}` (got {size!r:.40})")
    return size


def _verdict(result: list[Any], spec: ReviewSpec, where: str) -> tuple[str | None, str | None, Any]:
    """The verdict, tailored prompt and brush of one annotation; regions of other controls are not ours to read."""
    choice = text = brush = None
    for number, region in enumerate(result):
        at = f"{where}, region #{number}"
        if not isinstance(region, dict):
            raise MalformedExport(f"{at} is not an object")
        name = region.get("from_name")
        if name == spec.verdict_control:
            choices = _value(region, at).get("choices")
            if choices is not None and not _is_str_list(choices):
                raise MalformedExport(f"{at}: `choices` is not a list of strings")
            if _is_str_list(choices) and choices:
                choice = spec.name_of_label(choices[0])
        elif name is not None and name == spec.text_control:
            lines = _value(region, at).get("text")
            if lines is not None and not _is_str_list(lines):
                raise MalformedExport(f"{at}: `text` is not a list of strings")
            if _is_str_list(lines) and lines:
                text = "\n".join(lines).strip() or None
        elif name == MASK_CONTROL:
            rle = _value(region, at).get("rle")
            if rle is not None and (not isinstance(rle, list) or not all(_is_int(v) for v in rle)):
                raise MalformedExport(f"{at}: `rle` is not a list of integers")
            if rle:
                # Only what the export claims: synthesis QA checks the size and the RLE against the original.
                brush = (rle, (_side(region, "original_width", at), _side(region, "original_height", at)))
    return choice, text, brush


def _annotator(annotation: Mapping[str, object], where: str) -> str:
    """Who voted: the user id, or the email (or id) of an expanded user object."""
    who = annotation.get("completed_by")
    if isinstance(who, dict):  # JSON export variants expand the user
        email = who.get("email")
        who = email if isinstance(email, str) and email else who.get("id")
    if _is_int(who) or (isinstance(who, str) and who):
        return str(who)
    raise MalformedExport(f"{where}: `completed_by` names no annotator (got {annotation.get('completed_by')!r:.60})")


def parse_export(tasks: Any, spec: ReviewSpec) -> list[Vote]:
    """Votes from a Label Studio JSON export (a list of tasks with `data` and `annotations`).

    Any other shape raises `MalformedExport` naming the task (position and id), the annotation and what is wrong."""
    if not isinstance(tasks, list):
        raise MalformedExport(f"a Label Studio JSON export is a list of tasks, got {type(tasks).__name__}")
    votes: list[Vote] = []
    for position, task in enumerate(tasks):
        if not isinstance(task, dict):
            raise MalformedExport(f"task #{position} is not an object")
        where = f"task #{position} (id {task.get('id')!r:.40})"
        if not isinstance(task.get("data"), dict):
            raise MalformedExport(f"{where} has no `data` object")
        key = task["data"].get("item_key")
        if not isinstance(key, str) or not key:
            raise MalformedExport(f"{where} has no `data.item_key`: not our export")
        task_id = task.get("id")
        if not _is_int(task_id):
            raise MalformedExport(f"{where} has no integer `id`")
        annotations = task.get("annotations")
        if annotations is None:
            continue
        if not isinstance(annotations, list):
            raise MalformedExport(f"{where}: `annotations` is not a list")
        for number, annotation in enumerate(annotations):
            if not isinstance(annotation, dict):
                raise MalformedExport(f"{where}: annotation #{number} is not an object")
            at = f"{where}: annotation #{number} (id {annotation.get('id')!r:.40})"
            cancelled = annotation.get("was_cancelled")
            if not isinstance(cancelled, bool | None):
                raise MalformedExport(f"{at}: `was_cancelled` is not a boolean")
            if cancelled:  # a skipped task is no vote
                continue
            result = annotation.get("result")
            if result is not None and not isinstance(result, list):
                raise MalformedExport(f"{at}: `result` is not a list")
            choice, text, brush = _verdict(result or [], spec, at)
            votes.append(
                Vote(
                    item_key=key,
                    task_id=task_id,
                    annotator=_annotator(annotation, at),
                    choice=choice,
                    text=text,
                    mask_rle=brush[0] if brush else None,
                    mask_size=brush[1] if brush else None,
                )
            )
    return votes


def export_item_keys(tasks: Any, spec: ReviewSpec) -> set[str]:
    """The item keys of the tasks an export holds (checked as `parse_export` checks them)."""
    parse_export(tasks, spec)
    return {task["data"]["item_key"] for task in tasks}


def latest_per_annotator(votes: list[Vote]) -> list[Vote]:
    """One vote per annotator and task: a person who annotated twice counts once (their last annotation)."""
    latest: dict[tuple[str, str], Vote] = {}
    for vote in votes:
        latest[(vote.item_key, vote.annotator)] = vote
    return list(latest.values())


def decide(
    votes: list[Vote], item_keys: list[str], spec: ReviewSpec, annotators: int, complete: bool
) -> tuple[pa.Table, Agreement]:
    """One REVIEW_DECISIONS row per item key, plus agreement over the items fully annotated.

    An item is decided when one choice other than "unsure" holds more than half of the votes cast (each
    annotator's last annotation that was not cancelled). Otherwise, in this order:
    - `pending`: the review is open (`complete` false) and the item has fewer than `annotators` annotations;
    - `too_few_annotations`: closed with fewer annotations than a majority of `annotators` (2 of 3);
    - `unsure`: "unsure" holds more than half of the votes cast;
    - `no_majority`: anything else, a tie included.
    """
    by_item: dict[str, list[Vote]] = {key: [] for key in item_keys}
    for vote in latest_per_annotator(votes):
        by_item.setdefault(vote.item_key, []).append(vote)
    needed = annotators // 2 + 1
    rows = []
    for key, item_votes in by_item.items():
        cast = len(item_votes)
        counts = Counter(v.choice for v in item_votes if v.choice is not None)
        decisive = Counter({c: n for c, n in counts.items() if c != UNSURE})
        top, top_votes = decisive.most_common(1)[0] if decisive else (None, 0)
        if cast < annotators and not complete:
            status, decision, reason = "pending", None, f"{cast} of {annotators} annotations"
        elif cast < needed:
            status, decision, reason = "undecided", None, f"too_few_annotations: {cast} of {annotators}"
        elif 2 * top_votes > cast:  # more than half: no other choice can tie it, so export order cannot matter
            status, decision, reason = "decided", top, None
        elif 2 * counts.get(UNSURE, 0) > cast:
            status, decision, reason = "undecided", None, "unsure"
        else:
            status, decision, reason = "undecided", None, "no_majority"
        rows.append(
            {
                "review": spec.kind,
                "item_key": key,
                "task_id": item_votes[0].task_id if item_votes else None,
                "status": status,
                "decision": decision,
                "reason": reason,
                "votes": json.dumps(dict(sorted(counts.items())), sort_keys=True),
                "annotations": cast,
                "annotators": sorted(v.annotator for v in item_votes),
                "majority_share": (top_votes / cast) if cast else None,  # of the votes cast
            }
        )
    return schemas.from_rows(rows, schemas.REVIEW_DECISIONS), agreement(by_item, spec, annotators)


def agreement(by_item: dict[str, list[Vote]], spec: ReviewSpec, annotators: int) -> Agreement:
    """Fleiss' kappa (statsmodels) over the items with exactly `annotators` valid votes, and the unanimous share."""
    from statsmodels.stats.inter_rater import fleiss_kappa

    categories = spec.choice_names()
    rated = {k: v for k, v in by_item.items() if len([x for x in v if x.choice]) == annotators}
    disagreements = [
        {"item_key": k, "votes": dict(Counter(x.choice for x in v if x.choice))}
        for k, v in by_item.items()
        if len({x.choice for x in v if x.choice}) > 1
    ]
    if not rated:
        return Agreement(0, None, None, disagreements)
    table = np.array([[sum(x.choice == c for x in v) for c in categories] for v in rated.values()])
    unanimous = float(np.mean(table.max(axis=1) == annotators))
    with np.errstate(divide="ignore", invalid="ignore"):
        kappa = float(fleiss_kappa(table, method="fleiss"))
    return Agreement(len(rated), kappa if np.isfinite(kappa) else None, unanimous, disagreements)
