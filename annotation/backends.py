"""The review backends shared by both reviews, and how a review of one kind finds its backend.

- `label_studio`: a Label Studio server (annotation/label_studio.py).
- `label_studio_files` (embedded default): importable task files plus a completed JSON export as the input
  (annotation/task_files.py); until an export is given, the auto-accept policy applies (recorded) or the build waits.
- `auto_accept`: every automatic decision stands, and each row says no human looked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, NoReturn

import fsspec
from pydantic import Field

from annotation.collect import ReviewTarget
from annotation.label_configs import SPECS, ReviewKind
from annotation.label_studio import LabelStudioProject, LabelStudioServerConfig
from annotation.task_files import TaskFiles
from annotation.tasks import MediaFolder
from data.review import ReviewContext
from data.review_labels import AUTO_ACCEPT
from data.stage import BackendConfig
from data.workspace import sha256_bytes


# A review's backend is made for one review kind and build (`review_target`), not by `build()`.
class AutoAcceptReviewConfig(BackendConfig[NoReturn]):
    backend: Literal["auto_accept"] = "auto_accept"


class LabelStudioFilesReviewConfig(BackendConfig[NoReturn]):
    """Offline: write importable task files; read a completed Label Studio JSON export back."""

    backend: Literal["label_studio_files"] = "label_studio_files"
    annotators: int = Field(default=3, ge=1, le=20, description="Annotators per task (3XCM §3.2.1: three).")
    completed_export: str | None = Field(
        default=None, description="fsspec path of the project's completed Label Studio JSON export."
    )
    document_root: str | None = Field(
        default=None,
        description="LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT the image URLs are written for; default: the build's "
        "files folder.",
    )
    when_unreviewed: Literal["auto_accept", "wait"] = Field(
        default="wait",
        description="Without a completed export: wait for it (the default: the papers' reviews are human, 3XCM App. J"
        ", MixCuBe §2), or apply the auto-accept policy, which every row and the release card record (the demos do).",
    )


class LabelStudioReviewConfig(BackendConfig[NoReturn]):
    backend: Literal["label_studio"] = "label_studio"
    server: LabelStudioServerConfig
    annotators: int = Field(default=3, ge=1, le=20, description="Annotators per task (3XCM §3.2.1: three).")
    wait_timeout_s: int | None = Field(
        default=None, ge=60, description="How long a suspended build waits for the reviews; None waits forever."
    )


ReviewConfig = Annotated[
    AutoAcceptReviewConfig | LabelStudioFilesReviewConfig | LabelStudioReviewConfig, Field(discriminator="backend")
]


@dataclass(frozen=True)
class BuildReview:
    """A build's review of one kind through its configured backend: what the engine and the sync-reviews flow ask of
    it (`data.review.Review`), and its share in its stage's fingerprint. Each benchmark's record names its own."""

    config: ReviewConfig
    kind: ReviewKind

    @property
    def wait_timeout_s(self) -> int | None:
        """Only a Label Studio server's review suspends a deployed build for a set time; the others never time out."""
        return self.config.wait_timeout_s if isinstance(self.config, LabelStudioReviewConfig) else None

    def completion(self, build_id: str) -> tuple[bool, str]:
        """Whether the build's review is done, by the backend's own cheap measure."""
        review = self.config
        if isinstance(review, LabelStudioReviewConfig):
            project = LabelStudioProject(review.server, SPECS[self.kind], build_id, review.annotators)
            progress = project.progress()
            return progress.complete, f"{progress.finished} of {progress.total} tasks done at {project.location}"
        if isinstance(review, LabelStudioFilesReviewConfig) and review.completed_export:
            exists = fsspec.core.url_to_fs(review.completed_export)[0].exists(review.completed_export)
            return exists, f"completed export {'found' if exists else 'missing'}: {review.completed_export}"
        return False, f"review backend {review.backend} has nothing to wait for"

    def settings(self) -> object:
        """The review's share in its stage's fingerprint: a new completed export at the same path is new input, so
        its content counts."""
        review = self.config
        if isinstance(review, LabelStudioFilesReviewConfig) and review.completed_export:
            fs, path = fsspec.core.url_to_fs(review.completed_export)
            with fs.open(path, "rb") as handle:
                return (review, sha256_bytes(handle.read()))
        return review


def review_target(
    config: ReviewConfig, kind: ReviewKind, ctx: ReviewContext
) -> tuple[ReviewTarget, MediaFolder] | None:
    """The backend of a review of `kind` for this build, with the folder its images are served from."""
    spec = SPECS[kind]
    if isinstance(config, LabelStudioReviewConfig):
        root = Path(config.server.export_root or Path(config.server.document_root) / "culturebench")
        media = MediaFolder(root / ctx.build_id / kind, config.server.document_root)
        project = LabelStudioProject(config.server, spec, ctx.build_id, config.annotators)
        project.ensure_storage(str(media.folder))
        return project, media
    if isinstance(config, LabelStudioFilesReviewConfig):
        folder = ctx.files_folder / "label_studio" / kind
        media = MediaFolder(folder / "images", config.document_root or ctx.files_folder)
        files = TaskFiles(folder, spec, ctx.build_id, config.annotators, media.document_root, config.completed_export)
        return files, media
    return None


def unreviewed_auto_accept(config: ReviewConfig) -> bool:
    """The files backend without a completed export, set to fall back on auto-accept."""
    return (
        isinstance(config, LabelStudioFilesReviewConfig)
        and config.when_unreviewed == AUTO_ACCEPT
        and not config.completed_export
    )


def publisher(media: MediaFolder, ctx: ReviewContext) -> Callable[[str, str], str]:
    """(sha256, extension) -> the Label Studio URL of that blob in the review's export folder."""
    return lambda sha, ext: media.publish(sha, ext, lambda: ctx.load_blob(sha), ctx.blob_path(sha))
