"""Both reviews against a real Label Studio server: projects, task import with predictions, three annotators
voting through the API with their own tokens, the snapshot export, majority decisions, and screenshots of each
labeling interface with a task loaded."""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import pytest
import requests
from label_studio_sdk import LabelStudio

from annotation.backends import LabelStudioReviewConfig, ReviewContext
from annotation.collect import ReviewPending
from annotation.label_configs import ACCEPT, DIFFERENT, FIX_MASK, REJECT_MARKER, RETRY_PROMPT, SAME_SCENE, SPECS, UNSURE
from annotation.label_studio import LabelStudioProject
from annotation.review import run_review
from annotation.synthesis_qa import run_synthesis_qa
from tests.support.browser import ScreenshotReport, artifact_dir, screenshot_task
from tests.support.label_studio_server import RunningLabelStudio, signup_annotator
from tests.support.review_inputs import brush, dedup_review_inputs, retry_text, synthesis_candidates, verdict

TOKEN_ENV = "CULTUREBENCH_TEST_LS_TOKEN"


@pytest.fixture(scope="module")
def annotators(label_studio: RunningLabelStudio, tmp_path_factory: pytest.TempPathFactory) -> list[LabelStudio]:
    """Three annotators who signed up through the organisation's invite link, each with their own token."""
    tag = uuid.uuid4().hex[:8]
    tokens = [signup_annotator(label_studio, f"annotator{n}-{tag}@example.com", f"pw-{tag}-{n}-xyz") for n in range(3)]
    return [LabelStudio(base_url=label_studio.url, api_key=token) for token in tokens]


def review_config(server: RunningLabelStudio, monkeypatch: pytest.MonkeyPatch) -> LabelStudioReviewConfig:
    monkeypatch.setenv(TOKEN_ENV, server.admin_token)
    return LabelStudioReviewConfig.model_validate(
        {"server": {"url": server.url, "api_key_env": TOKEN_ENV, "document_root": str(server.document_root)}}
    )


def tasks_by_key(project: LabelStudioProject) -> dict[str, dict]:
    return {t["data"]["item_key"]: t for t in project.snapshot()}


def shows_images(shot: ScreenshotReport, task: dict, fields: list[str]) -> bool:
    """The labeling panel drew one image per field, and every image of the task was served to the page."""
    served = all(any(url.endswith(task["data"][field]) for url in shot.served_files) for field in fields)
    return served and shot.panel_images == len(fields)


def annotate(annotators: list[LabelStudio], task_id: int, results: list[list[dict]]) -> None:
    for client, result in zip(annotators, results, strict=False):
        client.annotations.create(id=task_id, result=result)


@pytest.mark.parametrize("kind", ["duplicate_review", "synthesis_qa"])
def test_label_configs_create_projects_on_the_server_idempotently(
    label_studio: RunningLabelStudio, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kind: str
) -> None:
    config = review_config(label_studio, monkeypatch)
    first = LabelStudioProject(config.server, SPECS[kind], tmp_path.name, 3)
    pid = first.ensure_project()
    again = LabelStudioProject(config.server, SPECS[kind], tmp_path.name, 3).ensure_project()
    assert again == pid
    admin = LabelStudio(base_url=label_studio.url, api_key=label_studio.admin_token)
    project = admin.projects.get(id=pid)
    assert project.label_config.strip() == SPECS[kind].label_config.strip()
    assert project.maximum_annotations == 3


@pytest.mark.browser
def test_duplicate_review_round_trip(
    label_studio: RunningLabelStudio, annotators: list[LabelStudio], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = review_config(label_studio, monkeypatch)
    inputs = dedup_review_inputs(tmp_path / "ws", pairs=3, build_id=f"dup-{uuid.uuid4().hex[:12]}")
    with pytest.raises(ReviewPending, match="0 of 3") as pending:
        run_review(config, inputs.decisions, inputs.queue, inputs.images, inputs.context())
    assert pending.value.new_tasks == 3
    with pytest.raises(ReviewPending) as again:  # re-export finds the project and adds nothing
        run_review(config, inputs.decisions, inputs.queue, inputs.images, inputs.context())
    assert again.value.new_tasks == 0 and again.value.location == pending.value.location

    project = LabelStudioProject(config.server, SPECS["duplicate_review"], inputs.ws.build_id, 3)
    tasks = tasks_by_key(project)
    task = tasks["p0a|p0b"]
    assert task["predictions"], "the automatic scores come as a prediction"
    image = requests.get(label_studio.url + task["data"]["image_a"], headers=label_studio.auth_headers, timeout=30)
    assert image.status_code == 200 and image.headers["content-type"] == "image/jpeg"
    export_folder = label_studio.document_root / "culturebench" / inputs.ws.build_id / "duplicate_review"
    assert len(list(export_folder.iterdir())) == 6  # the six queued images, nothing else of the build

    shot = screenshot_task(
        label_studio, project.ensure_project(), task["id"], artifact_dir() / "duplicate_review.png", expected_images=2
    )
    assert shows_images(shot, task, ["image_a", "image_b"]) and shot.visible_textareas == 0

    same, diff, unsure = verdict("duplicate_review", SAME_SCENE), verdict("duplicate_review", DIFFERENT), None
    unsure = verdict("duplicate_review", UNSURE)
    annotate(annotators, tasks["p0a|p0b"]["id"], [same, same, diff])
    annotate(annotators, tasks["p1a|p1b"]["id"], [diff, diff, diff])
    annotate(annotators, tasks["p2a|p2b"]["id"], [unsure, unsure])
    with pytest.raises(ReviewPending, match="2 of 3"):
        run_review(config, inputs.decisions, inputs.queue, inputs.images, inputs.context())
    annotate(annotators[2:], tasks["p2a|p2b"]["id"], [same])
    assert project.progress().complete

    out = run_review(config, inputs.decisions, inputs.queue, inputs.images, inputs.context())
    rows = {r["image_id"]: r for r in out.table.to_pylist()}
    assert rows["p0a"]["keep"] and not rows["p0b"]["keep"]
    assert rows["p1a"]["keep"] and rows["p1b"]["keep"]
    assert rows["p2a"]["keep"] and not rows["p2b"]["keep"] and rows["p2b"]["reason"].startswith("review_undecided")
    assert set(out.table["reviewer"].to_pylist()) == {"label_studio"}
    decisions = {r["item_key"]: r for r in out.round.decisions.to_pylist()}
    assert len(set(decisions["p0a|p0b"]["annotators"])) == 3
    assert out.round.agreement.tasks_rated == 3 and out.round.agreement.unanimous_share == pytest.approx(1 / 3)
    assert {d["item_key"] for d in out.round.agreement.disagreements} == {"p0a|p0b", "p2a|p2b"}

    bigger = dedup_review_inputs(tmp_path / "ws", pairs=4, build_id=inputs.ws.build_id)
    with pytest.raises(ReviewPending, match="3 of 4") as grown:  # a new candidate: one new task, old votes kept
        run_review(config, bigger.decisions, bigger.queue, bigger.images, bigger.context())
    assert grown.value.new_tasks == 1


@pytest.mark.browser
def test_synthesis_qa_round_trip(
    label_studio: RunningLabelStudio, annotators: list[LabelStudio], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = review_config(label_studio, monkeypatch)
    inputs = dedup_review_inputs(tmp_path / "ws", pairs=1, build_id=f"qa-{uuid.uuid4().hex[:12]}")
    ws = inputs.ws
    candidates = synthesis_candidates(ws, originals=4)
    ctx: ReviewContext = inputs.context()
    with pytest.raises(ReviewPending, match="0 of 4"):
        run_synthesis_qa(config, candidates, ctx, ws.blobs.put)
    project = LabelStudioProject(config.server, SPECS["synthesis_qa"], ws.build_id, 3)
    tasks = tasks_by_key(project)
    first = tasks["orig0-African-1"]
    shot = screenshot_task(
        label_studio,
        project.ensure_project(),
        first["id"],
        artifact_dir() / "synthesis_qa.png",
        expected_images=3,
        click_label="Retry with a tailored prompt",  # reveals the prompt text area
    )
    assert shows_images(shot, first, ["original", "synthesized", "mask"]) and shot.visible_textareas == 1

    qa = "synthesis_qa"
    painted = np.zeros((72, 96), dtype=bool)
    painted[20:50, 30:70] = True
    retry = [*verdict(qa, RETRY_PROMPT), retry_text("East Asian man holding the same bowl of noodles")]
    fix = [*verdict(qa, FIX_MASK), brush(painted)]
    annotate(annotators, tasks["orig0-African-1"]["id"], [verdict(qa, ACCEPT)] * 3)
    annotate(annotators, tasks["orig1-African-1"]["id"], [verdict(qa, REJECT_MARKER)] * 2 + [verdict(qa, ACCEPT)])
    annotate(annotators, tasks["orig2-African-1"]["id"], [retry, retry, verdict(qa, ACCEPT)])
    annotate(annotators, tasks["orig3-African-1"]["id"], [fix, verdict(qa, ACCEPT), fix])

    out = run_synthesis_qa(config, candidates, ctx, ws.blobs.put)
    keep = dict(zip(out.qa["attempt_id"].to_pylist(), out.qa["keep"].to_pylist(), strict=True))
    assert keep == {
        "orig0-African-1": True,
        "orig1-African-1": False,
        "orig2-African-1": False,
        "orig3-African-1": False,
    }
    requests_ = {r["attempt_id"]: r for r in out.requests.to_pylist()}
    assert requests_["orig2-African-1"]["prompt"] == "East Asian man holding the same bowl of noodles"
    assert len(requests_["orig2-African-1"]["requested_by"]) == 2
    from PIL import Image

    with ws.blobs.storage.fs.open(ws.blobs.path(requests_["orig3-African-1"]["mask_sha256"])) as handle:
        mask = np.array(Image.open(handle))
    assert np.array_equal(mask > 0, painted)
