"""`build-3xcm`: the Prefect flow, and the same build without Prefect for the CLI.

The flow is wiring only: one task per stage (named after the stage) in graph order, then the release. Finished
stages are skipped through the workspace's completion markers, so a rerun of the same config resumes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from prefect import flow, get_run_logger, suspend_flow_run, task
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.cache_policies import NO_CACHE
from prefect.context import FlowRunContext
from prefect.input import RunInput
from pydantic import BaseModel, Field

from annotation.collect import ReviewPending
from data import release_3xcm
from data.provenance import code_version, redact, reference_data_sha256
from data.release import ReleaseResult
from data.workspace import StageStats, Workspace
from flows.config import Build3XCMConfig
from flows.stages_3xcm import STAGES, Progress, run_stage, stage_fingerprints


class BuildSummary(BaseModel):
    build_id: str
    workspace: str
    release_path: str
    release_version: str
    release_status: str
    stages: list[StageStats]
    skipped_stages: list[str] = Field(default_factory=list)
    validation: str


def backends(config: Build3XCMConfig) -> dict[str, str]:
    return {
        "concepts": config.concepts.backend,
        "concept_dedup": config.concept_dedup.backend,
        "translations": config.translations.backend,
        "search": config.search.backend,
        "images": config.download.backend,
        "image_dedup": config.image_dedup.tiers_label(),
        "review": config.review.backend,
        "tagging": config.tagging.backend,
    }


def provenance(config: Build3XCMConfig, ws: Workspace) -> dict[str, Any]:
    stats = [ws.stats(stage.name) for stage in STAGES]
    by_name = {s.stage: s for s in stats}
    review = by_name["review"].extra.get("review", {})
    return {
        "build_id": ws.build_id,
        "config": redact(config.model_dump(mode="json", exclude={"workspace_root"})),
        "code_version": code_version(),
        "reference_data_sha256": reference_data_sha256(),
        "seeds": {
            "assembly": config.assembly.seed,
            "demo_corpus": config.demo_corpus.seed if config.demo_corpus else None,
        },
        # Who actually reviewed: the files backend falls back on auto-accept until a completed export arrives.
        "backends": {**backends(config), "review": review.get("reviewer", "?")},
        "review": review,
        "stage_fingerprints": stage_fingerprints(config),
        "stage_stats": [s.model_dump(mode="json") for s in stats],
        "reuse": by_name["assembly"].extra.get("reuse", {}),
        "validation": {"summary": by_name["validation"].extra.get("summary", "")},
    }


def release(config: Build3XCMConfig) -> ReleaseResult:
    """Materialise the validated build into `<release.root>/3xcm/<version>/`."""
    ws = Workspace(config.workspace_root, config.resolved_build_id())
    return release_3xcm.write_3xcm_release(
        config.release,
        ws.blobs,
        ws.read_table("image_metadata"),
        ws.read_table("assembly"),
        ws.read_extra_table("assembly", "benchmark_cd"),
        provenance(config, ws),
    )


class StageRun(BaseModel):
    stage: str
    status: Literal["done", "skipped", "waiting"]
    detail: str = ""


class ReviewResume(RunInput):
    """What an operator (or the sync-reviews deployment) sends to resume a build that waits for reviews."""

    close_review: bool = Field(
        default=False,
        description="Import now even if tasks still lack annotations; those items are undecided and reported.",
    )
    note: str = Field(default="", description="Why the build was resumed (kept in the run's logs).")


def execute(
    config: Build3XCMConfig,
    run: Callable[[str, bool], StageRun],
    wait: Callable[[StageRun, int], ReviewResume],
    do_release: Callable[[], ReleaseResult],
) -> BuildSummary:
    """Run the stages in order. A stage that waits for reviewers calls `wait`, then runs again with its answer."""
    skipped = []
    for stage in STAGES:
        outcome, waits = run(stage.name, False), 0
        while outcome.status == "waiting":
            answer = wait(outcome, waits)
            waits += 1
            outcome = run(stage.name, answer.close_review)
        if outcome.status == "skipped":
            skipped.append(stage.name)
    result = do_release()
    ws = Workspace(config.workspace_root, config.resolved_build_id())
    stats = [ws.stats(stage.name) for stage in STAGES]
    return BuildSummary(
        build_id=ws.build_id,
        workspace=ws.url,
        release_path=result.path,
        release_version=result.version,
        release_status=result.status,
        stages=stats,
        skipped_stages=skipped,
        validation=next(s for s in stats if s.stage == "validation").extra.get("summary", ""),
    )


def build_locally(
    config: Build3XCMConfig, progress: Progress | None = None, close_reviews: bool = False
) -> BuildSummary:
    """The whole build in this process, without Prefect. Open reviews raise `ReviewPending`: rerun when done."""

    def run(name: str, close: bool) -> StageRun:
        _, skipped = run_stage(name, config, progress, accept_incomplete=close or close_reviews)
        return StageRun(stage=name, status="skipped" if skipped else "done")

    def cannot_wait(outcome: StageRun, waits: int) -> ReviewResume:
        raise AssertionError("run_stage raises ReviewPending; it never returns a waiting stage")

    return execute(config, run, cannot_wait, lambda: release(config))


# -- Prefect -------------------------------------------------------------------------------------------------------


def _artifact_key(text: str) -> str:
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
                    key=_artifact_key(f"{stage}-progress"),
                    description=f"Stage `{stage}`: share of items done.",
                )
            elif percent > self._last.get(stage, -1):
                update_progress_artifact(artifact_id=self._ids[stage], progress=float(percent))
        except Exception as exc:  # progress is informative; it must never fail a stage
            get_run_logger().debug("progress artifact for %s not updated: %s", stage, exc)
        self._last[stage] = percent


@task(cache_policy=NO_CACHE)
def stage_task(name: str, config: Build3XCMConfig, close_reviews: bool = False) -> StageRun:
    try:
        marker, skipped = run_stage(name, config, ProgressArtifact(), accept_incomplete=close_reviews)
    except ReviewPending as pending:
        get_run_logger().info("%s: waiting for reviewers: %s", name, pending)
        create_markdown_artifact(
            key=_artifact_key(f"{name}-waiting"),
            markdown=f"# Waiting for reviewers\n\n{pending}\n\nLabel Studio: {file_link(pending.location)}\n",
            description=f"Stage `{name}` waits for annotations.",
        )
        return StageRun(stage=name, status="waiting", detail=str(pending))
    ws = Workspace(config.workspace_root, config.resolved_build_id())
    stats = ws.stats(name)
    get_run_logger().info(
        "%s: %s (%d rows, kept %d, dropped %d)",
        name,
        "skipped, already done" if skipped else "done",
        marker.rows,
        stats.kept,
        stats.dropped,
    )
    create_table_artifact(
        key=_artifact_key(f"{name}-stats"),
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
    summary_table = stats.extra.get("summary_table")
    if summary_table:  # e.g. the per-concept dedup summary
        create_table_artifact(
            key=_artifact_key(f"{name}-{summary_table}"),
            table=ws.read_extra_table(name, summary_table).to_pylist(),
            description=f"Stage `{name}`: {summary_table.replace('_', ' ')}.",
        )
    return StageRun(stage=name, status="skipped" if skipped else "done")


def wait_for_reviews(config: Build3XCMConfig, outcome: StageRun, waits: int) -> ReviewResume:
    """Suspend the run (the worker is freed) until it is resumed with a `ReviewResume`.

    Suspension needs a deployment: the worker starts the run again on resume, finished stages are skipped, and the
    keyed suspend returns the input it was given. A run without a deployment cannot be started again, so it stops
    with the pending message instead; rerunning the build resumes it.
    """
    context = FlowRunContext.get()
    if context is None or context.flow_run is None or context.flow_run.deployment_id is None:
        raise ReviewsNotFinished(f"{outcome.detail}; run a deployment to wait for them, or rerun this build later")
    fingerprints = stage_fingerprints(config)
    timeout = getattr(config.review, "wait_timeout_s", None)
    key = f"{outcome.stage}-{fingerprints[outcome.stage][:12]}-{waits}"
    answer = suspend_flow_run(wait_for_input=ReviewResume, key=key, timeout=timeout)
    get_run_logger().info("resumed %s (close_review=%s): %s", outcome.stage, answer.close_review, answer.note)
    return answer


class ReviewsNotFinished(RuntimeError):
    """A run outside a deployment met an open review."""


@task(name="release", cache_policy=NO_CACHE)
def release_task(config: Build3XCMConfig) -> ReleaseResult:
    return release(config)


@flow(name="build-3xcm", log_prints=True, persist_result=True)
def build_3xcm(
    config: Build3XCMConfig = Build3XCMConfig.demo(),  # noqa: B008
    close_reviews: bool = False,
) -> BuildSummary:
    """Build and release 3XCM; stages that already finished for this config are skipped. An open review suspends
    the run until the reviewers are done (resume it from the UI, or let the sync-reviews deployment do it).
    `close_reviews` imports open reviews as they stand: items short of annotations are undecided and reported."""
    summary = execute(
        config,
        lambda name, close: stage_task.with_options(name=name)(name, config, close or close_reviews),
        lambda outcome, waits: wait_for_reviews(config, outcome, waits),
        lambda: release_task(config),
    )
    create_markdown_artifact(
        key="build-3xcm-summary",
        markdown=summary_markdown(summary),
        description="Release, counts and validation of this build.",
    )
    return summary


def summary_markdown(summary: BuildSummary) -> str:
    lines = [
        f"# 3XCM build `{summary.build_id}`",
        "",
        f"* release: `{summary.release_path}` (version {summary.release_version}, {summary.release_status})",
        f"* workspace: `{summary.workspace}`",
        f"* validation: {summary.validation}",
        "",
        "| stage | in | kept | dropped | by reason |",
        "|---|---|---|---|---|",
    ]
    for s in summary.stages:
        lines.append(f"| {s.stage} | {s.rows_in} | {s.kept} | {s.dropped} | {s.reasons_text()} |")
    lines += review_markdown(next((s for s in summary.stages if s.stage == "review"), None))
    sheets = [(s.stage, s.extra["contact_sheet"]) for s in summary.stages if s.extra.get("contact_sheet")]
    if sheets:  # paths are relative to the build workspace
        lines += ["", "## What was merged", ""]
        lines += [
            f"* [{stage}: contact sheet of the largest clusters]({file_link(f'{summary.workspace}/{path}')})"
            for stage, path in sheets
        ]
    return "\n".join(lines) + "\n"


def review_markdown(stats: StageStats | None) -> list[str]:
    info = stats.extra.get("review", {}) if stats else {}
    if not info:
        return []
    lines = ["", "## Human review", "", f"* reviewer: `{info['reviewer']}`"]
    if "tasks" in info:
        agreement = info.get("agreement", {})
        kappa = agreement.get("fleiss_kappa")
        lines += [
            f"* tasks: {info['tasks']} at {info['location']}; decided {info['decided']}, undecided {info['undecided']}"
            + (" (closed before every task was annotated)" if info.get("closed_early") else ""),
            f"* agreement: Fleiss' kappa {'n/a' if kappa is None else f'{kappa:.3f}'} over "
            f"{agreement.get('tasks_rated', 0)} tasks; {agreement.get('disagreements', 0)} with disagreement",
        ]
    return lines


def file_link(path: str) -> str:
    """A link the UI can follow: fsspec URLs stay as they are, local paths become file:// URLs."""
    return path if "://" in path else Path(path).resolve().as_uri()
