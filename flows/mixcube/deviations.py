"""How a MixCuBe build's backends and settings differ from the paper's, for the release card and datasheet.

A card may say that a build ran as the paper did only when nothing below applies; otherwise it lists every
difference. The paper's settings are cited where they are defined (the config defaults carry the same numbers).
"""

from __future__ import annotations

from typing import Any

from curation.synthesis_filters import BRISQUE_MAX, CLIP_MAX, CLIP_MIN
from data.publish.card import review_deviation
from synthesis.faces import PAPER_MAX_FACES, PAPER_MIN_CONFIDENCE

#: MixCuBe App. C.2: 60 diffusion steps at guidance scale 7.0; §2: three annotators per synthesis attempt.
MIXCUBE_STEPS = 60
MIXCUBE_GUIDANCE = 7.0
ANNOTATORS = 3


def mixcube_deviations(config: Any, reviewers: list[str]) -> list[str]:
    """Every MixCuBe stage whose backend or setting is not the paper's (`reviewers`: who decided each QA round)."""
    out: list[str] = []
    faces = config.faces
    if faces.backend != "yunet":
        out.append(f"Faces were found by OpenCV's {faces.backend} detector, not YuNet.")
    elif faces.min_confidence != PAPER_MIN_CONFIDENCE or faces.max_faces != PAPER_MAX_FACES:
        out.append(
            f"YuNet kept faces at confidence >= {faces.min_confidence}, at most {faces.max_faces}, not >= "
            f"{PAPER_MIN_CONFIDENCE} and {PAPER_MAX_FACES}."
        )
    if config.masks.backend != "sam":
        out.append(f"Masks are {config.masks.backend} shapes from the face boxes, not Segment Anything masks.")
    inpaint = config.inpaint
    if inpaint.backend != "sdxl":
        out.append("No image was synthesized: the placeholder inpainter painted every mask.")
    elif (inpaint.num_inference_steps, inpaint.guidance_scale) != (MIXCUBE_STEPS, MIXCUBE_GUIDANCE):
        out.append(
            f"SDXL ran {inpaint.num_inference_steps} steps at guidance {inpaint.guidance_scale}, not "
            f"{MIXCUBE_STEPS} at {MIXCUBE_GUIDANCE}."
        )
    brisque, clip = config.filters.brisque, config.filters.clip
    if brisque is None:
        out.append("The BRISQUE filter was off.")
    elif brisque.max_score != BRISQUE_MAX:
        out.append(f"BRISQUE rejected scores above {brisque.max_score}, not above {BRISQUE_MAX}.")
    if clip is None:
        out.append("The CLIP similarity filter was off.")
    elif (clip.min_similarity, clip.max_similarity) != (CLIP_MIN, CLIP_MAX):
        out.append(
            f"CLIP similarity kept [{clip.min_similarity}, {clip.max_similarity}], not [{CLIP_MIN}, {CLIP_MAX}]."
        )
    out += review_deviation("synthesized images", reviewers, getattr(config.qa, "annotators", None), ANNOTATORS)
    return out
