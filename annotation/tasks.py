"""Label Studio tasks (with the automatic scores as predictions) and the folder their images are served from.

Images are served by Label Studio's local-file storage rooted at one export folder per build and review. The folder
holds a copy (a hard link where possible) of exactly the images that tasks reference, named by sha256, so a
storage rooted there cannot expose anything else of the build, let alone of the machine. The URL form
`/data/local-files/?d=<path under the server's document root>` is the same for the server and the offline files.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import NotRequired, TypedDict
from urllib.parse import quote

import pyarrow as pa

from annotation.label_configs import GUIDELINES, SAME_SCENE, SPECS, ReviewSpec
from data.review_labels import ACCEPT

MODEL_VERSION = "culturebench-automatic"
EXTENSIONS = {"JPEG": "jpg", "PNG": "png", "WEBP": "webp", "GIF": "gif", "BMP": "bmp", "TIFF": "tif"}


# -- the task payloads: what we import into Label Studio (and write to a review's tasks.json) ----------------------


class ChoiceValue(TypedDict):
    choices: list[str]


class ChoiceRegion(TypedDict):
    """A prediction's answer to one choices control."""

    from_name: str
    to_name: str
    type: str
    value: ChoiceValue


class Prediction(TypedDict):
    model_version: str
    score: float | None
    result: list[ChoiceRegion]


class DuplicateTaskData(TypedDict):
    """What a duplicate review task shows: the pair, its automatic scores and the guideline."""

    item_key: str  # image_a|image_b
    image_a: str
    image_b: str
    image_a_id: str
    image_b_id: str
    concept_id: int
    scores: str
    guideline: str


class SynthesisTaskData(TypedDict):
    """What a synthesis QA task shows: original, synthesized image and mask, the attempt and its scores."""

    item_key: str  # the attempt id
    original: str
    synthesized: str
    mask: str
    original_id: str
    ethnicity: str
    attempt: int
    prompt: str
    scores: str
    guideline: str


class TranslationTaskData(TypedDict):
    """What a translation review task shows (`annotation.translation_review.translation_tasks`)."""

    item_key: str
    language_name: str
    guideline: str
    source: str
    context: str
    draft: str
    example: str


class LabelStudioTask(TypedDict):
    """One task as imported: the fields the labeling interface shows (`item_key` names the item reviewed), and the
    automatic scores' suggestion, if any."""

    data: DuplicateTaskData | SynthesisTaskData | TranslationTaskData
    predictions: NotRequired[list[Prediction]]


class MediaFolder:
    """The export folder of one review; `publish` puts an image there and returns its Label Studio URL."""

    def __init__(self, folder: str | Path, document_root: str | Path) -> None:
        self.folder = Path(folder).resolve()
        self.document_root = Path(document_root).resolve()
        if not self.folder.is_relative_to(self.document_root):
            raise ValueError(
                f"the review export folder {self.folder} must lie under the Label Studio document root "
                f"{self.document_root} (LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT)"
            )
        self.folder.mkdir(parents=True, exist_ok=True)

    def publish(self, sha256: str, extension: str, source: Callable[[], bytes], local_path: str | None = None) -> str:
        name = f"{sha256}.{extension}"
        target = self.folder / name
        if not target.exists():
            tmp = target.with_suffix(f".{os.getpid()}.tmp")
            try:  # a hard link costs nothing when the blob store is on the same local disk
                if local_path is None:
                    raise OSError("no local blob")
                os.link(local_path, tmp)
            except OSError:
                tmp.write_bytes(source())
            os.replace(tmp, target)
        return self.url(name)

    def url(self, name: str) -> str:
        relative = (self.folder / name).relative_to(self.document_root).as_posix()
        return f"/data/local-files/?d={quote(relative)}"

    def files(self) -> list[str]:
        return sorted(p.name for p in self.folder.iterdir() if p.is_file() and not p.name.endswith(".tmp"))


def _choice_prediction(spec: ReviewSpec, choice: str, score: float | None) -> Prediction:
    return {
        "model_version": MODEL_VERSION,
        "score": None if score is None else round(float(score), 4),
        "result": [
            {
                "from_name": spec.verdict_control,
                "to_name": spec.verdict_target,
                "type": "choices",
                "value": {"choices": [choice]},
            }
        ],
    }


def _fmt(name: str, value: float | None, digits: int = 3) -> str | None:
    return None if value is None else f"{name} {value:.{digits}f}"


def duplicate_item_key(image_a: str, image_b: str) -> str:
    return f"{image_a}|{image_b}"


def duplicate_review_tasks(queue: pa.Table, image_url: Callable[[str], str]) -> list[LabelStudioTask]:
    """One task per queued pair. The prediction suggests "same scene" with the strongest similarity as its score:
    every queued pair is in a tier's review band, so that is the question the annotators settle."""
    spec = SPECS["duplicate_review"]
    tasks: list[LabelStudioTask] = []
    for row in queue.to_pylist():
        scores = [
            _fmt("pHash distance", row["phash_distance"], 0),
            _fmt("aligned correlation", row["aligned_correlation"]),
            _fmt("CLIP cosine", row["embedding_cosine"]),
        ]
        similarities = (row["aligned_correlation"], row["embedding_cosine"])
        strength = max((v for v in similarities if v is not None), default=None)
        tasks.append(
            {
                "data": {
                    "item_key": duplicate_item_key(row["image_a"], row["image_b"]),
                    "image_a": image_url(row["image_a"]),
                    "image_b": image_url(row["image_b"]),
                    "image_a_id": row["image_a"],
                    "image_b_id": row["image_b"],
                    "concept_id": row["concept_id"],
                    "scores": "automatic scores: " + ", ".join(s for s in scores if s),
                    "guideline": GUIDELINES["duplicate_review"],
                },
                "predictions": [_choice_prediction(spec, SAME_SCENE, strength)],
            }
        )
    return tasks


def synthesis_qa_tasks(candidates: pa.Table, image_url: Callable[[str, str], str]) -> list[LabelStudioTask]:
    """One task per synthesis attempt; `image_url(sha256, role)` publishes original, result and mask.

    The prediction suggests "accept": these attempts already passed BRISQUE and CLIP (MixCuBe App. A.6)."""
    spec = SPECS["synthesis_qa"]
    tasks: list[LabelStudioTask] = []
    for row in candidates.to_pylist():
        scores = [_fmt("BRISQUE", row["brisque"], 1), _fmt("CLIP image similarity", row["clip_similarity"])]
        tasks.append(
            {
                "data": {
                    "item_key": row["attempt_id"],
                    "original": image_url(row["original_sha256"], "original"),
                    "synthesized": image_url(row["synthesized_sha256"], "synthesized"),
                    "mask": image_url(row["mask_sha256"], "mask"),
                    "original_id": row["original_id"],
                    "ethnicity": row["ethnicity"],
                    "attempt": row["attempt"],
                    "prompt": row["prompt"],
                    "scores": "automatic scores: " + ", ".join(s for s in scores if s),
                    "guideline": GUIDELINES["synthesis_qa"],
                },
                "predictions": [_choice_prediction(spec, ACCEPT, row["clip_similarity"])],
            }
        )
    return tasks
