"""What the engine knows of a stage's human review, whatever its backend: the backends live in `annotation/`, and the
engine (`flows/engine/`) imports none of them.

- `ReviewContext`: what a review stage hands its review (where the build lives, how to read an image).
- `WaitingForReviewers`: raised while annotators are at work (`annotation.collect.ReviewPending` is one); the engine
  catches it and waits (a Prefect run suspends), and reruns the stage once the reviewers are done.
- `Review`: a build's review as the engine and the sync-reviews flow ask it; each benchmark's record names its own
  (`Benchmark.review`), made by `annotation/backends.py` (`BuildReview`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from data.workspace import Workspace


@dataclass
class ReviewContext:
    """What the stage hands the review: where the build lives and how to read an image."""

    build_id: str
    files_folder: Path  # local folder of the build's files (the offline export goes below it)
    load_blob: Callable[[str], bytes]  # sha256 -> bytes
    blob_path: Callable[[str], str | None]  # sha256 -> local file of the blob, when there is one (for hard links)
    accept_incomplete: bool = False  # the operator closed the review

    @classmethod
    def of_workspace(cls, ws: Workspace, accept_incomplete: bool = False) -> ReviewContext:
        """The context of a build in `ws`. Label Studio reads the export from a local disk; a remote workspace
        exports to the temp folder."""
        local = "file" in ws.storage.fs.protocol
        return cls(
            build_id=ws.build_id,
            files_folder=Path(ws.file_path() if local else tempfile.gettempdir()) / ("" if local else ws.build_id),
            load_blob=ws.blobs.get,
            blob_path=(lambda sha: ws.blobs.path(sha)) if local else (lambda sha: None),
            accept_incomplete=accept_incomplete,
        )


class WaitingForReviewers(RuntimeError):
    """Annotators have not finished; the build waits and resumes when they have. `location`: where they work."""

    location: str


class Review(Protocol):
    """A build's human review, as the engine (`flows/engine/runner.py`) and `flows/sync_reviews.py` ask it."""

    @property
    def wait_timeout_s(self) -> int | None:
        """How long a suspended build waits for the reviewers; None: for as long as they take."""
        ...

    def completion(self, build_id: str) -> tuple[bool, str]:
        """Whether the build's review is done, by the backend's own cheap measure, and a line saying so."""
        ...
