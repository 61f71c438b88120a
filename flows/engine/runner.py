"""Running a `BuildGraph`, with or without Prefect: shared by `build-3xcm` and `build-mixcube`.

With Prefect, each stage is a task named after the stage that publishes its counts as a table artifact; long
stages publish progress artifacts. A stage that waits for reviewers suspends the run (the worker is freed) until it
is resumed with a `ReviewResume`, by an operator in the UI or by the sync-reviews deployment.

Where a stage's shards run is decided here, once for the whole build (`placement`), and handed to every stage: on
the Dask cluster the build's `task_runner` names (a Prefect run: `flows/engine/scale_out.py`), else in local worker
processes for a large CPU-bound plan (`flows/engine/placement.py`), else one after another in the stage's own task.
The local workers stay up for the whole build, its release included. The `Build` runs a stage where it is told.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import fsspec
from prefect import get_run_logger, suspend_flow_run, task
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.cache_policies import INPUTS, NO_CACHE, TASK_SOURCE, CachePolicy
from prefect.context import FlowRunContext
from prefect.input import RunInput
from prefect.utilities.hashing import hash_objects
from pydantic import BaseModel, Field, SerializeAsAny

from data.figures import bars_png
from data.publish.folder import ReleaseResult
from data.review import Review, WaitingForReviewers
from data.stage_stats import StageStats
from data.workspace import Workspace
from flows.engine.graph import Build, Progress
from flows.engine.placement import LocalPlacement
from flows.engine.retries import RETRY_JITTER, STAGE_RETRIES, retry_delays, transient_failure
from flows.engine.scale_out import DaskShards, shard_map
from flows.engine.shards import MapShards, ShardPlan


class BuildSummary(BaseModel):
    build_id: str
    workspace: str
    release_path: str
    release_version: str
    release_status: str
    stages: list[SerializeAsAny[StageStats]]  # each as its stage's stats model, with its typed details
    skipped_stages: list[str] = Field(default_factory=list)
    validation: str = ""
    figures: list[str] = Field(default_factory=list, description="PNG figures in the workspace.")
    shard_placement: dict[str, dict[str, int]] = Field(
        default_factory=dict, description="Stage -> Dask worker -> shards it ran (empty on the default runner)."
    )


class StageRun(BaseModel):
    stage: str
    status: Literal["done", "skipped", "waiting"]
    detail: str = ""
    workers: dict[str, int] = Field(default_factory=dict, description="Dask worker -> shards it ran.")


class ReviewResume(RunInput):
    """What an operator (or the sync-reviews deployment) sends to resume a build that waits for reviews."""

    close_review: bool = Field(
        default=False,
        description="Import now even if tasks still lack annotations; those items are undecided and reported.",
    )
    note: str = Field(default="", description="Why the build was resumed (kept in the run's logs).")


class ReviewsNotFinished(RuntimeError):
    """A run outside a deployment met an open review."""


class BuildPlacement:
    """Where one build's sharded stages run (a `Placement`, `flows/engine/shards.py`), decided once: every plan on
    the Dask cluster when there is one, else as `LocalPlacement` puts it (local worker processes for a large
    CPU-bound plan, else the stage's own process)."""

    def __init__(self, local: LocalPlacement, dask: DaskShards | None = None) -> None:
        self.local, self.dask = local, dask

    def __call__(self, stage: str, plan: ShardPlan[Any]) -> MapShards:
        return self.dask if self.dask is not None else self.local(stage, plan)

    def workers(self, stage: str) -> dict[str, int]:
        """Dask worker -> the shards of `stage` it ran; empty off Dask."""
        return dict(self.dask.placement.get(stage, {})) if self.dask is not None else {}


@contextmanager
def placement(build: Build[Any], cluster: bool) -> Iterator[BuildPlacement]:
    """The build's placement for the length of the block: the Dask cluster its `task_runner` names, started (or
    reached) for the build, where `cluster` (a Prefect run; a run here keeps its shards on this machine), and the
    local worker processes, kept up from the first stage that needs them to the end of the release."""
    with shard_map(build) if cluster else nullcontext() as dask, LocalPlacement(build) as local:
        yield BuildPlacement(local, dask)


def execute(
    build: Build[Any],
    run: Callable[[str, bool], StageRun],
    wait: Callable[[StageRun, int], ReviewResume],
    do_release: Callable[[], ReleaseResult],
) -> BuildSummary:
    """Run the stages in order. A stage that waits for reviewers calls `wait`, then runs again with its answer."""
    skipped, placement = [], {}
    for name in build.names:
        outcome, waits = run(name, False), 0
        while outcome.status == "waiting":
            answer = wait(outcome, waits)
            waits += 1
            outcome = run(name, answer.close_review)
        if outcome.status == "skipped":
            skipped.append(name)
        if outcome.workers:
            placement[name] = outcome.workers
    result = do_release()
    ws = build.ws
    stats = build.stats()
    return BuildSummary(
        build_id=ws.build_id,
        workspace=ws.url,
        release_path=result.path,
        release_version=result.version,
        release_status=result.status,
        stages=stats,
        skipped_stages=skipped,
        validation=result.manifest.get("validation", {}).get("summary", ""),  # the release's own check
        figures=write_figures(ws, stats, result),
        shard_placement=placement,
    )


def write_figures(ws: Workspace, stats: list[StageStats], result: ReleaseResult) -> list[str]:
    """PNG figures of the build in its workspace (`files/figures/`): what each stage dropped and why, and copies of
    the release's figures. Returns their URLs."""
    drops = {f"{s.stage}: {reason}": n for s in stats for reason, n in s.dropped_by_reason.items() if n}
    figures = {"drops_by_stage.png": bars_png(drops, "Rows dropped, by stage and reason")}
    released = fsspec.core.url_to_fs(result.path)
    for path in released[0].glob(f"{released[1].rstrip('/')}/figures/*.png"):
        figures[f"release_{path.rsplit('/', 1)[-1]}"] = released[0].cat_file(path)
    out = []
    for name, data in sorted(figures.items()):
        ws.storage.write_bytes(ws.file_path("figures", name), data)
        out.append(ws.storage.fs.unstrip_protocol(ws.file_path("figures", name)))
    return out


def execute_locally(
    build: Build[Any],
    do_release: Callable[[], ReleaseResult],
    progress: Progress | None = None,
    close_reviews: bool = False,
) -> BuildSummary:
    """The whole build in this process, without Prefect (and without its Dask cluster). Open reviews raise
    `WaitingForReviewers`: rerun when done."""

    def cannot_wait(outcome: StageRun, waits: int) -> ReviewResume:
        raise AssertionError("stages raise WaitingForReviewers; they never return a waiting stage")

    with placement(build, cluster=False) as where:

        def run(name: str, close: bool) -> StageRun:
            _, skipped = build.run(name, progress, close or close_reviews, where)
            return StageRun(stage=name, status="skipped" if skipped else "done")

        return execute(build, run, cannot_wait, do_release)


# -- Prefect -------------------------------------------------------------------------------------------------------


def artifact_key(text: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in text.lower()).strip("-")


class ProgressArtifact:
    """A Prefect progress artifact per long stage, updated at most once per whole percent."""

    def __init__(self) -> None:
        self._ids: dict[str, Any] = {}
        self._last: dict[str, int] = {}

    def __call__(self, stage: str, done: int, total: int) -> None:
        percent = int(100 * done / total) if total else 100
        try:
            if stage not in self._ids:
                self._ids[stage] = create_progress_artifact(
                    progress=float(percent),
                    key=artifact_key(f"{stage}-progress"),
                    description=f"Stage `{stage}`: share of items done.",
                )
            elif percent > self._last.get(stage, -1):
                update_progress_artifact(artifact_id=self._ids[stage], progress=float(percent))
        except Exception as exc:  # progress is informative; it must never fail a stage
            get_run_logger().debug("progress artifact for %s not updated: %s", stage, exc)
        self._last[stage] = percent


# The build (its whole config) is not a key input: any change to it would rerun every stage. Its stage's share is,
# through the fingerprint (the stage's config section and every upstream one).
STAGE_INPUTS = INPUTS - "build"

# The placement of the build that this flow run executes (`execute_in_prefect`), for its stage tasks. Not a task
# parameter: Prefect sends a task's parameters along with the tasks submitted from it (the shard tasks, to Dask),
# and a placement holds this process's cluster client and worker pool.
_build_placement: ContextVar[BuildPlacement | None] = ContextVar("culturebench_build_placement", default=None)


def current_placement() -> BuildPlacement | None:
    """The placement of the build this flow run executes; None outside `execute_in_prefect` (the shards then run in
    order, in the stage's task). A function, not the variable itself, in the stage task: Prefect pickles the task's
    function by value, with the globals it names, and a ContextVar does not pickle."""
    return _build_placement.get()


@dataclass
class FinishedStage(CachePolicy):
    """Prefect's cache for a stage: INPUTS (the stage's name and review flag) + TASK_SOURCE + the stage's config
    hash (its fingerprint) + the workspace's completion marker. A stage whose marker is missing or stale, whose files
    no longer hash to what the marker recorded, or whose upstream bytes changed, has no key and always runs: a wiped
    or damaged workspace or a changed config is never answered from the cache, and a stage waiting for reviewers is
    never cached. (Prefect's own `INPUTS + TASK_SOURCE` would still key such a stage.)"""

    def compute_key(
        self, task_ctx: Any, inputs: dict[str, Any], flow_parameters: dict[str, Any], **kwargs: Any
    ) -> str | None:
        build, name = inputs["build"], inputs["name"]
        if not build.is_current(name):  # also when its files are damaged, or its upstream bytes changed
            return None
        ws = build.ws
        marker = ws.marker(name)
        keys = [
            policy.compute_key(task_ctx, inputs, flow_parameters, **kwargs) for policy in (STAGE_INPUTS, TASK_SOURCE)
        ]
        return hash_objects(build.graph.name, *keys, ws.url, marker.model_dump(mode="json"), raise_on_failure=True)


@task(
    cache_policy=FinishedStage(),
    persist_result=True,
    retries=STAGE_RETRIES,
    retry_jitter_factor=RETRY_JITTER,
    retry_condition_fn=transient_failure,
)
def stage_task(build: Build[Any], name: str, close_reviews: bool = False) -> StageRun:
    where = current_placement()
    try:
        marker, skipped = build.run(name, ProgressArtifact(), close_reviews, where)
    except WaitingForReviewers as pending:
        get_run_logger().info("%s: waiting for reviewers: %s", name, pending)
        create_markdown_artifact(
            key=artifact_key(f"{name}-waiting"),
            markdown=f"# Waiting for reviewers\n\n{pending}\n\nLabel Studio: {file_link(pending.location)}\n",
            description=f"Stage `{name}` waits for annotations.",
        )
        return StageRun(stage=name, status="waiting", detail=str(pending))
    ws = build.ws
    stats = build.stage_stats(name)
    if not skipped and stats.repaired_files:
        get_run_logger().warning("%s: redid damaged files: %s", name, stats.repaired_files)
    get_run_logger().info(
        "%s: %s (%d rows, kept %d, dropped %d)",
        name,
        "skipped, already done" if skipped else "done",
        marker.rows,
        stats.kept,
        stats.dropped,
    )
    create_table_artifact(
        key=artifact_key(f"{name}-stats"),
        table=[
            {
                "in": stats.rows_in,
                "kept": stats.kept,
                "dropped": stats.dropped,
                **{f"dropped:{k}": v for k, v in stats.dropped_by_reason.items()},
            }
        ],
        description=f"Stage `{name}`: rows in, kept and dropped by reason.",
    )
    summary_table = stats.summary_table
    if summary_table:  # e.g. the per-concept dedup summary
        create_table_artifact(
            key=artifact_key(f"{name}-{summary_table}"),
            table=ws.read_extra_table(name, summary_table).to_pylist(),
            description=f"Stage `{name}`: {summary_table.replace('_', ' ')}.",
        )
    workers = where.workers(name) if where is not None else {}
    return StageRun(stage=name, status="skipped" if skipped else "done", workers=workers)


def wait_for_reviews(build: Build[Any], review: Review, outcome: StageRun, waits: int) -> ReviewResume:
    """Suspend the run (the worker is freed) until it is resumed with a `ReviewResume`, or for as long as `review`
    waits.

    Suspension needs a deployment: the worker starts the run again on resume, finished stages are skipped, and the
    keyed suspend returns the input it was given. A run without a deployment cannot be started again, so it stops
    with the pending message instead; rerunning the build resumes it.
    """
    context = FlowRunContext.get()
    if context is None or context.flow_run is None or context.flow_run.deployment_id is None:
        raise ReviewsNotFinished(f"{outcome.detail}; run a deployment to wait for them, or rerun this build later")
    key = f"{outcome.stage}-{build.fingerprints[outcome.stage][:12]}-{waits}"
    answer = suspend_flow_run(wait_for_input=ReviewResume, key=key, timeout=review.wait_timeout_s)
    get_run_logger().info("resumed %s (close_review=%s): %s", outcome.stage, answer.close_review, answer.note)
    return answer


def execute_in_prefect(
    build: Build[Any], review: Review, close_reviews: bool, do_release: Callable[[], ReleaseResult]
) -> BuildSummary:
    """Inside a flow: one task per stage (with Dask, one more per shard of a sharded stage), a suspend per open
    review (as long as `review`, the build's, waits), the release as its own task."""
    release_task = task(name="release", cache_policy=NO_CACHE)(do_release)
    with placement(build, cluster=True) as where:
        token = _build_placement.set(where)
        try:
            return execute(
                build,
                lambda name, close: stage_task.with_options(name=name, retry_delay_seconds=retry_delays())(
                    build, name, close or close_reviews
                ),
                lambda outcome, waits: wait_for_reviews(build, review, outcome, waits),
                release_task,
            )
        finally:
            _build_placement.reset(token)


def summary_markdown(title: str, summary: BuildSummary) -> str:
    lines = [
        f"# {title} build `{summary.build_id}`",
        "",
        f"* release: `{summary.release_path}` (version {summary.release_version}, {summary.release_status})",
        f"* workspace: `{summary.workspace}`",
    ]
    if summary.validation:
        lines.append(f"* validation: {summary.validation}")
    lines += ["", "| stage | in | kept | dropped | by reason |", "|---|---|---|---|---|"]
    for s in summary.stages:
        lines.append(f"| {s.stage} | {s.rows_in} | {s.kept} | {s.dropped} | {s.reasons_text()} |")
    if summary.shard_placement:
        workers = sorted({w for counts in summary.shard_placement.values() for w in counts})
        lines += ["", "## Where the shards ran (Dask)", "", "| stage | " + " | ".join(workers) + " |"]
        lines.append("|---" * (len(workers) + 1) + "|")
        for stage, counts in summary.shard_placement.items():
            lines.append(f"| {stage} | " + " | ".join(str(counts.get(w, 0)) for w in workers) + " |")
    for stats in summary.stages:
        lines += review_markdown(stats)
    sheets = [(s.stage, s.contact_sheet) for s in summary.stages if s.contact_sheet]
    if sheets:  # paths are relative to the build workspace
        lines += ["", "## What was merged", ""]
        lines += [
            f"* [{stage}: contact sheet of the largest clusters]({file_link(f'{summary.workspace}/{path}')})"
            for stage, path in sheets
        ]
    if summary.figures:
        lines += ["", "## Figures", ""]
        lines += [f"* [{Path(f).stem.replace('_', ' ')}]({file_link(f)})" for f in summary.figures]
    return "\n".join(lines) + "\n"


def review_markdown(stats: StageStats | None) -> list[str]:
    if stats is None or stats.review is None:
        return []
    info = stats.review
    lines = ["", f"## Human review ({stats.stage})", "", f"* reviewer: `{info.reviewer}`"]
    if info.tasks is not None:
        agreement = info.agreement or {}
        kappa = agreement.get("fleiss_kappa")
        lines += [
            f"* tasks: {info.tasks} at {info.location}; decided {info.decided}, undecided {info.undecided}"
            + (" (closed before every task was annotated)" if info.closed_early else ""),
            f"* agreement: Fleiss' kappa {'n/a' if kappa is None else f'{kappa:.3f}'} over "
            f"{agreement.get('tasks_rated', 0)} tasks; {agreement.get('disagreements', 0)} with disagreement",
        ]
    return lines


def file_link(path: str) -> str:
    """A link the UI can follow: fsspec URLs stay as they are, local paths become file:// URLs."""
    return path if "://" in path else Path(path).resolve().as_uri()
