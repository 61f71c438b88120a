"""The engine's contracts: stages return their output and only the graph writes it, with the schemas the stage
declares; typed stage details keep the stats files' shape; every benchmark is one registry record that the CLI and
sync-reviews read; 3XCM checks its models before any stage runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pytest
from prefect.flows import load_flow_from_entrypoint
from pydantic import BaseModel
from typer.testing import CliRunner

from data.publish.folder import ReleaseResult
from data.stage_stats import ReviewSummary, StageStats
from flows import benchmarks
from flows.engine.benchmark import Benchmark
from flows.engine.config import BuildConfigBase
from flows.engine.graph import BuildGraph, Stage, StageOutput

ITEMS = pa.schema([("item", pa.int64()), ("status", pa.string()), ("error", pa.string())])
NOTES = pa.schema([("note", pa.string())])


class ToyConfig(BuildConfigBase):
    build_prefix: ClassVar[str] = "toy"
    count: int = 3

    @classmethod
    def demo(cls, **overrides: Any) -> ToyConfig:
        return cls(**overrides)


class Calls(BaseModel):
    runs: list[str] = []


class ToyStats(StageStats):
    """A stage's own typed detail, declared by the stage rather than by the generic StageStats."""

    detector: str | None = None


def toy_graph(calls: Calls, side: dict[str, pa.Table] | None = None) -> BuildGraph[ToyConfig]:
    def items(ctx: Any) -> StageOutput:
        calls.runs.append(ctx.stage)
        rows = [{"item": i, "status": "ok" if i else "failed", "error": None if i else "empty"} for i in range(3)]
        # int32 on purpose: the graph casts to the declared int64
        table = pa.table(
            {
                "item": pa.array([r["item"] for r in rows], pa.int32()),
                **{k: [r[k] for r in rows] for k in ("status", "error")},
            }
        )
        notes = {"notes": pa.table({"note": ["hello"]})} if side is None else side
        return StageOutput(table, notes)

    def total(ctx: Any) -> StageOutput:
        calls.runs.append(ctx.stage)
        count = ctx.table("items").num_rows
        stats = ToyStats(stage=ctx.stage, rows_in=count, kept=count, detector="toy-model")
        return StageOutput(pa.table({"item": [count], "status": ["ok"], "error": [None]}), stats=stats)

    stages = (
        Stage("items", 1, (), lambda c: c.count, items, ITEMS, {"notes": NOTES}),
        Stage("total", 1, ("items",), lambda c: None, total, ITEMS, stats_model=ToyStats),
    )
    return BuildGraph("toy", lambda config: stages)


def test_the_graph_writes_what_a_stage_returns_with_the_declared_schemas(tmp_path: Path) -> None:
    calls = Calls()
    build = toy_graph(calls).build(ToyConfig(workspace_root=str(tmp_path)))
    for name in build.names:
        _, skipped = build.run(name)
        assert not skipped
    items = build.ws.read_table("items")
    assert items.schema == ITEMS and items["item"].to_pylist() == [0, 1, 2]
    assert build.ws.read_extra_table("items", "notes").to_pylist() == [{"note": "hello"}]
    counted = build.ws.stats("items")  # no stats returned: counted from the status/error columns
    assert (counted.stage, counted.kept, counted.dropped, counted.dropped_by_reason) == ("items", 2, 1, {"empty": 1})
    total = build.stage_stats("total")  # read as the stage's stats model
    assert isinstance(total, ToyStats) and total.detector == "toy-model" and total.kept == 3
    assert build.ws.stats("total").extra == {"detector": "toy-model"}  # the generic record keeps it untyped

    again = toy_graph(calls).build(ToyConfig(workspace_root=str(tmp_path)))  # resolved anew: the same fingerprints
    assert again.fingerprints == build.fingerprints
    assert all(again.run(name)[1] for name in again.names) and calls.runs == ["items", "total"]


@pytest.mark.parametrize(
    "side",
    [{}, {"notes": pa.table({"note": ["x"]}), "extra": pa.table({"note": ["y"]})}],
    ids=["missing", "undeclared"],
)
def test_side_tables_must_be_the_declared_ones(tmp_path: Path, side: dict[str, pa.Table]) -> None:
    build = toy_graph(Calls(), side).build(ToyConfig(workspace_root=str(tmp_path)))
    with pytest.raises(TypeError, match="side tables"):
        build.run("items")
    assert build.ws.marker("items") is None  # nothing half-written is vouched for


class Holder(BaseModel):
    stats: list[StageStats]


def test_typed_stage_details_are_written_inside_extra_as_before() -> None:
    stats = ToyStats(
        stage="review",
        review={"reviewer": "auto_accept"},
        detector=None,  # set, even to None: written
        extra={"queries_failed": 2},
    )
    dumped = json.loads(stats.model_dump_json())
    assert dumped["extra"] == {"queries_failed": 2, "review": {"reviewer": "auto_accept"}, "detector": None}
    assert set(dumped) == {"stage", "rows_in", "kept", "dropped", "dropped_by_reason", "extra"}
    back = ToyStats.model_validate(dumped)
    assert isinstance(back.review, ReviewSummary) and back.review.reviewer == "auto_accept"
    assert back.review.tasks is None and back.contact_sheet is None and back.extra == {"queries_failed": 2}
    assert json.loads(back.model_dump_json()) == dumped  # a stats file read and written again keeps its bytes
    generic = StageStats.model_validate(dumped)  # without the stage's model: its detail stays in `extra`
    assert generic.extra == {"queries_failed": 2, "detector": None}
    assert json.dumps(generic.model_dump(), sort_keys=True) == json.dumps(dumped, sort_keys=True)
    # Serialized where a plain StageStats is declared (a build summary's stages), the typed detail is still written.
    assert json.loads(Holder(stats=[back]).model_dump_json())["stats"] == [dumped]
    with pytest.raises(ValueError, match="detector"):  # a detail the class does not declare is refused, not dropped
        StageStats(stage="faces", detector="haar")

    human = {"reviewer": "label_studio", "tasks": 4, "agreement": {"fleiss_kappa": 0.5}, "merged": 2}
    assert StageStats(stage="qa_r1", extra={"review": human}).model_dump()["extra"]["review"] == human


def test_every_registered_benchmark_is_one_record_the_cli_and_sync_reviews_read() -> None:
    from flows.cli import app
    from flows.sync_reviews import sync_reviews

    records = benchmarks.all_benchmarks()
    assert [r.name for r in records] == benchmarks.names() == ["3xcm", "mixcube"]
    for record in records:
        assert record.graph.name == record.name and record.flow.name == record.flow_name
        assert record.flow.parameters.properties["config"]  # the flow's typed config parameter
        assert benchmarks.by_flow_name(record.flow_name) is record
        # prefect.yaml's entrypoint loads the record's own flow, with the parameters and default it always had.
        loaded = load_flow_from_entrypoint(record.entrypoint)  # as a worker does: the file run as a script
        assert (loaded.name, loaded.parameters, loaded.version) == (
            record.flow_name,
            record.flow.parameters,
            record.flow.version,
        )
        assert list(record.flow.parameters.properties) == ["config", "close_reviews"]
        assert record.flow.parameters.required == []
        assert record.flow.fn.__defaults__ == (record.config.demo(), False)
        assert record.flow.description.startswith(f"Build and release {record.title};")
    help_text = CliRunner().invoke(app, ["build", "--help"]).output
    assert all(name in help_text for name in benchmarks.names())
    assert sync_reviews.parameters.properties["flow_names"]
    with pytest.raises(benchmarks.UnknownBenchmark, match="known: 3xcm, mixcube"):
        benchmarks.get("4xcm")


class NoReview:
    """A review with nothing to wait for: the engine asks it through `data.review.Review` only."""

    wait_timeout_s = None

    def completion(self, build_id: str) -> tuple[bool, str]:
        return False, "nothing to wait for"


def toy_benchmark(calls: Calls, release_root: Path) -> Benchmark[ToyConfig]:
    def preflight(config: ToyConfig) -> None:
        calls.runs.append("preflight")

    def release(build: Any, progress: Any = None) -> ReleaseResult:
        return ReleaseResult(path=str(release_root), version="0.0.1", status="created", manifest={})

    return Benchmark(
        name="toy",
        title="Toy",
        flow_name="build-toy",
        entrypoint="test_engine.py:build_toy",
        description="Build the toy.",
        config=ToyConfig,
        graph=toy_graph(calls),
        review=lambda config: NoReview(),
        preflight=preflight,
        check_reference=lambda *args: None,
        release=release,
        provenance=lambda build: {},
        nothing_released=RuntimeError,
    )


def test_a_local_build_runs_its_preflight_once(tmp_path: Path) -> None:
    calls = Calls()
    summary = toy_benchmark(calls, tmp_path / "release").run(ToyConfig(workspace_root=str(tmp_path / "ws")))
    assert calls.runs == ["preflight", "items", "total"]
    assert [s.stage for s in summary.stages] == ["items", "total"] and summary.stages[1].detector == "toy-model"
    with pytest.raises(ValueError, match="unknown engine"):
        toy_benchmark(calls, tmp_path).run(ToyConfig(workspace_root=str(tmp_path / "ws")), engine="dask")  # type: ignore[arg-type]


@pytest.mark.prefect
def test_a_prefect_build_runs_its_preflight_once(prefect: Path, tmp_path: Path) -> None:
    """`run` checks the config and starts a flow run that does not check it again; the flow a deployment runs
    checks it itself, once."""
    calls = Calls()
    benchmark = toy_benchmark(calls, tmp_path / "release")
    summary = benchmark.run(ToyConfig(workspace_root=str(tmp_path / "ws")), engine="prefect")
    assert calls.runs == ["preflight", "items", "total"] and summary.skipped_stages == []
    calls.runs.clear()
    state = benchmark.flow(ToyConfig(workspace_root=str(tmp_path / "ws")), return_state=True)
    assert state.is_completed() and calls.runs == ["preflight"]  # both stages were done: skipped
    assert benchmark.flow.name == "build-toy" and benchmark.flow.fn.__name__ == "build_toy"


def test_3xcm_fails_before_any_stage_when_its_open_clip_weights_are_missing(tmp_path: Path) -> None:
    from flows.cli import app
    from flows.xcm.build import XCM
    from flows.xcm.config import Build3XCMConfig

    missing = tmp_path / "models" / "open_clip_pytorch_model.bin"
    embedding = {"embedder": {"model_name": "ViT-B-32", "pretrained": str(missing)}}
    config = Build3XCMConfig.demo(workspace_root=str(tmp_path / "ws"), image_dedup={"embedding": embedding})
    with pytest.raises(FileNotFoundError, match=r"OpenClipEmbeddingConfig\.pretrained"):
        XCM.build_locally(config)
    assert not (tmp_path / "ws").exists() or not any((tmp_path / "ws").rglob("_SUCCESS"))  # nothing ran

    file = tmp_path / "config.json"
    file.write_text(json.dumps({"image_dedup": {"embedding": embedding}}))
    result = CliRunner().invoke(
        app, ["build", "3xcm", "--demo", "--engine", "local", "--config", str(file), "--workspace-root", str(tmp_path)]
    )
    assert result.exit_code == 2 and "does not exist" in result.output
    assert not any(tmp_path.rglob("_SUCCESS"))


@pytest.mark.parametrize(("name", "section", "stage"), [("3xcm", "review", "review"), ("mixcube", "qa", "qa_r1")])
def test_each_record_hands_the_engine_its_review(tmp_path: Path, name: str, section: str, stage: str) -> None:
    """The engine reaches a review only through the record's `review` (data/review.py `Review`); the review stage's
    fingerprint counts the completed export's content, so a new export at the same path is new input."""
    record = benchmarks.get(name)
    export = tmp_path / "export.json"
    files = {"backend": "label_studio_files", "completed_export": str(export)}
    config = record.config.demo(workspace_root=str(tmp_path / "ws"), **{section: files})
    review = record.review(config)
    assert review.wait_timeout_s is None  # only a Label Studio server's review times out
    assert review.completion("b") == (False, f"completed export missing: {export}")
    export.write_text("[]")
    assert review.completion("b") == (True, f"completed export found: {export}")
    before = record.build(config).fingerprints
    export.write_text('[{"id": 1}]')
    after = record.build(config).fingerprints
    assert before[stage] != after[stage] and all(before[s] == after[s] for s in record.graph.names(config)[:2])
    server = {"backend": "label_studio", "server": {"document_root": str(tmp_path)}, "wait_timeout_s": 3600}
    demo = record.config.demo().model_dump(mode="json")  # a section replaced whole, not merged into the demo's

    def with_review(review: dict[str, Any]) -> Any:
        return record.review(record.config.model_validate({**demo, section: review}))

    assert with_review(server).wait_timeout_s == 3600
    auto = with_review({"backend": "auto_accept"})
    assert auto.completion("b") == (False, "review backend auto_accept has nothing to wait for")
