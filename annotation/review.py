"""Review stage: people confirm or overturn the automatic duplicate decisions (3XCM paper §3.2.1, App. J).

Embedded default: an explicit auto-accept policy. Every automatic decision is accepted as is, and each row says
so (`reviewer=auto_accept`), so a release built this way can never pass for a human-reviewed one. Pairs in the
ambiguous band (the dedup stage's review queue) stay apart under this policy: nobody said they are the same scene.
"""

from __future__ import annotations

from typing import Literal, Protocol

import pyarrow as pa
from pydantic import BaseModel, ConfigDict

from data.schemas import REVIEW, from_rows
from data.stage import Registry

AUTO_ACCEPT = "auto_accept"


class AutoAcceptReviewConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: Literal["auto_accept"] = "auto_accept"


ReviewConfig = AutoAcceptReviewConfig


class Reviewer(Protocol):
    name: str
    policy: str

    def review(self, decisions: pa.Table, queue: pa.Table) -> list[tuple[bool, str | None]]:
        """(keep, reason) per row of the image dedup decision table; `queue` holds the ambiguous pairs."""
        ...


reviewers: Registry[Reviewer] = Registry("review")


class AutoAcceptReviewer:
    name = AUTO_ACCEPT
    policy = (
        "accept every automatic dedup decision unchanged and keep ambiguous pairs apart; "
        "no human has looked at these images"
    )

    def review(self, decisions: pa.Table, queue: pa.Table) -> list[tuple[bool, str | None]]:
        return list(zip(decisions["keep"].to_pylist(), decisions["reason"].to_pylist(), strict=True))


@reviewers.register("auto_accept")
def _auto_accept(config: AutoAcceptReviewConfig) -> Reviewer:
    return AutoAcceptReviewer()


def run_review(config: ReviewConfig, decisions: pa.Table, queue: pa.Table) -> pa.Table:
    reviewer = reviewers.build(config)
    verdicts = reviewer.review(decisions, queue)
    rows = [
        {
            "image_id": image_id,
            "keep": keep,
            "automatic_keep": automatic,
            "reviewer": reviewer.name,
            "policy": reviewer.policy,
            "reason": reason,
        }
        for image_id, automatic, (keep, reason) in zip(
            decisions["image_id"].to_pylist(), decisions["keep"].to_pylist(), verdicts, strict=True
        )
    ]
    return from_rows(rows, REVIEW)
