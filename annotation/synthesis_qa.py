"""MixCuBe synthesis QA: people accept or reject each inpainted image, or ask for it again (MixCuBe §2, App. B.1).

Input: the attempts that passed the automatic filters (SYNTHESIS_QA_CANDIDATES). Output: one SYNTHESIS_QA row per
attempt, and RESYNTHESIS_REQUESTS for the MixCuBe flow: a tailored prompt, or a mask the annotators painted on the
original (decoded from Label Studio's brush RLE into a PNG blob). Requests name the next attempt number; earlier
attempts are never overwritten.

A painted mask must fit the original the redraw paints on: the size the annotator painted on, and the RLE's own
length (RGBA, 4 values a pixel), are checked against the original blob before anything of that size is allocated.
A brush that does not fit is left out of the mask and named in the attempt's reason (`invalid_mask: ...`); a retry
whose every brush was left out keeps the old mask, as one where nobody painted.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from PIL import Image

from annotation.aggregate import Vote
from annotation.backends import AutoAcceptReviewConfig, ReviewConfig, publisher, review_target
from annotation.backends import unreviewed_auto_accept as _unreviewed_auto_accept
from annotation.collect import ReviewRound, run_round
from annotation.label_configs import SPECS
from annotation.tasks import synthesis_qa_tasks
from data import schemas
from data.review import ReviewContext
from data.review_labels import ACCEPT, AUTO_ACCEPT, FIX_MASK, RETRY_PROMPT

AUTO_ACCEPT_POLICY = "accept every attempt that passed BRISQUE and CLIP; no human has looked at these images"
MAJORITY_POLICY = (
    "more than half of the votes cast, {n} annotators per attempt (MixCuBe §2); undecided attempts are not released"
)
INVALID_MASK = "invalid_mask"


class InvalidMask(ValueError):
    """A painted brush that cannot become a mask of the original."""


@dataclass
class SynthesisQAOutput:
    qa: pa.Table  # SYNTHESIS_QA
    requests: pa.Table  # RESYNTHESIS_REQUESTS
    round: ReviewRound | None
    # Attempts with a painted brush left out because it does not fit the original (reason `invalid_mask: ...`);
    # also in the round's stats.
    invalid_masks: int = 0


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
    assert not isinstance(config, AutoAcceptReviewConfig)  # review_target gives it no backend
    annotators = config.annotators
    spec = SPECS["synthesis_qa"]
    round_ = run_round(backend, spec, tasks, annotators, ctx.accept_incomplete)
    qa, requests = apply_qa_decisions(
        candidates, round_, annotators, put_blob, lambda sha: image_size(ctx.load_blob(sha))
    )
    invalid = sum((reason or "").startswith(f"{INVALID_MASK}:") for reason in qa["reason"].to_pylist())
    return SynthesisQAOutput(qa, requests, replace(round_, outcome={"invalid_masks": invalid}), invalid)


def image_size(data: bytes) -> tuple[int, int]:
    """(width, height) of an image as the inpainter decodes it (PIL, no EXIF rotation), from its header alone."""
    with Image.open(io.BytesIO(data)) as image:
        return image.size


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
    original_size: Callable[[str], tuple[int, int]],
) -> tuple[pa.Table, pa.Table]:
    """SYNTHESIS_QA rows and RESYNTHESIS_REQUESTS; `original_size(sha256)` is the (width, height) of an original."""
    verdicts = {row["item_key"]: row for row in round_.decisions.to_pylist()}
    next_attempt: dict[tuple[str, str], int] = {}
    for row in candidates.select(["original_id", "ethnicity", "attempt"]).to_pylist():
        key = (row["original_id"], row["ethnicity"])
        next_attempt[key] = max(next_attempt.get(key, 0), row["attempt"] + 1)
    qa_rows, requests = [], []
    for row in candidates.to_pylist():
        verdict = verdicts[row["attempt_id"]]
        decision, reason = verdict["decision"], verdict["reason"]
        backers = [v for v in round_.votes if v.item_key == row["attempt_id"] and v.choice == decision]
        mask = None
        painted = [v for v in backers if v.mask_rle and v.mask_size] if decision == FIX_MASK else []
        if painted:
            mask, refused = _painted_mask(painted, original_size(row["original_sha256"]))
            if refused:
                reason = f"{INVALID_MASK}: " + "; ".join(refused)
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
                "reason": reason,
            }
        )
        if decision not in (RETRY_PROMPT, FIX_MASK):
            continue
        prompt = next((v.text for v in backers if v.text), None) if decision == RETRY_PROMPT else None
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


_WEIGHTS = [1 << np.arange(size - 1, -1, -1, dtype=np.uint64) for size in range(33)]  # bit weights, MSB first


class _Bits:
    """Big-endian reader over the bits of Label Studio's brush RLE (thi-ng rle-pack); reading past the end is an
    InvalidMask, never an index error."""

    def __init__(self, data: list[int]) -> None:
        self.bits = np.unpackbits(np.asarray(data, dtype=np.uint8)).astype(np.uint64)
        self.at = 0

    def take(self, size: int) -> npt.NDArray[np.uint64]:
        end = self.at + size
        if end > len(self.bits):
            raise InvalidMask(f"brush RLE ends early, at bit {len(self.bits)} of at least {end}")
        out, self.at = self.bits[self.at : end], end
        return out

    def read(self, size: int) -> int:
        """One unsigned number of `size` (at most 32) bits."""
        return int(self.take(size).dot(_WEIGHTS[size]))

    def words(self, count: int, size: int) -> npt.NDArray[np.uint64]:
        """`count` numbers of `size` (at most 32) bits each."""
        values: npt.NDArray[np.uint64] = self.take(count * size).reshape(count, size).dot(_WEIGHTS[size])
        return values


def decode_brush(rle: list[int], width: int, height: int) -> npt.NDArray[np.bool_]:
    """Label Studio's brush RLE -> a boolean (height, width) mask, the alpha channel of its RGBA values.

    The same format as `label_studio_sdk.converter.brush.decode_rle`, decoded strictly: the header must promise
    exactly width * height * 4 values, which is checked before the output is allocated, and every run must stay
    inside them. Anything else raises InvalidMask."""
    if not all(0 <= value <= 255 for value in rle):
        raise InvalidMask("brush RLE holds values that are not bytes")
    bits = _Bits(rle)
    count, needed = bits.read(32), width * height * 4
    if count != needed:
        raise InvalidMask(f"brush RLE holds {count} values, the {width}x{height} original needs {needed} (RGBA)")
    word_size = bits.read(5) + 1
    if word_size > 8:
        raise InvalidMask(f"brush RLE has word size {word_size}, a mask's values are bytes (8)")
    run_sizes = [bits.read(4) + 1 for _ in range(4)]
    out = np.zeros(count, dtype=np.uint8)
    done = 0
    while done < count:
        fill = bits.read(1)
        end = done + 1 + bits.read(run_sizes[bits.read(2)])
        if end > count:
            raise InvalidMask(f"brush RLE runs past its {count} values (to {end})")
        out[done:end] = bits.read(word_size) if fill else bits.words(end - done, word_size)
        done = end
    return out.reshape(height, width, 4)[:, :, 3] > 0


def _brush_mask(vote: Vote, width: int, height: int) -> npt.NDArray[np.bool_]:
    """The mask one annotator painted, checked against the (width, height) original; InvalidMask otherwise."""
    if vote.mask_size != (width, height):
        painted = "x".join(map(str, vote.mask_size or ()))
        raise InvalidMask(f"painted on a {painted} view of the {width}x{height} original")
    return decode_brush(vote.mask_rle or [], width, height)


def _painted_mask(backers: list[Vote], original: tuple[int, int]) -> tuple[bytes | None, list[str]]:
    """The union of the masks the backing annotators painted, as a PNG of the original's size (None when none of
    them fits it), and why each brush that does not fit was left out."""
    union: npt.NDArray[np.bool_] | None = None
    refused: list[str] = []
    for vote in backers:
        try:
            mask = _brush_mask(vote, *original)
        except InvalidMask as exc:
            refused.append(f"annotator {vote.annotator}: {exc}")
            continue
        union = mask if union is None else (union | mask)
    if union is None:
        return None, refused
    buffer = io.BytesIO()
    Image.fromarray(union.astype(np.uint8) * 255, mode="L").save(buffer, format="PNG")
    return buffer.getvalue(), refused
