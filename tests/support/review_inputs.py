"""Test builders for the reviews: a blob store with a few images, dedup decisions with a review queue, synthesis
candidates, and Label Studio annotation results."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from PIL import Image

from annotation.backends import ReviewContext
from annotation.label_configs import MASK_CONTROL, RETRY_PROMPT_CONTROL, SPECS
from annotation.review import ReviewImage
from data import schemas
from data.workspace import Workspace


def picture(seed: int, size: tuple[int, int] = (96, 72), fmt: str = "JPEG") -> bytes:
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 255, (size[1] // 8, size[0] // 8, 3), dtype=np.uint8)
    image = Image.fromarray(pixels).resize(size, Image.Resampling.NEAREST)
    buffer = io.BytesIO()
    image.save(buffer, format=fmt)
    return buffer.getvalue()


@dataclass
class DedupReviewInputs:
    ws: Workspace
    decisions: pa.Table
    queue: pa.Table
    images: dict[str, ReviewImage]

    def context(self, files_folder: Path | None = None, accept_incomplete: bool = False) -> ReviewContext:
        return ReviewContext(
            build_id=self.ws.build_id,
            files_folder=files_folder or Path(self.ws.file_path()),
            load_blob=self.ws.blobs.get,
            blob_path=self.ws.blobs.path,
            accept_incomplete=accept_incomplete,
        )


def dedup_review_inputs(root: Path, pairs: int = 3, build_id: str = "review-test") -> DedupReviewInputs:
    """`pairs` queued pairs (p{i}a, p{i}b), each image its own cluster, plus one image merged automatically."""
    sizes = {f"p{i}{side}": size for i in range(pairs) for side, size in (("a", (96, 72)), ("b", (80, 60)))}
    return pair_graph_inputs(root, sizes, [(f"p{i}a", f"p{i}b") for i in range(pairs)], build_id, with_copy=True)


def pair_graph_inputs(
    root: Path,
    sizes: dict[str, tuple[int, int]],
    pairs: list[tuple[str, str]],
    build_id: str = "review-test",
    with_copy: bool = False,
) -> DedupReviewInputs:
    """Images of the given sizes, each its own cluster, and the queued pairs between them; `with_copy` adds an
    image merged automatically into the first one."""
    ws = Workspace(str(root), build_id)
    decisions, queue, images = [], [], {}
    for seed, (image_id, size) in enumerate(sizes.items()):
        sha = ws.blobs.put(picture(seed, size))
        images[image_id] = ReviewImage(sha, "jpg", size[0] * size[1])
        decisions.append(
            schemas.blank_row(
                schemas.IMAGE_DEDUP, image_id=image_id, concept_id=1, cluster_id=image_id, cluster_size=1, keep=True
            )
        )
    for a, b in pairs:
        queue.append(
            schemas.blank_row(
                schemas.REVIEW_QUEUE,
                image_a=a,
                image_b=b,
                concept_id=1,
                cluster_a=a,
                cluster_b=b,
                phash_distance=12.0,
                aligned_correlation=0.88,
            )
        )
    if not with_copy:
        return DedupReviewInputs(
            ws,
            schemas.from_rows(decisions, schemas.IMAGE_DEDUP),
            schemas.from_rows(queue, schemas.REVIEW_QUEUE),
            images,
        )
    first = next(iter(sizes))
    decisions.append(
        schemas.blank_row(
            schemas.IMAGE_DEDUP,
            image_id="copy",
            concept_id=1,
            cluster_id=first,
            cluster_size=2,
            keep=False,
            duplicate_of=first,
            method="exact_bytes",
            score=0.0,
            reason="exact_bytes",
        )
    )
    images["copy"] = images[first]
    return DedupReviewInputs(
        ws, schemas.from_rows(decisions, schemas.IMAGE_DEDUP), schemas.from_rows(queue, schemas.REVIEW_QUEUE), images
    )


def synthesis_candidates(ws: Workspace, originals: int = 2, ethnicities: tuple[str, ...] = ("African",)) -> pa.Table:
    rows = []
    for o in range(originals):
        original = ws.blobs.put(picture(100 + o, (96, 72)))
        mask_pixels = np.zeros((72, 96), dtype=np.uint8)
        mask_pixels[10:40, 20:60] = 255
        buffer = io.BytesIO()
        Image.fromarray(mask_pixels, mode="L").save(buffer, format="PNG")
        mask = ws.blobs.put(buffer.getvalue())
        for e, ethnicity in enumerate(ethnicities):
            rows.append(
                {
                    "attempt_id": f"orig{o}-{ethnicity}-1",
                    "original_id": f"orig{o}",
                    "ethnicity": ethnicity,
                    "attempt": 1,
                    "original_sha256": original,
                    "synthesized_sha256": ws.blobs.put(picture(200 + 10 * o + e, (96, 72))),
                    "mask_sha256": mask,
                    "prompt": f"{ethnicity} person(s) with food",
                    "brisque": 30.0 + o,
                    "clip_similarity": 0.9,
                }
            )
    return schemas.from_rows(rows, schemas.SYNTHESIS_QA_CANDIDATES)


def verdict(kind: str, choice: str) -> list[dict[str, Any]]:
    """An annotation result choosing `choice` (a choice name) in the review of `kind`."""
    spec = SPECS[kind]  # type: ignore[index]
    return [
        {
            "from_name": spec.verdict_control,
            "to_name": spec.verdict_target,
            "type": "choices",
            "value": {"choices": [choice]},
        }
    ]


def retry_text(prompt: str) -> dict[str, Any]:
    return {
        "from_name": RETRY_PROMPT_CONTROL,
        "to_name": "synthesized",
        "type": "textarea",
        "value": {"text": [prompt]},
    }


def brush(mask: np.ndarray) -> dict[str, Any]:
    from label_studio_sdk.converter.brush import mask2rle

    height, width = mask.shape
    return {
        "from_name": MASK_CONTROL,
        "to_name": "original",
        "type": "brushlabels",
        "original_width": width,
        "original_height": height,
        "image_rotation": 0,
        "value": {"format": "rle", "rle": mask2rle(mask.astype(np.uint8) * 255), "brushlabels": ["repaint"]},
    }


def completed_export(tasks: list[dict[str, Any]], results: dict[str, list[list[dict[str, Any]]]]) -> list[dict]:
    """A Label Studio JSON export of `tasks` where item key -> one result per annotator."""
    out = []
    for task_id, task in enumerate(tasks, start=1):
        key = task["data"]["item_key"]
        annotations = [
            {"id": 100 * task_id + n, "completed_by": n + 1, "result": result, "was_cancelled": False}
            for n, result in enumerate(results.get(key, []))
        ]
        out.append({"id": task_id, "data": task["data"], "annotations": annotations, "predictions": []})
    return out


def fill_rle(values: int, fill: int = 0, run_bits: int = 16) -> list[int]:
    """A brush RLE (Label Studio's rle-pack format) whose header promises `values` bytes, all `fill`, written as
    fill runs of up to 2**run_bits: a few KB that decode to gigabytes if a decoder trusts the header."""
    bits = [f"{values:032b}", f"{8 - 1:05b}", "".join(f"{size - 1:04b}" for size in (3, 4, 8, run_bits))]
    done = 0
    while done < values:
        run = min(values - done, 2**run_bits)
        bits.append(f"1{3:02b}{run - 1:0{run_bits}b}{fill:08b}")  # fill run, run-length size index 3
        done += run
    stream = "".join(bits)
    stream += "0" * (-len(stream) % 8)
    return [int(stream[i : i + 8], 2) for i in range(0, len(stream), 8)]
