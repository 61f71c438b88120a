"""Inpainting prompts and per-attempt seeds for MixCuBe synthesis.

The batch prompts are the per-category templates of the MixCuBe paper, App. B.1 ("{Ethnicity} person(s) in
clothes", "... with food", "... at an occasion"), which the reference pack's mixcube.json holds with its ethnicities
(the default pack's: African, Caucasian, East Asian, South Asian). Ethnicities are accepted by their dataset label
(`EastAsian`) or by the name the paper writes in prompts (`East Asian`).
"""

from __future__ import annotations

import hashlib

from data.reference import MixCubeEthnicity, MixCubeReference

SEED_BITS = 31  # fits a signed 32-bit int: torch, numpy and every table column take it


def ethnicity_labels(mix: MixCubeReference) -> list[str]:
    """The public dataset's `ethnicity` values for synthesized images (EastAsian, SouthAsian, ...)."""
    return [e.label for e in mix.ethnicities]


def resolve_ethnicity(mix: MixCubeReference, ethnicity: str) -> MixCubeEthnicity:
    """The pack's entry for a dataset label or a prompt name; a clear error for anything else."""
    for entry in mix.ethnicities:
        if ethnicity in (entry.label, entry.prompt_name):
            return entry
    known = ", ".join(f"{e.label!r} / {e.prompt_name!r}" for e in mix.ethnicities)
    raise ValueError(f"unknown ethnicity {ethnicity!r}; expected one of {known} (MixCuBe App. B.1)")


def inpainting_prompt(mix: MixCubeReference, category: str, ethnicity: str) -> str:
    """The App. B.1 batch prompt for `category`, with the ethnicity as the paper writes it in prompts."""
    templates = mix.inpainting_prompts
    if category not in templates:
        raise ValueError(f"unknown category {category!r}; expected one of {', '.join(map(repr, mix.categories))}")
    return templates[category].format(ethnicity=resolve_ethnicity(mix, ethnicity).prompt_name)


def attempt_seed(mix: MixCubeReference, base_seed: int, original_id: str, ethnicity: str, attempt: int) -> int:
    """A 31-bit seed of its own for each (original, ethnicity, attempt), stable across runs and machines.

    sha256 of the fields rather than `hash()` (salted per process) or `base_seed + attempt` (neighbouring originals
    would share seeds). The ethnicity is canonicalised to its dataset label, so 'East Asian' and 'EastAsian' agree.
    """
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, got {attempt}")
    label = resolve_ethnicity(mix, ethnicity).label
    key = "\x1f".join(("mixcube-inpaint", str(int(base_seed)), original_id, label, str(int(attempt))))
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") & ((1 << SEED_BITS) - 1)
