"""One review round, whatever the backend: export the tasks, pull the annotations, decide each item by a strict
majority of the votes cast (annotation/aggregate.py).

While annotations are missing the round raises `ReviewPending` (the build then waits, see flows/xcm/build.py),
unless the operator closed the review, in which case the missing items are undecided and reported. Nothing is
written before the decisions are whole, so a server that fails halfway leaves no half-written table.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa
from pydantic import JsonValue

from annotation.aggregate import Agreement, Vote, decide, parse_export
from annotation.label_configs import ReviewSpec
from annotation.tasks import LabelStudioTask
from data.review import WaitingForReviewers


class ReviewTarget(Protocol):
    reviewer: str

    @property
    def location(self) -> str: ...

    def export(self, tasks: list[LabelStudioTask]) -> tuple[int, int]: ...

    def snapshot(self) -> list[dict[str, JsonValue]]: ...  # a Label Studio JSON export, as read


class ReviewPending(WaitingForReviewers):
    """Annotators have not finished; the build waits and resumes when they have."""

    def __init__(self, review: str, location: str, finished: int, total: int, new_tasks: int) -> None:
        self.review = review
        self.location = location
        self.finished = finished
        self.total = total
        self.new_tasks = new_tasks
        super().__init__(
            f"{review}: {finished} of {total} tasks fully annotated at {location} ({new_tasks} new tasks exported); "
            "the build resumes once every task has its annotations"
        )


@dataclass
class ReviewRound:
    decisions: pa.Table  # REVIEW_DECISIONS
    agreement: Agreement
    reviewer: str
    location: str
    new_tasks: int
    total_tasks: int
    closed_early: bool  # the operator accepted an incomplete review
    votes: list[Vote]
    # What applying the decisions left out, for the stats and the release card: `scenes_fully_held_back`
    # (annotation/review.py), `invalid_masks` (annotation/synthesis_qa.py).
    outcome: dict[str, int] = field(default_factory=dict)

    def stats(self) -> dict[str, Any]:
        status = self.decisions["status"].to_pylist()
        return {
            "reviewer": self.reviewer,
            "location": self.location,
            "tasks": self.total_tasks,
            "new_tasks": self.new_tasks,
            "decided": status.count("decided"),
            "undecided": status.count("undecided"),
            "closed_early": self.closed_early,
            "agreement": self.agreement.summary(),
            **self.outcome,
        }


def run_round(
    target: ReviewTarget, spec: ReviewSpec, tasks: list[LabelStudioTask], annotators: int, accept_incomplete: bool
) -> ReviewRound:
    keys = [t["data"]["item_key"] for t in tasks]
    new, total = target.export(tasks)
    wanted = set(keys)
    votes = [v for v in parse_export(target.snapshot(), spec) if v.item_key in wanted]
    people = Counter(key for key, _ in {(v.item_key, v.annotator) for v in votes})
    done = sum(people[key] >= annotators for key in keys)
    complete = done == len(keys)
    if not complete and not accept_incomplete:
        raise ReviewPending(spec.kind, target.location, done, len(keys), new)
    decisions, agreement = decide(votes, keys, spec, annotators, complete=True)
    return ReviewRound(decisions, agreement, target.reviewer, target.location, new, total, not complete, votes)
