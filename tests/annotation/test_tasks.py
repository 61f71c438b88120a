"""The reviews without a server: labeling configs, vote aggregation, the offline task files and their import,
synthesis QA requests, and how a Label Studio server that is down or refuses is reported."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from PIL import Image

from annotation.aggregate import MalformedExport, Vote, decide, parse_export
from annotation.backends import LabelStudioFilesReviewConfig, LabelStudioReviewConfig
from annotation.collect import ReviewPending
from annotation.label_configs import (
    ACCEPT,
    DIFFERENT,
    DUPLICATE_GUIDELINE,
    FIX_MASK,
    REJECT_ARTIFACTS,
    RETRY_PROMPT,
    SAME_SCENE,
    SPECS,
    UNSURE,
    check_label_config,
)
from annotation.label_studio import (
    LabelStudioProject,
    LabelStudioRejected,
    LabelStudioServerConfig,
    LabelStudioUnavailable,
)
from annotation.review import run_review
from annotation.synthesis_qa import decode_brush, run_synthesis_qa
from annotation.tasks import MediaFolder
from data.clients.retry import RetryPolicy
from tests.support.review_inputs import (
    brush,
    completed_export,
    dedup_review_inputs,
    retry_text,
    synthesis_candidates,
    verdict,
)

DUP = "duplicate_review"
AUTO_FILES = LabelStudioFilesReviewConfig(when_unreviewed="auto_accept")  # exports the tasks, then auto-accepts


@pytest.mark.parametrize("kind", ["duplicate_review", "synthesis_qa"])
def test_label_configs_parse_and_carry_every_choice(kind: str) -> None:
    spec = SPECS[kind]
    check_label_config(spec)
    for choice in spec.choices:
        assert f'alias="{choice.name}"' in spec.label_config
    for field in spec.image_fields:
        assert f'value="${field}"' in spec.label_config


def test_duplicate_guideline_is_the_papers_app_j_text() -> None:
    assert "time of day" in DUPLICATE_GUIDELINE and "slight shifts, crops, or zooms" in DUPLICATE_GUIDELINE


def votes_for(key: str, *choices: str | None) -> list[Vote]:
    return [Vote(item_key=key, task_id=1, annotator=f"a{n}", choice=c) for n, c in enumerate(choices)]


def test_majority_decisions_and_undecided_reasons() -> None:
    spec = SPECS[DUP]
    votes = (
        votes_for("same", SAME_SCENE, SAME_SCENE, DIFFERENT)
        + votes_for("split", SAME_SCENE, DIFFERENT, UNSURE)
        + votes_for("unsure", UNSURE, UNSURE, SAME_SCENE)
        + votes_for("short", SAME_SCENE)
    )
    keys = ["same", "split", "unsure", "short", "nobody"]
    table, _ = decide(votes, keys, spec, annotators=3, complete=False)
    rows = {r["item_key"]: r for r in table.to_pylist()}
    assert rows["same"]["status"] == "decided" and rows["same"]["decision"] == SAME_SCENE
    assert rows["same"]["majority_share"] == pytest.approx(2 / 3)
    assert (rows["split"]["status"], rows["split"]["reason"]) == ("undecided", "no_majority")
    assert (rows["unsure"]["status"], rows["unsure"]["reason"]) == ("undecided", "unsure")
    assert rows["short"]["status"] == "pending" and rows["nobody"]["status"] == "pending"
    closed, _ = decide(votes, keys, spec, annotators=3, complete=True)
    closed_rows = {r["item_key"]: r for r in closed.to_pylist()}
    assert closed_rows["short"]["reason"].startswith("too_few_annotations")
    assert closed_rows["nobody"]["status"] == "undecided" and closed_rows["nobody"]["annotations"] == 0


def test_an_annotator_who_annotates_twice_counts_once() -> None:
    votes = [
        Vote("k", 1, "a0", DIFFERENT),
        Vote("k", 1, "a0", SAME_SCENE),
        Vote("k", 1, "a1", SAME_SCENE),
        Vote("k", 1, "a2", DIFFERENT),
    ]
    table, _ = decide(votes, ["k"], SPECS[DUP], annotators=3, complete=True)
    row = table.to_pylist()[0]
    assert row["annotations"] == 3 and row["decision"] == SAME_SCENE


def test_agreement_kappa_is_one_when_unanimous_and_drops_with_disagreement() -> None:
    spec = SPECS[DUP]
    unanimous = votes_for("x", SAME_SCENE, SAME_SCENE, SAME_SCENE) + votes_for("y", DIFFERENT, DIFFERENT, DIFFERENT)
    _, perfect = decide(unanimous, ["x", "y"], spec, 3, complete=True)
    assert perfect.fleiss_kappa == pytest.approx(1.0) and perfect.unanimous_share == 1.0
    assert perfect.disagreements == []
    mixed = unanimous + votes_for("z", SAME_SCENE, DIFFERENT, DIFFERENT)
    _, less = decide(mixed, ["x", "y", "z"], spec, 3, complete=True)
    assert less.fleiss_kappa < 1.0 and less.unanimous_share == pytest.approx(2 / 3)
    assert [d["item_key"] for d in less.disagreements] == ["z"]


def test_parse_export_reads_choices_and_skips_cancelled() -> None:
    tasks = [{"data": {"item_key": "k"}}]
    export = completed_export(tasks, {"k": [verdict(DUP, SAME_SCENE), verdict(DUP, DIFFERENT)]})
    export[0]["annotations"].append({"completed_by": 9, "result": verdict(DUP, SAME_SCENE), "was_cancelled": True})
    votes = parse_export(export, SPECS[DUP])
    assert [v.choice for v in votes] == [SAME_SCENE, DIFFERENT]


@pytest.mark.parametrize(
    ("export", "message"),
    [({"tasks": []}, "is a list of tasks"), ([{"id": 3}], "no `data`"), ([{"id": 3, "data": {}}], "item_key")],
)
def test_malformed_exports_are_named(export: object, message: str) -> None:
    with pytest.raises(MalformedExport, match=message):
        parse_export(export, SPECS[DUP])


def test_media_folder_refuses_a_folder_outside_the_document_root(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must lie under"):
        MediaFolder(tmp_path / "elsewhere", tmp_path / "root")
    media = MediaFolder(tmp_path / "root" / "build" / "images", tmp_path / "root")
    url = media.publish("ab" * 32, "jpg", lambda: b"bytes")
    assert url == f"/data/local-files/?d=build/images/{'ab' * 32}.jpg"
    assert media.files() == [f"{'ab' * 32}.jpg"]


def test_files_backend_exports_importable_tasks_and_auto_accepts_until_a_completed_export(tmp_path: Path) -> None:
    inputs = dedup_review_inputs(tmp_path / "ws")
    out = run_review(AUTO_FILES, inputs.decisions, inputs.queue, inputs.images, inputs.context())
    assert out.round is None
    assert set(out.table["reviewer"].to_pylist()) == {"auto_accept"}
    assert out.table["keep"].to_pylist() == inputs.decisions["keep"].to_pylist()
    folder = Path(inputs.ws.file_path("label_studio", DUP))
    tasks = json.loads((folder / "tasks.json").read_text())
    assert sorted(t["data"]["item_key"] for t in tasks) == ["p0a|p0b", "p1a|p1b", "p2a|p2b"]
    for task in tasks:  # predictions name the config's controls, images lie in the export folder and nowhere else
        (result,) = task["predictions"][0]["result"]
        assert (result["from_name"], result["to_name"]) == ("verdict", "image_a")
        for field in ("image_a", "image_b"):
            name = task["data"][field].rsplit("/", 1)[1]
            assert (folder / "images" / name).is_file()
    assert len(list((folder / "images").iterdir())) == 6
    assert (folder / "label_config.xml").read_text() == SPECS[DUP].label_config


def test_files_backend_imports_a_completed_export_and_applies_the_majority(tmp_path: Path) -> None:
    inputs = dedup_review_inputs(tmp_path / "ws")
    run_review(AUTO_FILES, inputs.decisions, inputs.queue, inputs.images, inputs.context())
    tasks = json.loads(Path(inputs.ws.file_path("label_studio", DUP, "tasks.json")).read_text())
    same, diff, unsure = verdict(DUP, SAME_SCENE), verdict(DUP, DIFFERENT), verdict(DUP, UNSURE)
    export = completed_export(
        tasks, {"p0a|p0b": [same, same, diff], "p1a|p1b": [diff, diff, same], "p2a|p2b": [unsure, unsure, same]}
    )
    path = tmp_path / "export.json"
    path.write_text(json.dumps(export))
    config = LabelStudioFilesReviewConfig(completed_export=str(path))
    out = run_review(config, inputs.decisions, inputs.queue, inputs.images, inputs.context())
    rows = {r["image_id"]: r for r in out.table.to_pylist()}
    # same scene: the larger image (side a) stays; different: both stay; undecided: one copy held back
    assert rows["p0a"]["keep"] and not rows["p0b"]["keep"] and "same_scene" in rows["p0b"]["reason"]
    assert rows["p1a"]["keep"] and rows["p1b"]["keep"]
    assert rows["p2a"]["keep"] and not rows["p2b"]["keep"] and rows["p2b"]["reason"].startswith("review_undecided")
    assert not rows["copy"]["keep"] and rows["copy"]["reason"] == "exact_bytes"  # automatic drops stand
    assert set(out.table["reviewer"].to_pylist()) == {"label_studio_files"}
    assert out.round.stats()["decided"] == 2 and out.round.stats()["undecided"] == 1
    # p2b, held back, is a scene of its own: the release has no copy of it; the stage stats (and card) carry it
    assert out.scenes_fully_held_back == 1 and out.round.stats()["scenes_fully_held_back"] == 1


def test_files_backend_waits_when_asked_and_reexport_adds_only_new_tasks(tmp_path: Path) -> None:
    inputs = dedup_review_inputs(tmp_path / "ws", pairs=2)
    config = LabelStudioFilesReviewConfig(when_unreviewed="wait")
    partial = tmp_path / "partial.json"
    with pytest.raises(ReviewPending, match="0 of 2"):
        run_review(config, inputs.decisions, inputs.queue, inputs.images, inputs.context())
    tasks_path = Path(inputs.ws.file_path("label_studio", DUP, "tasks.json"))
    first = json.loads(tasks_path.read_text())
    first[0]["data"]["note"] = "kept as it was"  # an existing task is never rewritten
    tasks_path.write_text(json.dumps(first))
    bigger = dedup_review_inputs(tmp_path / "ws", pairs=3)
    partial.write_text(json.dumps(completed_export(first, {"p0a|p0b": [verdict(DUP, DIFFERENT)] * 3})))
    config = LabelStudioFilesReviewConfig(completed_export=str(partial))
    with pytest.raises(ReviewPending, match="1 of 3"):
        run_review(config, bigger.decisions, bigger.queue, bigger.images, bigger.context())
    tasks = json.loads(tasks_path.read_text())
    assert [t["data"]["item_key"] for t in tasks] == ["p0a|p0b", "p1a|p1b", "p2a|p2b"]
    assert tasks[0]["data"]["note"] == "kept as it was"
    closed = run_review(config, bigger.decisions, bigger.queue, bigger.images, bigger.context(accept_incomplete=True))
    status = {r["item_key"]: r["status"] for r in closed.round.decisions.to_pylist()}
    assert status == {"p0a|p0b": "decided", "p1a|p1b": "undecided", "p2a|p2b": "undecided"}
    assert closed.round.closed_early


def test_synthesis_qa_turns_votes_into_decisions_and_resynthesis_requests(tmp_path: Path) -> None:
    inputs = dedup_review_inputs(tmp_path / "ws", pairs=1)
    ws = inputs.ws
    candidates = synthesis_candidates(ws, originals=4)
    ctx = inputs.context()
    run_synthesis_qa(AUTO_FILES, candidates, ctx, ws.blobs.put)
    tasks = json.loads(Path(ws.file_path("label_studio", "synthesis_qa", "tasks.json")).read_text())
    painted = np.zeros((72, 96), dtype=bool)
    painted[5:30, 10:50] = True
    qa = "synthesis_qa"
    retry = [*verdict(qa, RETRY_PROMPT), retry_text("South Asian woman holding the same plate")]
    export = completed_export(
        tasks,
        {
            "orig0-African-1": [verdict(qa, ACCEPT)] * 3,
            "orig1-African-1": [verdict(qa, REJECT_ARTIFACTS)] * 2 + [verdict(qa, ACCEPT)],
            "orig2-African-1": [retry, retry, verdict(qa, ACCEPT)],
            "orig3-African-1": [[*verdict(qa, FIX_MASK), brush(painted)]] * 2 + [verdict(qa, ACCEPT)],
        },
    )
    path = tmp_path / "qa.json"
    path.write_text(json.dumps(export))
    out = run_synthesis_qa(LabelStudioFilesReviewConfig(completed_export=str(path)), candidates, ctx, ws.blobs.put)
    decisions = {r["attempt_id"]: r for r in out.qa.to_pylist()}
    assert decisions["orig0-African-1"]["keep"] and decisions["orig0-African-1"]["decision"] == ACCEPT
    assert not decisions["orig1-African-1"]["keep"] and decisions["orig1-African-1"]["decision"] == REJECT_ARTIFACTS
    requests = {r["attempt_id"]: r for r in out.requests.to_pylist()}
    assert set(requests) == {"orig2-African-1", "orig3-African-1"}
    assert requests["orig2-African-1"]["prompt"] == "South Asian woman holding the same plate"
    assert requests["orig2-African-1"]["next_attempt"] == 2
    mask_request = requests["orig3-African-1"]
    assert mask_request["kind"] == FIX_MASK and mask_request["prompt"] is None
    mask = np.array(Image.open(ws.blobs.storage.fs.open(ws.blobs.path(mask_request["mask_sha256"]))))
    assert np.array_equal(mask > 0, painted)


def test_brush_rle_round_trips_through_the_sdk_encoder() -> None:
    from label_studio_sdk.converter.brush import mask2rle

    mask = np.zeros((20, 30), dtype=np.uint8)
    mask[3:9, 4:25] = 255
    assert np.array_equal(decode_brush(mask2rle(mask), 30, 20), mask > 0)


# -- a server that is down, or answers with errors -------------------------------------------------------------


class _Flaky(BaseHTTPRequestHandler):
    answers: ClassVar[list[int]] = []
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.seen.append(self.headers.get("Authorization", ""))
        code = self.answers.pop(0) if self.answers else 401
        body = json.dumps({"detail": "Invalid token." if code == 401 else "busy"}).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def flaky_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Flaky.answers, _Flaky.seen = [], []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _project(url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LabelStudioProject:
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", "secret-token-value-123")
    config = LabelStudioServerConfig(
        url=url, document_root=str(tmp_path), retry=RetryPolicy(max_attempts=3, base_delay_s=0.0)
    )
    return LabelStudioProject(config, SPECS[DUP], "b1", 3, sleep=lambda s: None)


@pytest.mark.slow
def test_a_server_that_is_down_is_named_after_the_retries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    project = _project(f"http://127.0.0.1:{port}", tmp_path, monkeypatch)
    with pytest.raises(LabelStudioUnavailable, match=rf"127.0.0.1:{port} is unavailable while listing projects") as e:
        project.ensure_project()
    assert "after 3 attempts" in str(e.value) and "secret-token-value-123" not in str(e.value)


@pytest.mark.slow
def test_transient_errors_are_retried_and_client_errors_are_not(
    flaky_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _Flaky.answers = [503, 502]  # then 401
    project = _project(flaky_server, tmp_path, monkeypatch)
    with pytest.raises(LabelStudioRejected, match="HTTP 401: Invalid token") as e:
        project.ensure_project()
    assert len(_Flaky.seen) == 3 and all(h == "Token secret-token-value-123" for h in _Flaky.seen)
    assert "secret-token-value-123" not in str(e.value)


@pytest.mark.slow
def test_a_down_server_leaves_the_review_stage_unwritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_demo_config
) -> None:
    from flows.xcm.stages import STAGES, run_stage

    monkeypatch.setenv("LABEL_STUDIO_API_KEY", "secret-token-value-123")
    server = {"url": "http://127.0.0.1:9", "document_root": str(tmp_path), "retry": {"max_attempts": 1}}
    config = small_demo_config.model_copy(update={"review": LabelStudioReviewConfig.model_validate({"server": server})})
    for stage in STAGES:
        if stage.name == "review":
            break
        run_stage(stage.name, config)
    from data.workspace import Workspace

    ws = Workspace(config.workspace_root, config.resolved_build_id())
    assert ws.read_extra_table("image_dedup", "review_queue").num_rows > 0  # the demo's planted look-alikes
    with pytest.raises(LabelStudioUnavailable):
        run_stage("review", config)
    assert ws.marker("review") is None


@pytest.mark.slow
def test_cli_exits_3_while_reviews_are_open_and_closes_them_on_request(tmp_path: Path) -> None:
    import yaml
    from typer.testing import CliRunner

    from flows.cli import app

    countries, concepts = ["USA", "Spain", "Japan", "Kenya"], ["train", "food"]
    config_file = tmp_path / "build.yaml"
    config_file.write_text(
        yaml.safe_dump(
            {
                "countries": countries,
                "concepts": {"include": concepts},
                "demo_corpus": {"countries": countries, "concepts": concepts, "images_per_query": 2},
                "review": {"backend": "label_studio_files", "when_unreviewed": "wait"},
            }
        )
    )
    args = ["build", "3xcm", "--demo", "--engine", "local", "--config", str(config_file)]
    args += ["--workspace-root", str(tmp_path / "ws"), "--release-root", str(tmp_path / "rel")]
    waiting = CliRunner().invoke(app, args)
    assert waiting.exit_code == 3, waiting.output
    assert "waiting for reviewers" in waiting.output and "tasks fully annotated" in waiting.output
    assert not (tmp_path / "rel").exists()
    closed = CliRunner().invoke(app, [*args, "--close-reviews"])
    assert closed.exit_code == 0, closed.output
    line = json.loads(closed.stdout.strip().splitlines()[-1])
    manifest = json.loads((Path(line["release_path"]) / "manifest.json").read_text())
    assert manifest["backends"]["review"] == "label_studio_files"
    assert manifest["review"]["closed_early"] is True
    card = (Path(line["release_path"]) / "README.md").read_text()
    undecided = manifest["review"]["undecided"]
    assert undecided > 0 and f"{undecided} undecided (one image of each undecided pair is held back)" in card


def test_summary_artifact_reports_the_reviewer_and_agreement() -> None:
    from data.stage_stats import StageStats
    from flows.engine.runner import review_markdown

    tasks, votes = ["x", "y", "z"], votes_for("x", SAME_SCENE, SAME_SCENE, SAME_SCENE)
    votes += votes_for("y", DIFFERENT, DIFFERENT, DIFFERENT) + votes_for("z", SAME_SCENE, DIFFERENT, DIFFERENT)
    _, agreement = decide(votes, tasks, SPECS[DUP], 3, complete=True)
    info = {"reviewer": "label_studio", "location": "http://ls/projects/1", "tasks": 3, "decided": 3, "undecided": 0}
    text = "\n".join(
        review_markdown(StageStats(stage="review", extra={"review": {**info, "agreement": agreement.summary()}}))
    )
    assert "`label_studio`" in text and "decided 3, undecided 0" in text
    assert f"Fleiss' kappa {agreement.fleiss_kappa:.3f} over 3 tasks; 1 with disagreement" in text
    assert review_markdown(StageStats(stage="review", extra={"review": {"reviewer": "auto_accept"}})) == [
        "",
        "## Human review (review)",
        "",
        "* reviewer: `auto_accept`",
    ]
