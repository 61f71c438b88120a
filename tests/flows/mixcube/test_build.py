"""`build-mixcube` end to end: the demo through Prefect and without, retries from the filters and from QA up to the
attempt cap, originals without a face, a crash mid-synthesis, and missing model files caught before any work."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from datasets import load_dataset
from PIL import Image
from skimage import data as skimage_data
from typer.testing import CliRunner

import synthesis.inpaint
from annotation.collect import ReviewPending
from annotation.label_configs import ACCEPT, FIX_MASK, REJECT_MARKER, RETRY_PROMPT
from collectors.mixcube_originals import LocalOriginalsConfig
from data.reference import default_pack
from data.workspace import Workspace
from flows.cli import app
from flows.mixcube.build import NothingToRelease, build_locally
from flows.mixcube.config import BuildMixCubeConfig
from flows.mixcube.stages import GRAPH
from tests.support.paths import REPO_ROOT
from tests.support.review_inputs import brush, completed_export, retry_text, verdict

ROOT = REPO_ROOT
ETHNICITIES = [e.label for e in default_pack().mixcube().ethnicities]
MIXCUBE_DEMO = ["build", "mixcube", "--demo", "--engine", "local"]


def small_config(tmp_path: Path, **overrides: object) -> BuildMixCubeConfig:
    base = {
        "workspace_root": str(tmp_path / "ws"),
        "originals": {"per_cell": 1, "cultures": ["South Korea", "UK"], "categories": ["Food", "Clothes"]},
        "release": {"root": str(tmp_path / "rel"), "version": "0.0.1"},
        "shard_size": 4,
    }
    return BuildMixCubeConfig.demo(**{**base, **overrides})


def workspace(config: BuildMixCubeConfig) -> Workspace:
    return GRAPH.build(config).ws


@pytest.mark.slow
def test_demo_build_releases_quintets_and_a_rerun_redoes_nothing(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    summary = build_locally(config)
    originals = workspace(config).read_table("originals").num_rows
    assert originals == 4

    loaded = load_dataset(summary.release_path, split="train")
    assert len(loaded) == 5 * originals
    ethnicities = loaded["ethnicity"]
    for start in range(0, len(loaded), 5):
        assert ethnicities[start : start + 5] == ["original", *ETHNICITIES]
    swaps = [row for row in loaded if row["ethnicity"] != "original"]
    assert all(row["placeholder"] and row["model_id"] == "placeholder" for row in swaps)
    assert all(row["prompt"] and row["seed"] is not None and row["mask_sha256"] for row in swaps)
    assert len({row["seed"] for row in swaps}) == len(swaps)  # one seed per (original, ethnicity, attempt)
    release = Path(summary.release_path)
    card = (release / "README.md").read_text()
    assert "pipeline demonstration, not the benchmark" in card and "placeholders, not syntheses" in card
    opening = [line for line in card.split("---\n", 2)[2].splitlines() if line.strip()][:4]
    assert any("No human reviewed the synthesized images" in line for line in opening)
    manifest = json.loads((release / "manifest.json").read_text())
    # Every stage that is not the paper's is named: Haar, ellipse masks, the placeholder, both filters off, no QA.
    assert len(manifest["deviations"]) == 6 and all(f"* {d}" in card for d in manifest["deviations"])
    assert "Every stage ran on the paper's backend" not in card
    assert manifest["demo"] is True and manifest["backends"]["inpaint"] == "placeholder"
    short = manifest["cells_below_target"]  # the demo wants 2 per cell; this build made 1
    assert len(short) == 4 and {(c["originals"], c["target"]) for c in short} == {(1, 2)}

    figures = {Path(f.removeprefix("file://")).name: Path(f.removeprefix("file://")) for f in summary.figures}
    assert set(figures) == {"drops_by_stage.png", "release_before_after.png", "release_source_domains.png"}
    assert all(f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for f in figures.values())
    assert figures["release_before_after.png"].read_bytes() == (release / "figures" / "before_after.png").read_bytes()

    again = build_locally(config)
    assert set(again.skipped_stages) == set(GRAPH.names(config)) and again.release_status == "unchanged"


@pytest.mark.prefect
def test_prefect_flow_builds_the_demo_with_a_task_per_stage_and_inpaints_holding_the_gpu_slot(
    prefect: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    from flows.mixcube.build import build_mixcube

    with get_client(sync_client=True) as client:
        client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name="gpu-mixcube-test", limit=1))
    real = synthesis.inpaint.PlaceholderInpainter.inpaint
    slots_while_inpainting: list[int] = []

    def spy(self: object, requests: list) -> list:
        with get_client(sync_client=True) as client:
            slots_while_inpainting.append(client.read_global_concurrency_limit_by_name("gpu-mixcube-test").active_slots)
        return real(self, requests)

    monkeypatch.setattr(synthesis.inpaint.PlaceholderInpainter, "inpaint", spy)
    config = small_config(
        tmp_path,
        originals={"per_cell": 1, "cultures": ["Myanmar"], "categories": ["Festival"]},
        gpu_concurrency_limit="gpu-mixcube-test",
    )
    state = build_mixcube(config, return_state=True)
    assert state.is_completed(), state
    summary = state.result()
    assert len(load_dataset(summary.release_path, split="train")) == 5
    assert slots_while_inpainting == [1]  # one shard of 4 attempts, drawn inside the GPU slot

    async def task_names() -> set[str]:
        async with get_client() as client:
            runs = await client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id])), limit=200
            )
        return {t.name.rsplit("-", 1)[0] for t in runs}

    assert set(GRAPH.names(config)) | {"release"} <= asyncio.run(task_names())


@pytest.mark.slow
def test_filter_rejections_are_redrawn_up_to_the_cap_and_reported(tmp_path: Path, brisque_weights_file: Path) -> None:
    # No image scores below -1000: every attempt is rejected, so every pair is drawn max_attempts times.
    filters = {"brisque": {"weights_path": str(brisque_weights_file), "max_score": -1000.0}, "clip": None}
    originals = {"per_cell": 1, "cultures": ["Azerbaijan"], "categories": ["Food"]}
    config = small_config(tmp_path, filters=filters, originals=originals, max_attempts=2)
    with pytest.raises(NothingToRelease, match="1 originals left out"):
        build_locally(config)
    ws = workspace(config)
    first, second = ws.read_table("synthesis_r1").to_pylist(), ws.read_table("synthesis_r2").to_pylist()
    assert len(first) == len(second) == 4
    previous = {row["attempt_id"]: row for row in first}
    for retry in second:
        before = previous[retry["retry_of"]]
        assert retry["retry_kind"] == "reseed" and retry["attempt"] == 2
        assert retry["prompt"] == before["prompt"] and retry["mask_sha256"] == before["mask_sha256"]
        assert retry["seed"] != before["seed"] and retry["sha256"] != before["sha256"]
    assert set(ws.read_table("filters_r2")["verdict"].to_pylist()) == {"reject_brisque"}
    left = ws.read_extra_table("quintets", "left_over").to_pylist()
    assert {(r["ethnicity"], r["attempts"], r["outcome"], r["cap_reached"]) for r in left} == {
        (e, 2, "filter:reject_brisque", True) for e in ETHNICITIES
    }

    # A higher cap continues the same build: it reuses the finished rounds and draws one more.
    more = config.model_copy(update={"max_attempts": 3})
    with pytest.raises(NothingToRelease):
        build_locally(more)
    assert ws.read_table("synthesis_r2").to_pylist() == second
    assert {r["attempt"] for r in ws.read_table("synthesis_r3").to_pylist()} == {3}


@pytest.mark.slow
def test_qa_requests_become_new_attempts_and_undecided_ones_are_reported(tmp_path: Path) -> None:
    originals = {"per_cell": 1, "cultures": ["South Korea"], "categories": ["Food", "Festival", "Clothes"]}
    waiting = {"backend": "label_studio_files", "when_unreviewed": "wait"}
    config = small_config(tmp_path, originals=originals, qa=waiting)
    with pytest.raises(ReviewPending):
        build_locally(config)
    ws = workspace(config)
    tasks_file = Path(ws.file_path("label_studio", "synthesis_qa", "tasks.json"))
    tasks = json.loads(tasks_file.read_text())
    assert len(tasks) == 12 and not (Path(config.release.root) / "mixcube").exists()

    by_category = {r["category"]: r for r in ws.read_table("originals").to_pylist()}
    food, festival, clothes = (by_category[c]["original_id"] for c in ("Food", "Festival", "Clothes"))
    retried, masked, rejected = f"{food}-african-1", f"{food}-caucasian-1", f"{festival}-southasian-1"
    painted = np.zeros((by_category["Food"]["height"], by_category["Food"]["width"]), dtype=bool)
    painted[10:60, 20:90] = True
    results = {}
    for task in tasks:
        key = task["data"]["item_key"]
        if key == retried:
            results[key] = [[*verdict("synthesis_qa", RETRY_PROMPT), retry_text("a tailored prompt")]] * 3
        elif key == masked:
            results[key] = [[*verdict("synthesis_qa", FIX_MASK), brush(painted)]] * 3
        elif key == rejected:
            results[key] = [verdict("synthesis_qa", REJECT_MARKER)] * 3
        else:
            results[key] = [verdict("synthesis_qa", ACCEPT)] * 3
    export = tmp_path / "export.json"
    export.write_text(json.dumps(completed_export(tasks, results)))

    reviewed = config.model_copy(update={"qa": config.qa.model_copy(update={"completed_export": str(export)})})
    with pytest.raises(ReviewPending, match="0 of 3"):  # round 2's attempts wait for their own annotations
        build_locally(reviewed)
    first = {r["attempt_id"]: r for r in ws.read_table("synthesis_r1").to_pylist()}
    retries = {r["retry_of"]: r for r in ws.read_table("synthesis_r2").to_pylist()}
    assert set(retries) == {retried, masked, rejected}
    assert retries[retried]["retry_kind"] == RETRY_PROMPT and retries[retried]["prompt"] == "a tailored prompt"
    assert retries[retried]["mask_sha256"] == first[retried]["mask_sha256"]
    fixed = retries[masked]
    assert fixed["retry_kind"] == FIX_MASK and fixed["prompt"] == first[masked]["prompt"]
    with Image.open(io.BytesIO(ws.blobs.get(fixed["mask_sha256"]))) as image:
        assert np.array_equal(np.array(image) > 0, painted)
    assert fixed["sha256"] is not None and fixed["error"] is None
    assert retries[rejected]["retry_kind"] == "reseed" and retries[rejected]["seed"] != first[rejected]["seed"]
    assert len(json.loads(tasks_file.read_text())) == 12 + 3  # the same project gets round 2's tasks

    summary = build_locally(reviewed, close_reviews=True)  # close round 2 as it stands: its attempts are undecided
    left = {r["last_attempt_id"]: r for r in ws.read_extra_table("quintets", "left_over").to_pylist()}
    assert {k.rsplit("-", 1)[0] for k in left} == {k.rsplit("-", 1)[0] for k in (retried, masked, rejected)}
    assert {r["outcome"] for r in left.values()} == {"qa:undecided"}
    assert not any(r["cap_reached"] for r in left.values())
    assert ws.read_table("synthesis_r3").num_rows == 0  # undecided attempts are reported, not redrawn
    loaded = load_dataset(summary.release_path, split="train")
    assert set(loaded["original_id"]) == {clothes} and len(loaded) == 5
    assert set(loaded["review_decision"][1:]) == {ACCEPT}
    manifest = json.loads((Path(summary.release_path) / "manifest.json").read_text())
    assert {i["original_id"] for i in manifest["incomplete"]} == {food, festival}
    assert "by their last outcome: qa:undecided 3" in (Path(summary.release_path) / "README.md").read_text()


def test_an_original_without_a_face_is_a_row_and_is_never_inpainted(tmp_path: Path) -> None:
    folder = tmp_path / "originals"
    folder.mkdir()
    Image.fromarray(skimage_data.astronaut()).save(folder / "person.jpg")
    Image.fromarray(np.tile(np.linspace(0, 255, 256, dtype=np.uint8), (256, 1))).convert("RGB").save(folder / "w.png")
    (folder / "labels.csv").write_text(
        "image_file,culture,category,food_label\nperson.jpg,UK,Food,Fish and chips\nw.png,UK,Food,Tea\n"
    )
    local = LocalOriginalsConfig(root=str(folder), labels_csv=str(folder / "labels.csv"))
    config = small_config(tmp_path).model_copy(update={"originals": local})
    summary = build_locally(config)
    ws = workspace(config)
    faces = {r["original_id"]: r for r in ws.read_table("faces").to_pylist()}
    assert sorted(r["error"] or "ok" for r in faces.values()) == ["no_face", "ok"]
    no_face = next(k for k, r in faces.items() if r["error"] == "no_face")
    assert no_face not in set(ws.read_table("synthesis_r1")["original_id"].to_pylist())
    loaded = load_dataset(summary.release_path, split="train")
    assert len(loaded) == 5 and no_face not in set(loaded["original_id"])
    manifest = json.loads((Path(summary.release_path) / "manifest.json").read_text())
    assert manifest["demo"] is False and manifest["dropped_before_synthesis"] == {"faces": {"no_face": 1}}
    short = {(c["country"], c["category"]): c["originals"] for c in manifest["cells_below_target"]}
    assert len(short) == 15 and short[("British", "Food")] == 1  # every cell is wanted; only one has an original
    assert "dropped at `faces`: no_face 1" in (Path(summary.release_path) / "README.md").read_text()


class Killed(BaseException):
    """Stands for the process dying: not an Exception, so nothing in the stage may catch it."""


@pytest.mark.slow
def test_a_crash_mid_synthesis_resumes_without_redrawing_finished_shards(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = small_config(tmp_path, shard_size=4)  # 4 originals x 4 ethnicities: 4 shards of 4 attempts
    real = synthesis.inpaint.PlaceholderInpainter.inpaint
    drawn: list[str] = []
    crashed: list[bool] = []

    def crash_on_third_shard(self: object, requests: list) -> list:
        if len(drawn) == 8 and not crashed:
            crashed.append(True)
            raise Killed("killed mid-build")
        drawn.extend(f"{r.original_id}-{r.ethnicity}" for r in requests)
        return real(self, requests)

    monkeypatch.setattr(synthesis.inpaint.PlaceholderInpainter, "inpaint", crash_on_third_shard)
    with pytest.raises(Killed):
        build_locally(config)
    assert len(drawn) == 8
    build_locally(config)
    assert len(drawn) == 16 and len(set(drawn)) == 16  # nothing drawn twice


@pytest.mark.slow
def test_a_missing_model_file_fails_before_any_stage_runs(tmp_path: Path) -> None:
    config = small_config(tmp_path, faces={"backend": "yunet", "model_path": str(tmp_path / "absent.onnx")})
    with pytest.raises(FileNotFoundError, match="model_path"):
        build_locally(config)
    assert not Path(config.workspace_root).exists()

    result = CliRunner().invoke(
        app,
        [*MIXCUBE_DEMO, "--workspace-root", str(tmp_path / "cli"), "--release-root", str(tmp_path / "rel-cli")],
        catch_exceptions=False,
        env={"NO_COLOR": "1"},
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.strip().splitlines()[-1])["status"] == "created"


def test_prefect_yaml_mixcube_demo_deployment_matches_the_flow() -> None:
    spec = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    demo = next(d for d in spec["deployments"] if d["entrypoint"] == "flows/mixcube/build.py:build_mixcube")
    assert demo["name"] == "demo" and demo["work_pool"]["name"]
    assert BuildMixCubeConfig.model_validate(demo["parameters"]["config"]) == BuildMixCubeConfig.demo()


@pytest.mark.prefect
@pytest.mark.parametrize(("error", "runs", "completed"), [(ConnectionError, 2, True), (ValueError, 1, False)])
def test_a_stage_is_retried_for_transient_errors_only(
    prefect: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: type[Exception], runs: int, completed: bool
) -> None:
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    import flows.engine.retries
    from flows.mixcube.build import build_mixcube

    monkeypatch.setattr(flows.engine.retries, "STAGE_RETRY_DELAYS_S", [0.0, 0.0])
    real = synthesis.inpaint.PlaceholderInpainter.inpaint
    calls: list[int] = []

    def fail_once(self: object, requests: list) -> list:
        calls.append(len(requests))
        if len(calls) == 1:
            raise error("the first call fails")
        return real(self, requests)

    monkeypatch.setattr(synthesis.inpaint.PlaceholderInpainter, "inpaint", fail_once)
    config = small_config(tmp_path, originals={"per_cell": 1, "cultures": ["UK"], "categories": ["Clothes"]})
    state = build_mixcube(config, return_state=True)
    assert state.is_completed() is completed

    async def synthesis_run_count() -> int:
        async with get_client() as client:
            tasks = await client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id])), limit=200
            )
        return next(t.run_count for t in tasks if t.name.startswith("synthesis_r1"))

    assert asyncio.run(synthesis_run_count()) == runs


@pytest.mark.prefect
def test_prefect_caches_finished_stages_and_a_changed_stage_config_reruns_only_that_stage_onwards(
    prefect: Path, tmp_path: Path
) -> None:
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    from flows.mixcube.build import build_mixcube

    async def task_states(flow_run_id: object) -> dict[str, str]:
        async with get_client() as client:
            runs = await client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])), limit=200
            )
        return {t.name.rsplit("-", 1)[0]: t.state.name for t in runs}

    def states(config: BuildMixCubeConfig) -> dict[str, str]:
        state = build_mixcube(config, return_state=True)
        assert state.is_completed(), state
        return asyncio.run(task_states(state.state_details.flow_run_id))

    originals = {"per_cell": 1, "cultures": ["Azerbaijan"], "categories": ["Food"]}
    config = small_config(tmp_path, originals=originals, build_id="cached", max_attempts=1)
    names = GRAPH.names(config)
    first = states(config)
    assert {first[n] for n in names} == {"Completed"}  # built
    second = states(config)  # every stage found done by its marker; the results are kept under their keys
    assert {second[n] for n in names} == {"Completed"}
    third = states(config)
    assert {third[n] for n in names} == {"Cached"}  # answered by Prefect's cache, nothing ran

    wider = config.model_copy(
        update={
            "masks": config.masks.model_copy(update={"feather_kernel": 31}),
            "release": config.release.model_copy(update={"version": "0.0.2"}),  # other masks: another release
        }
    )
    after = states(wider)
    assert [after[n] for n in names] == ["Cached"] * 2 + ["Completed"] * (len(names) - 2)  # masks onwards
