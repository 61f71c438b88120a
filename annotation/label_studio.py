"""Production review backend: a Label Studio server through `label-studio-sdk`.

One project per build and review (keyed by `culturebench:<build id>:<review>` in its description, so re-exports
find it again). Tasks are imported in batches, only those whose item key the project lacks. Annotations come back
through the export snapshot API (one server-side JSON per pull), never by paging tasks. Transient failures (server
down, timeouts, 429/5xx) are retried with the shared backoff policy and then reported with the server's address and
the operation; the API key never appears in a message.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from annotation.aggregate import export_item_keys
from annotation.label_configs import GUIDELINES, ReviewSpec
from annotation.tasks import LabelStudioTask
from data.clients.retry import TRANSIENT_HTTP_CODES, GaveUp, RetryPolicy, RetryVerdict, call_with_retries
from data.clients.secrets import resolve_secret
from data.stage import require
from data.transient_errors import register_transient

T = TypeVar("T")
SERVER_REVIEWER = "label_studio"


class LabelStudioServerConfig(BaseModel):
    """Where the server is and how the build reaches it. Holds no secret, only where the key is found."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(default="http://127.0.0.1:8080", description="Base URL of the Label Studio server.")
    api_key_env: str = Field(
        default="LABEL_STUDIO_API_KEY", description="Environment variable holding an access token of the server."
    )
    api_key_secret_block: str | None = Field(
        default=None, description="Name of a Prefect Secret block holding the token; wins over the environment."
    )
    document_root: str = Field(
        description="The server's LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT; review images are exported below it."
    )
    export_root: str | None = Field(
        default=None,
        description="Folder under document_root holding <build id>/<review>/ image folders; default "
        "<document_root>/culturebench.",
    )
    import_batch_size: int = Field(default=200, ge=1, le=5000, description="Tasks per import request.")
    timeout_s: float = Field(default=60.0, gt=0, description="Per HTTP request.")
    export_timeout_s: float = Field(default=600.0, gt=0, description="How long a snapshot export may take.")
    retry: RetryPolicy = Field(default_factory=lambda: RetryPolicy(max_attempts=5, base_delay_s=1.0))


class LabelStudioUnavailable(RuntimeError):
    """The server could not be reached or kept failing transiently; nothing was written."""


register_transient(LabelStudioUnavailable)  # a later attempt of the stage may find the server up


class LabelStudioRejected(RuntimeError):
    """The server answered with a client error (bad token, bad request): retrying will not help."""


@dataclass(frozen=True)
class ReviewProgress:
    total: int
    finished: int  # tasks with their full number of annotations

    @property
    def complete(self) -> bool:
        return self.total > 0 and self.finished >= self.total


def resolve_token(config: LabelStudioServerConfig) -> str:
    return resolve_secret(config.api_key_secret_block, [config.api_key_env], "Label Studio token", LabelStudioRejected)


def project_key(build_id: str, kind: str) -> str:
    return f"culturebench:{build_id}:{kind}"


class LabelStudioProject:
    """The project of one build and review on a server."""

    reviewer = SERVER_REVIEWER

    def __init__(
        self,
        config: LabelStudioServerConfig,
        spec: ReviewSpec,
        build_id: str,
        annotators: int,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = config
        self.spec = spec
        self.key = project_key(build_id, spec.kind)
        self.build_id = build_id
        self.annotators = annotators
        self._sleep = sleep
        sdk = require("label_studio_sdk", "annotation")
        # The SDK's default api_key is read from the environment once, when the SDK is imported, and its default
        # base_url is http://localhost:8000: always pass both.
        self._client = sdk.LabelStudio(
            base_url=config.url.rstrip("/"), api_key=resolve_token(config), timeout=config.timeout_s
        )
        self._project_id: int | None = None

    @property
    def location(self) -> str:
        suffix = f"/projects/{self._project_id}" if self._project_id is not None else ""
        return f"{self.config.url.rstrip('/')}{suffix}"

    # -- calls with classified retries ----------------------------------------------------------------------

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        import httpx
        from label_studio_sdk.core.api_error import ApiError

        def classify(exc: Exception) -> RetryVerdict | None:
            if isinstance(exc, ApiError):
                return RetryVerdict((exc.status_code or 0) in TRANSIENT_HTTP_CODES)
            if isinstance(exc, httpx.TransportError | ConnectionError):
                return RetryVerdict(True)
            return None

        try:
            return call_with_retries(fn, classify, self.config.retry, sleep=self._sleep, too_long_fails=False)
        except GaveUp as gave_up:
            exc = gave_up.cause
            if not gave_up.verdict.transient:
                status = exc.status_code if isinstance(exc, ApiError) else 0
                raise LabelStudioRejected(
                    f"Label Studio at {self.config.url} refused {what}: HTTP {status}: "
                    f"{_detail(getattr(exc, 'body', None))}"
                ) from None
            failure = f"HTTP {exc.status_code}" if isinstance(exc, ApiError) else type(exc).__name__
            raise LabelStudioUnavailable(
                f"Label Studio at {self.config.url} is unavailable while {what}: {failure} "
                f"after {gave_up.attempts} attempts; start the server or fix review.server.url, then rerun"
            ) from None

    # -- project ------------------------------------------------------------------------------------------------

    def ensure_project(self) -> int:
        """Find this build's project by key, or create it; an outdated labeling config is updated in place."""
        if self._project_id is not None:
            return self._project_id
        projects = self._call("listing projects", lambda: list(self._client.projects.list()))
        found = next((p for p in projects if (p.description or "").splitlines()[:1] == [self.key]), None)
        settings = {
            "label_config": self.spec.label_config,
            "maximum_annotations": self.annotators,
            "overlap_cohort_percentage": 100,
            "expert_instruction": f"<p>{GUIDELINES[self.spec.kind]}</p>",
            "show_instruction": True,
            "show_skip_button": True,
        }
        if found is None:
            title = f"{self.spec.title} {self.build_id}"[:50]  # the server caps titles at 50 characters
            description = f"{self.key}\nCreated by culturebench for build {self.build_id}."
            created = self._call(
                "creating the project",
                lambda: self._client.projects.create(title=title, description=description, **settings),
            )
            self._project_id = int(created.id)
        else:
            self._project_id = int(found.id)
            if found.label_config != self.spec.label_config or found.maximum_annotations != self.annotators:
                self._call(
                    "updating the project", lambda: self._client.projects.update(id=self._project_id, **settings)
                )
        return self._project_id

    def ensure_storage(self, folder: str) -> None:
        """Local-file storage rooted at the export folder: the server serves those files and no others."""
        pid = self.ensure_project()
        storages = self._call("listing storages", lambda: list(self._client.import_storage.local.list(project=pid)))
        if any(os.path.normpath(s.path or "") == os.path.normpath(folder) for s in storages):
            return
        self._call(
            "creating the local-file storage",
            lambda: self._client.import_storage.local.create(
                project=pid, path=folder, use_blob_urls=False, title=f"{self.key} images"[:2048]
            ),
        )

    # -- export, progress, pull ---------------------------------------------------------------------------------

    def export(self, tasks: list[LabelStudioTask]) -> tuple[int, int]:
        """Import the tasks the project does not hold yet. Returns (new tasks, tasks in the project)."""
        pid = self.ensure_project()
        existing = export_item_keys(self.snapshot(), self.spec)  # a malformed snapshot is named, not a KeyError
        new = [t for t in tasks if t["data"]["item_key"] not in existing]
        for batch in _batches(new, self.config.import_batch_size):
            self._call(
                f"importing {len(batch)} tasks",
                partial(self._client.projects.import_tasks, id=pid, request=batch, return_task_ids=True),
            )
        return len(new), len(existing) + len(new)

    def progress(self) -> ReviewProgress:
        pid = self.ensure_project()
        project = self._call("reading the project", lambda: self._client.projects.get(id=pid))
        return ReviewProgress(total=int(project.task_number or 0), finished=int(project.finished_task_number or 0))

    def snapshot(self) -> list[dict[str, JsonValue]]:
        """Every task with its annotations, through one export snapshot (created, awaited, downloaded, deleted)."""
        pid = self.ensure_project()
        exports = self._client.projects.exports
        snap = self._call("creating an export snapshot", lambda: exports.create(pid, title=f"{self.key} pull"))
        deadline = time.monotonic() + self.config.export_timeout_s
        try:
            while snap.status != "completed":
                if snap.status == "failed":
                    raise LabelStudioRejected(f"Label Studio export snapshot {snap.id} of project {pid} failed")
                if time.monotonic() > deadline:
                    raise LabelStudioUnavailable(
                        f"Label Studio export snapshot {snap.id} of project {pid} did not finish in "
                        f"{self.config.export_timeout_s:.0f} s (status {snap.status})"
                    )
                self._sleep(1.0)
                snap = self._call("polling the export snapshot", partial(exports.get, pid, export_pk=snap.id))
            raw = self._call(
                "downloading the export snapshot",
                lambda: b"".join(exports.download(pid, export_pk=snap.id, export_type="JSON")),
            )
        finally:
            # A leftover snapshot is harmless; the pull itself succeeded or already failed.
            with contextlib.suppress(Exception):
                exports.delete(pid, export_pk=snap.id)
        try:
            tasks = json.loads(raw)
        except json.JSONDecodeError:
            raise LabelStudioRejected(f"Label Studio export snapshot of project {pid} is not JSON") from None
        return tasks if isinstance(tasks, list) else []


def _batches(items: list[T], size: int) -> Iterator[list[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _detail(body: Any) -> str:
    if isinstance(body, dict):
        body = body.get("detail") or body.get("validation_errors") or body
    return str(body)[:300]
