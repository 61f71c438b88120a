"""`sync-reviews`: resume the builds that wait for reviewers once their reviews are complete.

A build that meets an open review suspends itself and frees its worker (flows/engine/runner.py). This flow, deployed on
a schedule, looks at every suspended `build-3xcm` and `build-mixcube` run, asks its review (the benchmark record's
`review`, made by its review backend) whether every task has its annotations, and resumes the complete ones.
Operators can also resume a run by hand from the UI (with `close_review` to import an incomplete review).
"""

from __future__ import annotations

from typing import Any

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

from flows import benchmarks


class ReviewSync(BaseModel):
    flow_run: str
    build_id: str
    complete: bool
    detail: str


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
async def sync_reviews(
    flow_names: list[str] | None = None,
) -> list[ReviewSync]:
    """Resume every suspended run of the named build flows (default: every benchmark's) whose reviews are
    complete."""
    logger = get_run_logger()
    if flow_names is None:
        flow_names = [benchmark.flow_name for benchmark in benchmarks.all_benchmarks()]
    out = []
    for flow_name in flow_names:
        out += await _sync(flow_name, logger)
    return out


async def _sync(flow_name: str, logger: Any) -> list[ReviewSync]:
    benchmark = benchmarks.by_flow_name(flow_name)
    model = benchmark.config
    out = []
    for run in await _suspended_runs(flow_name):
        raw = run.parameters.get("config")
        # A run without the parameter ran on the flow's default, which is the demo config.
        config = model.model_validate(raw) if raw else model.demo()
        try:
            complete, detail = benchmark.review(config).completion(config.resolved_build_id())
        except Exception as exc:  # one unreachable server must not stop the others from resuming
            complete, detail = False, f"{type(exc).__name__}: {exc}"
        if complete:
            await aresume_flow_run(run.id, run_input={"close_review": False, "note": f"sync-reviews: {detail}"})
        logger.info("%s (%s): %s", run.name, "resumed" if complete else "still waiting", detail)
        out.append(
            ReviewSync(flow_run=str(run.id), build_id=config.resolved_build_id(), complete=complete, detail=detail)
        )
    return out
