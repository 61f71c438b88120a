"""`build-3xcm`: the Prefect flow, and the same build without Prefect for the CLI.

The flow is wiring only: one task per stage (named after the stage) in graph order, then the release. Finished
stages are skipped through the workspace's completion markers, so a rerun of the same config resumes.
"""

from __future__ import annotations

from typing import Any

from prefect import flow
from prefect.artifacts import create_markdown_artifact

from data import release_3xcm
from data.provenance import code_version, reference_data_sha256
from data.release import ReleaseResult
from data.workspace import Workspace
from flows.engine.graph import Progress
from flows.engine.runner import (
    BuildSummary,
    ReviewResume,
    ReviewsNotFinished,
    execute_in_prefect,
    execute_locally,
    summary_markdown,
)
from flows.paper_settings import xcm_deviations
from flows.xcm.config import Build3XCMConfig
from flows.xcm.stages import (
    GRAPH,
    STAGES,
    BuildValidationError,
    published_tables,
    stage_fingerprints,
    validate_tables,
)

__all__ = ["BuildSummary", "ReviewResume", "ReviewsNotFinished", "build_3xcm", "build_locally", "release"]


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
        "config": config.released_config(),
        "code_version": code_version(),
        "reference_data_sha256": reference_data_sha256(),
        "seeds": {
            "assembly": config.assembly.seed,
            "demo_corpus": config.demo_corpus.seed if config.demo_corpus else None,
        },
        # Who actually reviewed: the files backend falls back on auto-accept until a completed export arrives.
        "backends": {**backends(config), "review": review.get("reviewer", "?")},
        "review": review,
        "deviations": xcm_deviations(config, review.get("reviewer", "?")),
        "stage_fingerprints": stage_fingerprints(config),
        "stage_stats": [s.model_dump(mode="json") for s in stats],
        "reuse": by_name["assembly"].extra.get("reuse", {}),
    }


def release(config: Build3XCMConfig) -> ReleaseResult:
    """Validate exactly the tables to publish, then materialise them into `<release.root>/3xcm/<version>/`. The
    card and manifest state this run's verdict, not a stage's earlier one."""
    ws = GRAPH.workspace(config)
    tables = published_tables(ws)
    report = validate_tables(config, tables)
    if not report.ok:
        raise BuildValidationError(f"the tables to release break the benchmark rules:\n{report.summary()}")
    return release_3xcm.write_3xcm_release(
        config.release,
        ws.blobs,
        tables.images,
        tables.benchmark,
        tables.benchmark_cd,
        tables.unassembled,
        {**provenance(config, ws), "validation": {"summary": report.summary()}},
    )


def build_locally(
    config: Build3XCMConfig, progress: Progress | None = None, close_reviews: bool = False
) -> BuildSummary:
    """The whole build in this process, without Prefect. Open reviews raise `ReviewPending`: rerun when done."""
    return execute_locally(GRAPH, config, lambda: release(config), progress, close_reviews)


@flow(name="build-3xcm", log_prints=True, persist_result=True)
def build_3xcm(
    config: Build3XCMConfig = Build3XCMConfig.demo(),  # noqa: B008
    close_reviews: bool = False,
) -> BuildSummary:
    """Build and release 3XCM; stages that already finished for this config are skipped. An open review suspends
    the run until the reviewers are done (resume it from the UI, or let the sync-reviews deployment do it).
    `close_reviews` imports open reviews as they stand: items short of annotations are undecided and reported."""
    summary = execute_in_prefect(GRAPH, config, close_reviews, lambda: release(config))
    create_markdown_artifact(
        key="build-3xcm-summary",
        markdown=summary_markdown("3XCM", summary),
        description="Release, counts and validation of this build.",
    )
    return summary
