"""`sync-reviews`: resume the builds that wait for reviewers once their reviews are complete.

A build that meets an open review suspends itself and frees its worker (flows/build_3xcm.py). This flow, deployed
on a schedule, looks at every suspended `build-3xcm` run, asks its review backend whether every task has its
annotations, and resumes the complete ones. Operators can also resume a run by hand from the UI (with
`close_review` to import an incomplete review).
"""

from __future__ import annotations

from typing import Any

import fsspec
from prefect import flow, get_run_logger
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    FlowFilter,
    FlowFilterName,
    FlowRunFilter,
    FlowRunFilterState,
    FlowRunFilterStateType,
)
from prefect.client.schemas.objects import StateType
from prefect.flow_runs import aresume_flow_run
from pydantic import BaseModel

from annotation.backends import LabelStudioFilesReviewConfig, LabelStudioReviewConfig
from annotation.label_configs import SPECS
from annotation.label_studio import LabelStudioProject
from flows.config import Build3XCMConfig


class ReviewSync(BaseModel):
    flow_run: str
    build_id: str
    complete: bool
    detail: str


def review_complete(config: Build3XCMConfig) -> tuple[bool, str]:
    """Whether the build's duplicate review is done, by the backend's own cheap measure."""
    review = config.review
    if isinstance(review, LabelStudioReviewConfig):
        project = LabelStudioProject(
            review.server, SPECS["duplicate_review"], config.resolved_build_id(), review.annotators
        )
        progress = project.progress()
        return progress.complete, f"{progress.finished} of {progress.total} tasks done at {project.location}"
    if isinstance(review, LabelStudioFilesReviewConfig) and review.completed_export:
        exists = fsspec.core.url_to_fs(review.completed_export)[0].exists(review.completed_export)
        return exists, f"completed export {'found' if exists else 'missing'}: {review.completed_export}"
    return False, f"review backend {review.backend} has nothing to wait for"


async def _suspended_runs(flow_name: str) -> list[Any]:
    async with get_client() as client:
        return await client.read_flow_runs(
            flow_filter=FlowFilter(name=FlowFilterName(any_=[flow_name])),
            flow_run_filter=FlowRunFilter(
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.PAUSED]))
            ),
            limit=200,
        )


@flow(name="sync-reviews", log_prints=True)
async def sync_reviews(flow_name: str = "build-3xcm") -> list[ReviewSync]:
    """Resume every suspended run of `flow_name` whose reviews are complete."""
    logger = get_run_logger()
    out = []
    for run in await _suspended_runs(flow_name):
        config = Build3XCMConfig.model_validate(run.parameters.get("config") or {})
        try:
            complete, detail = review_complete(config)
        except Exception as exc:  # one unreachable server must not stop the others from resuming
            complete, detail = False, f"{type(exc).__name__}: {exc}"
        if complete:
            await aresume_flow_run(run.id, run_input={"close_review": False, "note": f"sync-reviews: {detail}"})
        logger.info("%s (%s): %s", run.name, "resumed" if complete else "still waiting", detail)
        out.append(
            ReviewSync(flow_run=str(run.id), build_id=config.resolved_build_id(), complete=complete, detail=detail)
        )
    return out
