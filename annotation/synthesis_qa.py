"""MixCuBe synthesis QA: people accept or reject each inpainted image, or ask for it again (MixCuBe §2, App. B.1).

Input: the attempts that passed the automatic filters (SYNTHESIS_QA_CANDIDATES). Output: one SYNTHESIS_QA row per
attempt, and RESYNTHESIS_REQUESTS for the MixCuBe flow: a tailored prompt, or a mask the annotators painted on the
original (decoded from Label Studio's brush RLE into a PNG blob). Requests name the next attempt number; earlier
attempts are never overwritten.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from PIL import Image

from annotation.aggregate import Vote
from annotation.backends import AUTO_ACCEPT, ReviewConfig, ReviewContext, publisher, review_target
from annotation.backends import unreviewed_auto_accept as _unreviewed_auto_accept
from annotation.collect import ReviewRound, run_round
from annotation.label_configs import ACCEPT, FIX_MASK, RETRY_PROMPT, SPECS
from annotation.tasks import synthesis_qa_tasks
from data import schemas

AUTO_ACCEPT_POLICY = "accept every attempt that passed BRISQUE and CLIP; no human has looked at these images"
MAJORITY_POLICY = "majority of {n} annotators per attempt (MixCuBe §2); undecided attempts are not released"


@dataclass
class SynthesisQAOutput:
    qa: pa.Table  # SYNTHESIS_QA
    requests: pa.Table  # RESYNTHESIS_REQUESTS
    round: ReviewRound | None


def run_synthesis_qa(
    config: ReviewConfig, candidates: pa.Table, ctx: ReviewContext, put_blob: Callable[[bytes], str]
) -> SynthesisQAOutput:
    target = review_target(config, "synthesis_qa", ctx) if candidates.num_rows else None
    if target is None:
        no_requests = schemas.empty(schemas.RESYNTHESIS_REQUESTS)
        return SynthesisQAOutput(_auto_accept(candidates, AUTO_ACCEPT_POLICY), no_requests, None)
    backend, media = target
    publish = publisher(media, ctx)
    tasks = synthesis_qa_tasks(candidates, lambda sha, role: publish(sha, "png" if role == "mask" else "jpg"))
    if _unreviewed_auto_accept(config):
        backend.export(tasks)
        policy = f"{AUTO_ACCEPT_POLICY}; review tasks in {backend.location}"
        return SynthesisQAOutput(_auto_accept(candidates, policy), schemas.empty(schemas.RESYNTHESIS_REQUESTS), None)
    annotators = config.annotators  # type: ignore[union-attr]
    spec = SPECS["synthesis_qa"]
    round_ = run_round(backend, spec, tasks, annotators, ctx.accept_incomplete)
    qa, requests = apply_qa_decisions(candidates, round_, annotators, put_blob)
    return SynthesisQAOutput(qa, requests, round_)


def _auto_accept(candidates: pa.Table, policy: str) -> pa.Table:
    rows = [
        {
            "attempt_id": row["attempt_id"],
            "original_id": row["original_id"],
            "ethnicity": row["ethnicity"],
            "keep": True,
            "status": "decided",
            "decision": ACCEPT,
            "reviewer": AUTO_ACCEPT,
            "policy": policy,
            "reason": None,
        }
        for row in candidates.select(["attempt_id", "original_id", "ethnicity"]).to_pylist()
    ]
    return schemas.from_rows(rows, schemas.SYNTHESIS_QA)


def apply_qa_decisions(
    candidates: pa.Table,
    round_: ReviewRound,
    annotators: int,
    put_blob: Callable[[bytes], str],
) -> tuple[pa.Table, pa.Table]:
    verdicts = {row["item_key"]: row for row in round_.decisions.to_pylist()}
    next_attempt: dict[tuple[str, str], int] = {}
    for row in candidates.select(["original_id", "ethnicity", "attempt"]).to_pylist():
        key = (row["original_id"], row["ethnicity"])
        next_attempt[key] = max(next_attempt.get(key, 0), row["attempt"] + 1)
    qa_rows, requests = [], []
    for row in candidates.to_pylist():
        verdict = verdicts[row["attempt_id"]]
        decision = verdict["decision"]
        qa_rows.append(
            {
                "attempt_id": row["attempt_id"],
                "original_id": row["original_id"],
                "ethnicity": row["ethnicity"],
                "keep": decision == ACCEPT,
                "status": verdict["status"],
                "decision": decision,
                "reviewer": round_.reviewer,
                "policy": MAJORITY_POLICY.format(n=annotators),
                "reason": verdict["reason"],
            }
        )
        if decision not in (RETRY_PROMPT, FIX_MASK):
            continue
        backers = [v for v in round_.votes if v.item_key == row["attempt_id"] and v.choice == decision]
        prompt = next((v.text for v in backers if v.text), None) if decision == RETRY_PROMPT else None
        mask = _painted_mask(backers) if decision == FIX_MASK else None
        requests.append(
            {
                "attempt_id": row["attempt_id"],
                "original_id": row["original_id"],
                "ethnicity": row["ethnicity"],
                "next_attempt": next_attempt[(row["original_id"], row["ethnicity"])],
                "kind": decision,
                "prompt": prompt,
                "mask_sha256": put_blob(mask) if mask is not None else None,
                "requested_by": sorted(v.annotator for v in backers),
            }
        )
    return (
        schemas.from_rows(qa_rows, schemas.SYNTHESIS_QA),
        schemas.from_rows(requests, schemas.RESYNTHESIS_REQUESTS),
    )


def decode_brush(rle: list[int], width: int, height: int) -> np.ndarray:
    """Label Studio's brush RLE -> a boolean mask of the original's size."""
    from label_studio_sdk.converter.brush import decode_rle

    rgba = np.asarray(decode_rle(rle), dtype=np.uint8).reshape(height, width, 4)
    return rgba[:, :, 3] > 0


def _painted_mask(backers: list[Vote]) -> bytes | None:
    """The union of the masks the backing annotators painted, as a PNG; None when nobody painted."""
    union: np.ndarray | None = None
    for vote in backers:
        if not vote.mask_rle or not vote.mask_size or None in vote.mask_size:
            continue
        width, height = vote.mask_size
        mask = decode_brush(vote.mask_rle, int(width), int(height))  # type: ignore[arg-type]
        union = mask if union is None or union.shape != mask.shape else (union | mask)
    if union is None:
        return None
    buffer = io.BytesIO()
    Image.fromarray(union.astype(np.uint8) * 255, mode="L").save(buffer, format="PNG")
    return buffer.getvalue()
