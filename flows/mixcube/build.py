"""`build-mixcube`: the Prefect flow, and the same build without Prefect for the CLI.

Wiring only: the backends are checked before anything runs (a missing weights file must not surface after hours
of inpainting), then one task per stage in graph order, then the release. An open synthesis QA suspends the run
like 3XCM's duplicate review does.
"""

from __future__ import annotations

from typing import Any

from prefect import flow
from prefect.artifacts import create_markdown_artifact

from curation.synthesis_filters import resolve_brisque_weights
from data import release_mixcube
from data.provenance import code_version, reference_data_sha256
from data.release import ReleaseResult
from data.workspace import Workspace
from flows.engine.graph import Progress
from flows.engine.runner import BuildSummary, execute_in_prefect, execute_locally, summary_markdown
from flows.mixcube.config import BuildMixCubeConfig
from flows.mixcube.stages import GRAPH, stage_settings
from flows.paper_settings import mixcube_deviations
from synthesis.faces import build_face_detector
from synthesis.inpaint import build_inpainter
from synthesis.masks import build_masker


class NothingToRelease(RuntimeError):
    """No original has an accepted synthesis for every ethnicity."""


def check_backends(config: BuildMixCubeConfig) -> None:
    """Fail now, naming the field, when a model or weights file is missing. Cheap: nothing large is loaded."""
    build_face_detector(config.faces)
    build_masker(config.masks)
    build_inpainter(config.inpaint)
    if config.filters.brisque is not None:
        resolve_brisque_weights(config.filters.brisque)


def provenance(config: BuildMixCubeConfig, ws: Workspace) -> dict[str, Any]:
    names = GRAPH.names(config)
    stats = {name: ws.stats(name) for name in names}
    quintets = stats["quintets"]
    reviewers = sorted({stats[n].extra.get("review", {}).get("reviewer", "?") for n in names if n.startswith("qa_")})
    return {
        "build_id": ws.build_id,
        "demo": config.is_demo,
        "config": config.released_config(),
        "code_version": code_version(),
        "reference_data_sha256": reference_data_sha256(),
        "seeds": {"synthesis": config.seed, "demo_originals": getattr(config.originals, "seed", None)},
        "backends": {**stage_settings(config), "qa": reviewers},
        "deviations": mixcube_deviations(config, reviewers),
        "models": {
            "faces": stats["faces"].extra.get("detector"),
            "masks": stats["masks"].extra.get("masker"),
            "inpaint": sorted({m for n in names if n.startswith("synthesis_") for m in stats[n].extra["models"]}),
        },
        "incomplete": quintets.extra["incomplete"],
        "left_over_by_outcome": quintets.extra["left_over_by_outcome"],
        "cells_below_target": quintets.extra["cells_below_target"],
        "dropped_before_synthesis": {
            name: stats[name].dropped_by_reason for name in ("originals", "faces", "masks") if stats[name].dropped
        },
        "stage_fingerprints": GRAPH.fingerprints(config),
        "stage_stats": [s.model_dump(mode="json") for s in stats.values()],
    }


def release(config: BuildMixCubeConfig) -> ReleaseResult:
    """Materialise the quintets into `<release.root>/mixcube/<version>/`."""
    ws = GRAPH.workspace(config)
    rows = ws.read_table("quintets")
    if rows.num_rows == 0:
        left = ws.stats("quintets")
        raise NothingToRelease(
            f"no original has an accepted synthesis for every ethnicity ({left.dropped} originals left out: "
            f"{left.reasons_text()}); see tables/quintets/left_over.parquet in {ws.url}"
        )
    return release_mixcube.write_mixcube_release(config.release, ws.blobs, rows, provenance(config, ws))


def build_locally(
    config: BuildMixCubeConfig, progress: Progress | None = None, close_reviews: bool = False
) -> BuildSummary:
    """The whole build in this process, without Prefect. An open QA raises `ReviewPending`: rerun when done."""
    check_backends(config)
    return execute_locally(GRAPH, config, lambda: release(config), progress, close_reviews)


@flow(name="build-mixcube", log_prints=True, persist_result=True)
def build_mixcube(
    config: BuildMixCubeConfig = BuildMixCubeConfig.demo(),  # noqa: B008
    close_reviews: bool = False,
) -> BuildSummary:
    """Build and release MixCuBe; stages that already finished for this config are skipped. An open synthesis QA
    suspends the run until the reviewers are done (resume it from the UI, or let the sync-reviews deployment do
    it). `close_reviews` imports open reviews as they stand: attempts short of annotations stay undecided."""
    check_backends(config)
    summary = execute_in_prefect(GRAPH, config, close_reviews, lambda: release(config))
    create_markdown_artifact(
        key="build-mixcube-summary",
        markdown=summary_markdown("MixCuBe", summary),
        description="Release and counts of this build.",
    )
    return summary
