"""What each synthesis attempt came to, and which (original, ethnicity) pairs get another attempt.

MixCuBe §2: automatically flagged images are discarded (App. A.6), people inspect the rest, and where artifacts
persist the mask is fixed by hand; App. B.1: images with an undesirable result are prompted again with a tailored
prompt. Here every attempt ends in one outcome:

- `accepted`: kept by QA; the pair is done.
- `synthesis_error`, `filter:<verdict>`, `qa:reject_artifacts`, `qa:reject_cultural_marker`: drawn again with a
  new seed, the same prompt and mask (`reseed`).
- `qa:retry_prompt` / `qa:fix_mask`: drawn again with the reviewers' prompt or painted mask.
- `qa:undecided`: the reviewers did not agree (or the review was closed early); not retried, reported.

A retry is always a new attempt; the pair stops at `max_attempts` and is reported as left over.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from data import schemas
from data.reference import MixCubeReference
from data.review_labels import FIX_MASK, KEEP, REJECT_ARTIFACTS, REJECT_MARKER, RETRY_PROMPT
from data.schemas import SynthesisAttemptRow
from synthesis.attempts import RESEED, AttemptPlan
from synthesis.prompts import attempt_seed

ACCEPTED = "accepted"
SYNTHESIS_ERROR = "synthesis_error"
QA_UNDECIDED = "qa:undecided"
_RESEED_AFTER_QA = {REJECT_ARTIFACTS, REJECT_MARKER}


@dataclass(frozen=True)
class Outcome:
    attempt: SynthesisAttemptRow
    outcome: str
    retry_kind: str | None  # None: not retried (accepted or undecided)


def outcomes(attempts: pa.Table, filters: pa.Table, qa: pa.Table) -> list[Outcome]:
    """The outcome of each attempt of one round, from its filter row and (if it reached QA) its QA row."""
    verdicts = {r["attempt_id"]: r["verdict"] for r in filters.select(["attempt_id", "verdict"]).to_pylist()}
    reviews = {r["attempt_id"]: r for r in qa.to_pylist()}
    out = []
    for row in attempts.to_pylist():
        verdict = verdicts.get(row["attempt_id"])
        review = reviews.get(row["attempt_id"])
        if row["sha256"] is None:
            out.append(Outcome(row, SYNTHESIS_ERROR, RESEED))
        elif verdict != KEEP:
            out.append(Outcome(row, f"filter:{verdict}", RESEED))
        elif review is None or review["status"] != "decided":
            out.append(Outcome(row, QA_UNDECIDED, None))
        elif review["keep"]:
            out.append(Outcome(row, ACCEPTED, None))
        elif review["decision"] in _RESEED_AFTER_QA:
            out.append(Outcome(row, f"qa:{review['decision']}", RESEED))
        elif review["decision"] in (RETRY_PROMPT, FIX_MASK):
            out.append(Outcome(row, f"qa:{review['decision']}", review["decision"]))
        else:
            out.append(Outcome(row, f"qa:{review['decision']}", None))
    return out


def retry_plans(
    round_outcomes: Sequence[Outcome],
    requests: pa.Table,
    original_sha256: dict[str, str],
    next_attempt: int,
    base_seed: int,
    mix: MixCubeReference,
) -> list[AttemptPlan]:
    """The next round's plans. A tailored prompt or painted mask replaces the old one; a retry that lacks it (a
    reviewer chose "retry" but wrote nothing) keeps the old one and only draws a new seed."""
    asked = {r["attempt_id"]: r for r in requests.to_pylist()}
    plans = []
    for item in round_outcomes:
        if item.retry_kind is None:
            continue
        row, request = item.attempt, asked.get(item.attempt["attempt_id"], {})
        prompt = request.get("prompt") or row["prompt"]
        mask = request.get("mask_sha256") or row["mask_sha256"]
        plans.append(
            AttemptPlan(
                original_id=row["original_id"],
                ethnicity=row["ethnicity"],
                attempt=next_attempt,
                prompt=prompt,
                seed=attempt_seed(mix, base_seed, row["original_id"], row["ethnicity"], next_attempt),
                original_sha256=original_sha256[row["original_id"]],
                mask_sha256=mask,
                retry_kind=item.retry_kind,
                retry_of=row["attempt_id"],
            )
        )
    return plans


def left_over(final_outcomes: Sequence[Outcome], max_attempts: int) -> pa.Table:
    """MIXCUBE_LEFT_OVER: the pairs whose last attempt was not accepted, with that outcome."""
    last: dict[tuple[str, str], Outcome] = {}
    for item in final_outcomes:
        key = (item.attempt["original_id"], item.attempt["ethnicity"])
        if key not in last or item.attempt["attempt"] > last[key].attempt["attempt"]:
            last[key] = item
    rows = [
        {
            "original_id": original_id,
            "ethnicity": ethnicity,
            "attempts": item.attempt["attempt"],
            "last_attempt_id": item.attempt["attempt_id"],
            "outcome": item.outcome,
            "cap_reached": item.retry_kind is not None and item.attempt["attempt"] >= max_attempts,
        }
        for (original_id, ethnicity), item in sorted(last.items())
        if item.outcome != ACCEPTED
    ]
    return schemas.from_rows(rows, schemas.MIXCUBE_LEFT_OVER)
