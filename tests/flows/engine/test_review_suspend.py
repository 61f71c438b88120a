"""A deployed build waits for its reviewers without holding a worker, and resumes when they are done.

Real pieces throughout: the Prefect test server, a `process` work pool served by `prefect worker start --run-once`
subprocesses, a Label Studio server with three annotators, and the `sync-reviews` flow that resumes the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from label_studio_sdk import LabelStudio

from annotation.backends import LabelStudioReviewConfig
from annotation.label_configs import DIFFERENT, SPECS
from annotation.label_studio import LabelStudioProject
from data.workspace import Workspace
from flows.xcm.config import Build3XCMConfig
from flows.xcm.stages import STAGES
from tests.support.label_studio_server import RunningLabelStudio, signup_annotator
from tests.support.paths import REPO_ROOT
from tests.support.review_inputs import verdict

ROOT = REPO_ROOT
TOKEN_ENV = "CULTUREBENCH_TEST_LS_TOKEN"
POOL = "review-wait-pool"


async def _deploy_and_run(config: Build3XCMConfig) -> str:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists

    async with get_client() as client:
        with contextlib.suppress(ObjectAlreadyExists):  # created by an earlier test of this session
            await client.create_work_pool(WorkPoolCreate(name=POOL, type="process"))
        flow_id = await client.create_flow_from_name("build-3xcm")
        deployment_id = await client.create_deployment(
            flow_id=flow_id,
            name=f"review-wait-{config.resolved_build_id()}",
            work_pool_name=POOL,
            entrypoint="flows/xcm/build.py:build_3xcm",
            path=str(ROOT),
            pull_steps=[{"prefect.deployments.steps.set_working_directory": {"directory": str(ROOT)}}],
            parameters={"config": config.model_dump(mode="json")},
        )
        run = await client.create_flow_run_from_deployment(deployment_id)
        return str(run.id)


async def _state(run_id: str) -> str:
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        run = await client.read_flow_run(run_id)
        return run.state.name if run.state else "?"


def _worker_once(env: dict[str, str], log: Path) -> None:
    """One worker poll: it runs the scheduled flow run to its end (or its suspension) and exits."""
    with log.open("ab") as out:
        subprocess.run(
            [sys.executable, "-m", "prefect", "worker", "start", "--pool", POOL, "--run-once"],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=600,
            check=True,
        )


def _markers(ws: Workspace) -> dict[str, float]:
    fs = ws.storage.fs
    return {
        s.name: fs.modified(f"{ws.stage_dir(s.name)}/_SUCCESS").timestamp()
        for s in STAGES
        if ws.marker(s.name) is not None
    }


@pytest.mark.prefect
def test_a_deployed_build_suspends_for_reviews_and_resumes_when_they_are_done(
    prefect: Path,
    label_studio: RunningLabelStudio,
    small_demo_config: Build3XCMConfig,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    from prefect.settings import PREFECT_API_URL

    from flows.sync_reviews import sync_reviews

    monkeypatch.setenv(TOKEN_ENV, label_studio.admin_token)
    review = LabelStudioReviewConfig.model_validate(
        {
            "server": {
                "url": label_studio.url,
                "api_key_env": TOKEN_ENV,
                "document_root": str(label_studio.document_root),
            }
        }
    )
    config = small_demo_config.model_copy(update={"review": review, "build_id": f"suspend-{uuid.uuid4().hex[:12]}"})
    env = {
        **os.environ,
        "PREFECT_API_URL": str(PREFECT_API_URL.value()),
        "PREFECT_HOME": str(prefect),
        "PREFECT_RESULTS_LOCAL_STORAGE_PATH": str(prefect / "storage"),
        TOKEN_ENV: label_studio.admin_token,
    }
    log = tmp_path / "worker.log"
    run_id = asyncio.run(_deploy_and_run(config))

    _worker_once(env, log)
    assert asyncio.run(_state(run_id)) == "Suspended", log.read_text()[-3000:]
    ws = Workspace(config.workspace_root, config.resolved_build_id())
    before = _markers(ws)
    assert "image_dedup" in before and "review" not in before  # nothing of the review is written while it waits

    # Nothing to resume yet: the sync deployment leaves the run alone.
    assert [s.complete for s in asyncio.run(sync_reviews())] == [False]

    project = LabelStudioProject(review.server, SPECS["duplicate_review"], config.resolved_build_id(), 3)
    tasks = project.snapshot()
    assert tasks, "the build exported the demo's queued pairs"
    tag = uuid.uuid4().hex[:8]
    people = [
        LabelStudio(
            base_url=label_studio.url,
            api_key=signup_annotator(label_studio, f"s{n}-{tag}@example.com", f"pw-{tag}-{n}-xyz"),
        )
        for n in range(3)
    ]
    for task in tasks:
        for person in people:
            person.annotations.create(id=task["id"], result=verdict("duplicate_review", DIFFERENT))

    synced = asyncio.run(sync_reviews())
    assert [(s.flow_run, s.complete) for s in synced] == [(run_id, True)]
    assert asyncio.run(_state(run_id)) in {"Resuming", "Scheduled"}

    _worker_once(env, log)
    assert asyncio.run(_state(run_id)) == "Completed", log.read_text()[-3000:]
    after = _markers(ws)
    assert {k: after[k] for k in before} == before  # finished stages were not redone
    review_table = ws.read_table("review")
    assert set(review_table["reviewer"].to_pylist()) == {"label_studio"}
    assert Path(config.release.root, "3xcm", config.release.version, "manifest.json").exists()
