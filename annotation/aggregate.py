"""From a Label Studio JSON export to votes, majority decisions and agreement.

The export is the same whether it came from the server's snapshot API or from a file an annotator team handed
over, so one parser serves both. A task is decided when one choice holds a strict majority of the configured
number of annotators (3 by default: 2 votes); "unsure" is a vote for nobody. Everything else is undecided, with
the reason, and is reported rather than guessed.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from annotation.label_configs import MASK_CONTROL, RETRY_PROMPT_CONTROL, UNSURE, ReviewSpec
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
    mask_size: tuple[int, int] | None = None  # (width, height) of the original


@dataclass
class Agreement:
    tasks_rated: int  # tasks with exactly the configured number of valid votes
    fleiss_kappa: float | None  # None when it is undefined (no rated task, or every vote alike)
    unanimous_share: float | None
    disagreements: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "tasks_rated": self.tasks_rated,
            "fleiss_kappa": self.fleiss_kappa,
            "unanimous_share": self.unanimous_share,
            "disagreements": len(self.disagreements),
        }


def _verdict(result: list[dict[str, Any]], spec: ReviewSpec) -> tuple[str | None, str | None, Any]:
    choice = text = brush = None
    for region in result:
        name, value = region.get("from_name"), region.get("value") or {}
        if name == spec.verdict_control and value.get("choices"):
            choice = spec.name_of_label(str(value["choices"][0]))
        elif name == RETRY_PROMPT_CONTROL and value.get("text"):
            text = "\n".join(str(t) for t in value["text"]).strip() or None
        elif name == MASK_CONTROL and value.get("rle"):
            brush = (list(value["rle"]), (region.get("original_width"), region.get("original_height")))
    return choice, text, brush


def parse_export(tasks: Any, spec: ReviewSpec) -> list[Vote]:
    """Votes from a Label Studio JSON export (a list of tasks with `data` and `annotations`)."""
    if not isinstance(tasks, list):
        raise MalformedExport(f"a Label Studio JSON export is a list of tasks, got {type(tasks).__name__}")
    votes: list[Vote] = []
    for position, task in enumerate(tasks):
        if not isinstance(task, dict) or not isinstance(task.get("data"), dict):
            raise MalformedExport(f"task #{position} has no `data` object")
        key = task["data"].get("item_key")
        if not isinstance(key, str) or not key:
            raise MalformedExport(f"task #{position} (id {task.get('id')}) has no `data.item_key`: not our export")
        for annotation in task.get("annotations") or []:
            if annotation.get("was_cancelled"):  # a skipped task is no vote
                continue
            choice, text, brush = _verdict(annotation.get("result") or [], spec)
            annotator = annotation.get("completed_by")
            if isinstance(annotator, dict):  # JSON export variants expand the user
                annotator = annotator.get("email") or annotator.get("id")
            votes.append(
                Vote(
                    item_key=key,
                    task_id=int(task.get("id") or 0),
                    annotator=str(annotator),
                    choice=choice,
                    text=text,
                    mask_rle=brush[0] if brush else None,
                    mask_size=brush[1] if brush else None,
                )
            )
    return votes


def load_export_file(data: bytes, spec: ReviewSpec) -> list[Vote]:
    try:
        tasks = json.loads(data)
    except json.JSONDecodeError as exc:
        raise MalformedExport(f"not JSON: {exc.msg} at line {exc.lineno}") from None
    return parse_export(tasks, spec)


def _latest_per_annotator(votes: list[Vote]) -> list[Vote]:
    """One vote per annotator and task: a person who annotated twice counts once (their last annotation)."""
    latest: dict[tuple[str, str], Vote] = {}
    for vote in votes:
        latest[(vote.item_key, vote.annotator)] = vote
    return list(latest.values())


def decide(
    votes: list[Vote], item_keys: list[str], spec: ReviewSpec, annotators: int, complete: bool
) -> tuple[pa.Table, Agreement]:
    """One REVIEW_DECISIONS row per item key, plus agreement over the items fully annotated.

    `complete` says the review is closed: items still short of annotators are then undecided ("too few"); while
    it is open they are "pending".
    """
    by_item: dict[str, list[Vote]] = {key: [] for key in item_keys}
    for vote in _latest_per_annotator(votes):
        by_item.setdefault(vote.item_key, []).append(vote)
    needed = annotators // 2 + 1
    rows = []
    for key, item_votes in by_item.items():
        counts = Counter(v.choice for v in item_votes if v.choice is not None)
        decisive = Counter({c: n for c, n in counts.items() if c != UNSURE})
        top, top_votes = decisive.most_common(1)[0] if decisive else (None, 0)
        if top_votes >= needed:
            status, decision, reason = "decided", top, None
        elif len(item_votes) < annotators and not complete:
            status, decision, reason = "pending", None, f"{len(item_votes)} of {annotators} annotations"
        elif len(item_votes) < annotators and len(item_votes) < needed:
            status, decision, reason = "undecided", None, f"too_few_annotations: {len(item_votes)} of {annotators}"
        elif counts.get(UNSURE, 0) >= needed:
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
                "annotations": len(item_votes),
                "annotators": sorted(v.annotator for v in item_votes),
                "majority_share": (top_votes / len(item_votes)) if item_votes else None,
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
