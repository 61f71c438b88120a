"""How a build's backends and settings differ from the papers', for the release cards.

A card may say that a build ran as the paper did only when nothing below applies; otherwise it lists every
difference. The papers' settings are cited where they are defined (the config defaults carry the same numbers).
"""

from __future__ import annotations

from typing import Any

from curation.synthesis_filters import BRISQUE_MAX, CLIP_MAX, CLIP_MIN
from data.review_labels import AUTO_ACCEPT
from synthesis.faces import PAPER_MAX_FACES, PAPER_MIN_CONFIDENCE

#: 3XCM §3.2.1: concepts merge at BGE-M3 cosine >= 0.92; the top 10 images per query; three annotators per pair.
XCM_CONCEPT_COSINE = 0.92
XCM_TOP_K = 10
ANNOTATORS = 3  # 3XCM §3.2.1 (duplicate review) and MixCuBe §2 (synthesis QA): three people per item
#: MixCuBe App. C.2: 60 diffusion steps at guidance scale 7.0.
MIXCUBE_STEPS = 60
MIXCUBE_GUIDANCE = 7.0


def review_deviation(what: str, reviewers: list[str], annotators: int | None) -> list[str]:
    if AUTO_ACCEPT in reviewers:
        return [f"No human reviewed the {what}: the auto-accept policy accepted them as they were."]
    if annotators is not None and annotators != ANNOTATORS:
        return [f"The {what} had {annotators} annotators per item, not {ANNOTATORS}."]
    return []


def xcm_deviations(config: Any, reviewer: str) -> list[str]:
    """Every 3XCM stage whose backend or setting is not the paper's (`reviewer`: who decided the review)."""
    out = []
    if config.concept_dedup.backend != "bge-m3":
        out.append(
            f"Concepts were deduplicated lexically (character n-grams, threshold {config.concept_dedup.threshold}), "
            f"not by BGE-M3 cosine >= {XCM_CONCEPT_COSINE}."
        )
    elif config.concept_dedup.threshold != XCM_CONCEPT_COSINE:
        out.append(f"Concepts merged at BGE-M3 cosine >= {config.concept_dedup.threshold}, not {XCM_CONCEPT_COSINE}.")
    if config.translations.backend == "shipped":
        out.append("Translations are the shipped drafts, awaiting native review.")
    if config.search.backend == "local":
        out.append("Images came from a local folder, not a web search (for the demo: generated pictures, not photos).")
    if getattr(config.search, "license_filter", None) is not None:
        out.append(f"Image search kept only the licence class {config.search.license_filter}; the paper had no filter.")
    if config.search.max_results != XCM_TOP_K:
        out.append(f"The top {config.search.max_results} images per query were kept, not the top {XCM_TOP_K}.")
    if config.image_dedup.embedding is None:
        out.append("Near-duplicates were found by hashes only: the CLIP-embedding tier was off.")
    out += review_deviation("near-duplicate decisions", [reviewer], getattr(config.review, "annotators", None))
    if config.tagging.backend != "gemini":
        out.append("Images are tagged with their own concept only (`tagger=none`), not by a multi-label tagger.")
    return out


def mixcube_deviations(config: Any, reviewers: list[str]) -> list[str]:
    """Every MixCuBe stage whose backend or setting is not the paper's (`reviewers`: who decided each QA round)."""
    out = []
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
    out += review_deviation("synthesized images", reviewers, getattr(config.qa, "annotators", None))
    return out
