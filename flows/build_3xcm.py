"""`build-3xcm`: the Prefect flow, and the same build without Prefect for the CLI.

The flow is wiring only: one task per stage (named after the stage) in graph order, then the release. Finished
stages are skipped through the workspace's completion markers, so a rerun of the same config resumes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel, Field

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
    return {
        "build_id": ws.build_id,
        "config": redact(config.model_dump(mode="json", exclude={"workspace_root"})),
        "code_version": code_version(),
        "reference_data_sha256": reference_data_sha256(),
        "seeds": {
            "assembly": config.assembly.seed,
            "demo_corpus": config.demo_corpus.seed if config.demo_corpus else None,
        },
        "backends": backends(config),
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


def execute(
    config: Build3XCMConfig,
    run: Callable[[str], tuple[Any, bool]],
    do_release: Callable[[], ReleaseResult],
) -> BuildSummary:
    skipped = []
    for stage in STAGES:
        _, was_skipped = run(stage.name)
        if was_skipped:
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


def build_locally(config: Build3XCMConfig, progress: Progress | None = None) -> BuildSummary:
    """The whole build in this process, without Prefect."""
    return execute(config, lambda name: run_stage(name, config, progress), lambda: release(config))


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
def stage_task(name: str, config: Build3XCMConfig) -> bool:
    marker, skipped = run_stage(name, config, ProgressArtifact())
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
    return skipped


@task(name="release", cache_policy=NO_CACHE)
def release_task(config: Build3XCMConfig) -> ReleaseResult:
    return release(config)


@flow(name="build-3xcm", log_prints=True)
def build_3xcm(config: Build3XCMConfig = Build3XCMConfig.demo()) -> BuildSummary:  # noqa: B008
    """Build and release 3XCM; stages that already finished for this config are skipped."""
    summary = execute(
        config,
        lambda name: (None, stage_task.with_options(name=name)(name, config)),
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
    sheets = [(s.stage, s.extra["contact_sheet"]) for s in summary.stages if s.extra.get("contact_sheet")]
    if sheets:  # paths are relative to the build workspace
        lines += ["", "## What was merged", ""]
        lines += [
            f"* [{stage}: contact sheet of the largest clusters]({file_link(f'{summary.workspace}/{path}')})"
            for stage, path in sheets
        ]
    return "\n".join(lines) + "\n"


def file_link(path: str) -> str:
    """A link the UI can follow: fsspec URLs stay as they are, local paths become file:// URLs."""
    return path if "://" in path else Path(path).resolve().as_uri()
