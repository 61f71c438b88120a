"""The build end to end: through Prefect, after a crash, and from the CLI."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from datasets import load_dataset
from typer.testing import CliRunner

import collectors.importer
from curation.image_dedup import PerceptualTierConfig
from curation.validate import validate_benchmark
from data.reference import default_pack
from data.schemas import CATALOG
from flows.cli import app
from flows.xcm.build import build_locally
from flows.xcm.config import Build3XCMConfig
from flows.xcm.stages import STAGES
from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT


@pytest.mark.prefect
def test_prefect_flow_builds_a_valid_release(prefect: Path, small_demo_config: Build3XCMConfig) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, FlowRunFilter, FlowRunFilterId
    from prefect.client.schemas.sorting import TaskRunSort

    from flows.xcm.build import build_3xcm

    state = build_3xcm(small_demo_config, return_state=True)
    assert state.is_completed(), state
    summary = state.result()
    images = load_dataset(summary.release_path, "image_metadata", split="train")
    benchmark = load_dataset(summary.release_path, "benchmark", split="train").data.table
    sextets = load_dataset(summary.release_path, "benchmark_cd", split="train").data.table
    report = validate_benchmark(images.data.table.select(CATALOG.names), benchmark, sextets, pack=default_pack())
    assert report.ok, report.summary()

    async def read_run() -> tuple:
        async with get_client() as client:
            run = await client.read_flow_run(state.state_details.flow_run_id)
            tasks = await client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run.id])),
                sort=TaskRunSort.EXPECTED_START_TIME_ASC,
                limit=200,
            )
            arts = await client.read_artifacts(
                artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run.id])), limit=200
            )
            return run, tasks, arts

    flow_run, task_runs, artifacts = asyncio.run(read_run())
    assert flow_run.name and flow_run.state.is_completed()
    names = {t.name.rsplit("-", 1)[0] for t in task_runs}
    assert {s.name for s in STAGES} <= names  # one readable task per stage
    keys = {a.key for a in artifacts}
    assert "build-3xcm-summary" in keys and "image-dedup-stats" in keys
    # Long stages report progress in the UI; the download's reached 100% of its items.
    progress = {a.key: a.data for a in artifacts if a.type == "progress"}
    assert {"search-progress", "images-progress"} <= set(progress)
    assert float(progress["images-progress"]) == 100.0
    summary_md = next(a for a in artifacts if a.key == "build-3xcm-summary").data
    assert summary.release_path in summary_md and "valid" in summary_md
    # The per-concept dedup summary is a table artifact whose counts add up to the dedup decisions.
    per_concept = json.loads(next(a for a in artifacts if a.key == "image-dedup-concept-summary").data)
    dedup = next(s for s in summary.stages if s.stage == "image_dedup")
    assert sum(r["images"] for r in per_concept) == dedup.rows_in
    assert sum(r["dropped"] for r in per_concept) == dedup.dropped > 0
    # The contact sheet of merged clusters is a PNG in the workspace, linked from the summary.
    sheet = Path(summary.workspace.removeprefix("file://")) / dedup.contact_sheet
    assert sheet.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and sheet.as_uri() in summary_md
    # So are the figures: drop reasons per stage, and the release's images-per-concept-and-country heatmap.
    figures = {Path(f.removeprefix("file://")).name: Path(f.removeprefix("file://")) for f in summary.figures}
    assert set(figures) == {
        "drops_by_stage.png",
        "release_images_per_concept_country.png",
        "release_source_domains.png",
    }
    assert all(path.as_uri() in summary_md and path.read_bytes()[:4] == b"\x89PNG" for path in figures.values())


class SimulatedCrash(BaseException):
    """Stands in for a kill: not an Exception, so no handler in the pipeline may swallow it."""


@pytest.mark.slow
def test_a_crashed_build_resumes_without_redoing_finished_work(
    small_demo_config: Build3XCMConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = small_demo_config.model_copy(
        update={"download": small_demo_config.download.model_copy(update={"shard_size": 10})}
    )
    real_read = collectors.importer.read_limited  # each image's one read (the image pass reads nothing again)
    calls: list[int] = []
    crashed: list[bool] = []

    def crash_on_the_25th_image(url, max_bytes):
        calls.append(1)
        if len(calls) == 25 and not crashed:
            crashed.append(True)
            raise SimulatedCrash("the process died here")
        return real_read(url, max_bytes)

    monkeypatch.setattr(collectors.importer, "read_limited", crash_on_the_25th_image)
    with pytest.raises(SimulatedCrash):
        build_locally(config)
    assert len(calls) == 25
    images_dir = Path(config.workspace_root) / config.resolved_build_id() / "tables" / "images"
    assert sorted(p.name for p in images_dir.glob("part-*")) == ["part-00000.parquet", "part-00001.parquet"]
    (images_dir / ".tmp-deadbeef-part-00002.parquet").write_bytes(b"half-written by a killed process")

    calls.clear()
    summary = build_locally(config)
    total_hits = stage_rows(config, "images")
    assert len(calls) == total_hits - 20  # the two finished shards were not imported again
    assert {"demo_corpus", "concepts", "search"} <= set(summary.skipped_stages)
    assert "images" not in summary.skipped_stages

    # The resumed build releases exactly what a clean build releases.
    clean = config.model_copy(
        update={
            "workspace_root": str(tmp_path / "clean-ws"),
            "release": config.release.model_copy(update={"root": str(tmp_path / "clean-releases")}),
        }
    )
    clean_summary = build_locally(clean)
    resumed_files = json.loads((Path(summary.release_path) / "manifest.json").read_text())["files"]
    clean_files = json.loads((Path(clean_summary.release_path) / "manifest.json").read_text())["files"]
    assert resumed_files == clean_files


def stage_rows(config: Build3XCMConfig, stage: str) -> int:
    from data.workspace import Workspace

    return Workspace(config.workspace_root, config.resolved_build_id()).marker(stage).rows


@pytest.mark.slow
def test_a_changed_stage_config_reruns_that_stage_and_what_follows(small_demo_config: Build3XCMConfig) -> None:
    build_locally(small_demo_config)
    changed = small_demo_config.model_copy(
        update={
            "image_dedup": small_demo_config.image_dedup.model_copy(
                update={"perceptual": PerceptualTierConfig(merge_max_distance=2, verify_max_distance=4)}
            ),
            "release": small_demo_config.release.model_copy(update={"version": "0.0.2"}),
        }
    )
    assert changed.resolved_build_id() != small_demo_config.resolved_build_id()
    changed = changed.model_copy(update={"build_id": small_demo_config.resolved_build_id()})  # same workspace
    summary = build_locally(changed)
    order = [s.name for s in STAGES]
    assert summary.skipped_stages == order[: order.index("image_dedup")]


@pytest.mark.slow
def test_cli_demo_build_and_config_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    config_file = tmp_path / "build.yaml"
    config_file.write_text(
        yaml.safe_dump(
            {
                "countries": ["USA", "Spain", "Japan", "Kenya"],
                "concepts": {"include": ["train", "food"]},
                "demo_corpus": {"countries": ["USA", "Spain", "Japan", "Kenya"], "concepts": ["train", "food"],
                                "images_per_query": 2},
            }
        )
    )  # fmt: skip
    result = runner.invoke(
        app,
        ["build", "3xcm", "--demo", "--engine", "local", "--config", str(config_file),
         "--workspace-root", str(tmp_path / "ws"), "--release-root", str(tmp_path / "rel"), "--version", "1.0.0"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    line = json.loads(result.stdout.strip().splitlines()[-1])
    assert line["status"] == "created" and Path(line["release_path"]).is_dir()
    assert Path(line["release_path"]).name == "1.0.0"

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"countries": ["USA", "Atlantis"],
                                   "image_dedup": {"perceptual": {"merge_max_distance": 99}},
                                   "release": {"version": "one"}}))  # fmt: skip
    result = runner.invoke(app, ["build", "3xcm", "--engine", "local", "--config", str(bad)])
    assert result.exit_code == 2
    for field in ("countries", "image_dedup.perceptual.merge_max_distance", "release.version"):
        assert field in result.output
    assert "Atlantis" in result.output

    printed = runner.invoke(app, ["config", "--demo"])
    assert Build3XCMConfig.model_validate_json(printed.stdout) == Build3XCMConfig.demo()


def test_prefect_yaml_demo_deployment_matches_the_flow() -> None:
    spec = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    demo = next(d for d in spec["deployments"] if d["name"] == "demo" and "build_3xcm" in d["entrypoint"])
    module, function = demo["entrypoint"].split(":")
    assert module == "flows/xcm/build.py" and function == "build_3xcm"
    assert demo["work_pool"]["name"]
    config = Build3XCMConfig.model_validate(demo["parameters"]["config"])
    assert config == Build3XCMConfig.demo()


@pytest.mark.slow
def test_a_build_that_breaks_a_rule_fails_and_releases_nothing(
    small_demo_config: Build3XCMConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    import curation.assemble
    from flows.xcm.stages import BuildValidationError

    real = curation.assemble.assemble_rq2

    def correct_is_the_query_itself(catalog, counts, seed, keep=None, queries_of=None, **progress):
        result = real(catalog, counts, seed, keep, queries_of, **progress)
        result.candidates[:, 0] = result.queries  # the query image as its own "correct" answer: same group
        return result

    monkeypatch.setattr(curation.assemble, "assemble_rq2", correct_is_the_query_itself)
    with pytest.raises(BuildValidationError, match=r"rq2\.correct") as failure:
        build_locally(small_demo_config)
    violations = pq.read_table(str(failure.value).rsplit("all violations: ", 1)[1])
    assert violations.num_rows > 0 and set(violations["rule"].to_pylist()) >= {"rq2.correct"}
    assert not Path(small_demo_config.release.root).exists() or not any(Path(small_demo_config.release.root).rglob("*"))
