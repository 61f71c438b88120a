"""Synthesis attempts: what to inpaint (a plan per original x ethnicity x attempt) and running a batch of plans.

An attempt is never overwritten: a retry is a new plan with the next attempt number, a seed of its own, and the
prompt or mask that the retry asked for (MixCuBe §2, App. B.1). Results are cached by everything that decides the
pixels (model, settings, the effective device type and dtype, original, mask, prompt, seed), so a stage redone for
an unrelated reason (a new review export upstream, say) does not inpaint the same request twice, and a build moved
from an fp32 CPU to an fp16 GPU draws again rather than reuse the CPU's pixels.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TypedDict

import pyarrow as pa
from PIL import Image

from data import schemas
from data.reference import MixCubeReference
from data.schemas import SynthesisAttemptRow, str_cell
from data.workspace import Storage, fingerprint
from synthesis.inpaint import InpaintConfig, Inpainter, InpaintRequest, InpaintResult, cache_settings
from synthesis.prompts import attempt_seed, ethnicity_labels, inpainting_prompt

FIRST = "first"
RESEED = "reseed"
JPEG_QUALITY = 95  # synthesized images are stored as JPEG, the format the release and the QA tasks serve


def attempt_id(original_id: str, ethnicity: str, attempt: int) -> str:
    return f"{original_id}-{ethnicity.lower()}-{attempt}"


@dataclass(frozen=True)
class AttemptPlan:
    original_id: str
    ethnicity: str
    attempt: int
    prompt: str
    seed: int
    original_sha256: str
    mask_sha256: str
    retry_kind: str = FIRST  # first | reseed | retry_prompt | fix_mask
    retry_of: str | None = None

    @property
    def attempt_id(self) -> str:
        return attempt_id(self.original_id, self.ethnicity, self.attempt)


def first_plans(
    originals: Sequence[Mapping[str, object]], masks: dict[str, str], mix: MixCubeReference, base_seed: int
) -> list[AttemptPlan]:
    """Attempt 1 for every original with a mask and every ethnicity of `mix`, with the App. B.1 batch prompt.
    `originals`: collected MIXCUBE_ORIGINALS rows (their `original_id`, `category` and `sha256` are read)."""
    return [
        AttemptPlan(
            original_id=str_cell(o, "original_id"),
            ethnicity=ethnicity,
            attempt=1,
            prompt=inpainting_prompt(mix, str_cell(o, "category"), ethnicity),
            seed=attempt_seed(mix, base_seed, str_cell(o, "original_id"), ethnicity, 1),
            original_sha256=str_cell(o, "sha256"),
            mask_sha256=masks[str_cell(o, "original_id")],
        )
        for o in originals
        if o["original_id"] in masks
        for ethnicity in ethnicity_labels(mix)
    ]


class AttemptOutcome(TypedDict):
    """What inpainting an attempt gave (the result cache keeps these): the SYNTHESIS_ATTEMPTS columns its plan does
    not decide."""

    model_id: str
    scheduler: str | None
    placeholder: bool
    sha256: str | None  # the synthesized image's blob; None on failure
    error: str | None


class ResultCache:
    """Finished attempts by request content, as small JSON files beside the build (`files/inpaint_cache/`)."""

    def __init__(self, storage: Storage, folder: str, config: InpaintConfig, inpainter: Inpainter) -> None:
        self.storage = storage
        self.folder = folder
        self.settings = cache_settings(config, inpainter)

    def _path(self, plan: AttemptPlan) -> str:
        key = fingerprint(self.settings, plan.original_sha256, plan.mask_sha256, plan.prompt, plan.seed, plan.ethnicity)
        return f"{self.folder}/{key[:2]}/{key}.json"

    def get(self, plan: AttemptPlan) -> AttemptOutcome | None:
        path = self._path(plan)
        cached: AttemptOutcome | None = self.storage.read_json(path) if self.storage.exists(path) else None
        return cached

    def put(self, plan: AttemptPlan, result: AttemptOutcome) -> None:
        self.storage.write_json(self._path(plan), result)


def _row(plan: AttemptPlan, outcome: AttemptOutcome) -> SynthesisAttemptRow:
    return {
        "attempt_id": plan.attempt_id,
        "original_id": plan.original_id,
        "ethnicity": plan.ethnicity,
        "attempt": plan.attempt,
        "prompt": plan.prompt,
        "seed": plan.seed,
        "mask_sha256": plan.mask_sha256,
        "retry_kind": plan.retry_kind,
        "retry_of": plan.retry_of,
        **outcome,
    }


def _outcome(result: InpaintResult, put_blob: Callable[[bytes], str]) -> AttemptOutcome:
    sha = None
    if result.image is not None:
        buffer = io.BytesIO()
        result.image.convert("RGB").save(buffer, format="JPEG", quality=JPEG_QUALITY)
        sha = put_blob(buffer.getvalue())
    return {
        "model_id": result.model_id,
        "scheduler": result.scheduler,
        "placeholder": result.placeholder,
        "sha256": sha,
        "error": result.error,
    }


def _open(data: bytes, mode: str) -> Image.Image:
    with Image.open(io.BytesIO(data)) as image:
        return image.convert(mode)


def run_attempts(
    inpainter: Inpainter,
    plans: Sequence[AttemptPlan],
    load_blob: Callable[[str], bytes],
    put_blob: Callable[[bytes], str],
    cache: ResultCache | None = None,
    device_slot: Callable[[], AbstractContextManager[None]] = nullcontext,
) -> pa.Table:
    """SYNTHESIS_ATTEMPTS rows for `plans`, in order. A failed attempt is a row with its error; it is not cached,
    so a rerun tries it again. The model runs inside `device_slot` (a Prefect concurrency slot on the GPU)."""
    outcomes: dict[int, AttemptOutcome] = {}
    todo: list[tuple[int, AttemptPlan]] = []
    for index, plan in enumerate(plans):
        cached = cache.get(plan) if cache else None
        if cached is not None:
            outcomes[index] = cached
        else:
            todo.append((index, plan))
    if todo:
        # An original and its mask serve every ethnicity: each blob is read and decoded once per call.
        images = {sha: _open(load_blob(sha), "RGB") for sha in {plan.original_sha256 for _, plan in todo}}
        masks = {sha: _open(load_blob(sha), "L") for sha in {plan.mask_sha256 for _, plan in todo}}
        requests = []
        for _, plan in todo:
            requests.append(
                InpaintRequest(
                    original_id=plan.original_id,
                    ethnicity=plan.ethnicity,
                    attempt=plan.attempt,
                    image=images[plan.original_sha256],
                    mask=masks[plan.mask_sha256],
                    prompt=plan.prompt,
                    seed=plan.seed,
                )
            )
        with device_slot():
            results = inpainter.inpaint(requests)
        for (index, plan), result in zip(todo, results, strict=True):
            outcome = _outcome(result, put_blob)
            outcomes[index] = outcome
            if cache is not None and outcome["error"] is None:
                cache.put(plan, outcome)
    rows = [_row(plan, outcomes[index]) for index, plan in enumerate(plans)]
    return schemas.from_rows(rows, schemas.SYNTHESIS_ATTEMPTS)
