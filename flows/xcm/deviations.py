"""How a 3XCM build's backends and settings differ from the paper's, for the release card and datasheet.

A card may say that a build ran as the paper did only when nothing below applies; otherwise it lists every
difference. The paper's settings are cited where they are defined (the config defaults carry the same numbers).
"""

from __future__ import annotations

from typing import Any

from data.publish.card import review_deviation

#: 3XCM §3.2.1: concepts merge at BGE-M3 cosine >= 0.92; the top 10 images per query; three annotators per pair.
XCM_CONCEPT_COSINE = 0.92
XCM_TOP_K = 10
ANNOTATORS = 3


def xcm_deviations(config: Any, reviewer: str) -> list[str]:
    """Every 3XCM stage whose backend or setting is not the paper's (`reviewer`: who decided the review)."""
    out: list[str] = []
    if config.concept_dedup.backend != "bge-m3":
        out.append(
            f"Concepts were deduplicated lexically (character n-grams, threshold {config.concept_dedup.threshold}), "
            f"not by BGE-M3 cosine >= {XCM_CONCEPT_COSINE}."
        )
    elif config.concept_dedup.threshold != XCM_CONCEPT_COSINE:
        out.append(f"Concepts merged at BGE-M3 cosine >= {config.concept_dedup.threshold}, not {XCM_CONCEPT_COSINE}.")
    if config.translations.backend == "shipped":
        # The default pack's translations are the authors' drafts; a pack of its own says per language where each
        # entry came from (the card's "Reference pack" section), so nothing is claimed of them here.
        if config.pack().is_default:
            out.append("Translations are the shipped drafts, awaiting native review.")
        else:
            out.append("Translations are the reference pack's own (their origin per language is under Reference pack).")
    if config.search.backend == "local":
        out.append("Images came from a local folder, not a web search (for the demo: generated pictures, not photos).")
    if getattr(config.search, "license_filter", None) is not None:
        out.append(f"Image search kept only the licence class {config.search.license_filter}; the paper had no filter.")
    if config.search.max_results != XCM_TOP_K:
        out.append(f"The top {config.search.max_results} images per query were kept, not the top {XCM_TOP_K}.")
    if config.image_dedup.embedding is None:
        out.append("Near-duplicates were found by hashes only: the CLIP-embedding tier was off.")
    annotators = getattr(config.review, "annotators", None)
    out += review_deviation("near-duplicate decisions", [reviewer], annotators, ANNOTATORS)
    if config.tagging.backend != "gemini":
        out.append("Images are tagged with their own concept only (`tagger=none`), not by a multi-label tagger.")
    return out
