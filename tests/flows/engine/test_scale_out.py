"""Scale-out on Dask: the sharded stages run as one Prefect task per shard on a cluster of worker processes, GPU
stages only on workers that offer a GPU, and the release is byte for byte the default runner's."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from flows.engine.config import ConfigError, build_config
from flows.engine.task_runner import DaskTaskRunnerConfig
from flows.mixcube.config import BuildMixCubeConfig
from flows.xcm.config import Build3XCMConfig
from tests.conftest import SMALL_CONCEPTS, SMALL_COUNTRIES
from tests.support.tiny_models import build_tiny_open_clip


def sharded_3xcm(models: Path) -> dict[str, Any]:
    """Small shards, so that every sharded stage has several and both workers get some; and the embedding tier on
    a tiny random open_clip model, which each worker loads once."""
    configs, weights = build_tiny_open_clip(models)
    embedder = {"model_name": "tiny-clip-test", "pretrained": str(weights), "model_config_dir": str(configs)}
    # A random model's cosines mean nothing: nothing may merge or queue on them.
    tier = {"embedder": {**embedder, "device": "cpu"}, "merge_min_cosine": 1.0, "review_min_cosine": 1.0}
    return {
        "download": {"backend": "local", "shard_size": 8},
        "image_dedup": {"shard_size": 8, "embedding": {**tier, "shard_size": 8}},
    }


def release_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def task_runs(flow_run_id: Any) -> list:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    async def read() -> list:
        async with get_client() as client:
            return await client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])), limit=200
            )

    return asyncio.run(read())


def build_in(folder: Path, monkeypatch: pytest.MonkeyPatch, flow: Any, config: Any) -> Any:
    """Build from `folder` with relative roots: the two releases then name the same roots in their manifests."""
    folder.mkdir()
    monkeypatch.chdir(folder)
    state = flow(config, return_state=True)
    assert state.is_completed(), state
    return state


@pytest.mark.prefect
def test_3xcm_on_a_local_dask_cluster_releases_the_default_runners_bytes(
    prefect: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.engine.runner import summary_markdown
    from flows.xcm.build import build_3xcm

    overrides = {
        "countries": SMALL_COUNTRIES,
        "concepts": {"include": SMALL_CONCEPTS},
        "demo_corpus": {"countries": SMALL_COUNTRIES, "concepts": SMALL_CONCEPTS, "images_per_query": 2},
        "release": {"version": "0.0.1"},
        **sharded_3xcm(tmp_path / "models"),
    }
    default = Build3XCMConfig.demo(**overrides)
    on_dask = Build3XCMConfig.demo(**overrides, task_runner={"kind": "dask", "n_workers": 2, "processes": True})
    assert on_dask.resolved_build_id() == default.resolved_build_id()  # how it runs is not what it builds

    build_in(tmp_path / "default", monkeypatch, build_3xcm, default)
    state = build_in(tmp_path / "dask", monkeypatch, build_3xcm, on_dask)

    expected = release_files(tmp_path / "default" / "releases")
    assert expected and release_files(tmp_path / "dask" / "releases") == expected

    # The sharded stages ran as shard tasks, spread over the two worker processes.
    summary = state.result()
    placement = summary.shard_placement
    assert set(placement) == {"search", "images", "image_embeddings"}
    workers = {w for counts in placement.values() for w in counts}
    assert len(workers) == 2 and all(w.startswith("tcp://127.0.0.1:") for w in workers)
    stats = {s.stage: s for s in summary.stages}
    assert sum(placement["images"].values()) == -(-stats["images"].rows_in // 8)  # one task per shard
    names = {t.name for t in task_runs(state.state_details.flow_run_id)}
    assert {f"images-shard-{i:05d}" for i in range(sum(placement["images"].values()))} <= names
    markdown = summary_markdown("3XCM", summary)
    assert "## Where the shards ran (Dask)" in markdown and all(w in markdown for w in workers)


@pytest.fixture
def gpu_and_cpu_worker() -> Iterator[SimpleNamespace]:
    """An existing cluster, as an operator would run one: a scheduler, one worker offering GPU=1, one without."""
    from distributed import Client, Nanny, Scheduler, SpecCluster

    workers = {
        "gpu": {"cls": Nanny, "options": {"nthreads": 1, "resources": {"GPU": 1}, "host": "127.0.0.1"}},
        "cpu": {"cls": Nanny, "options": {"nthreads": 1, "host": "127.0.0.1"}},
    }
    scheduler = {"cls": Scheduler, "options": {"host": "127.0.0.1", "dashboard_address": None}}
    with SpecCluster(scheduler=scheduler, workers=workers) as cluster, Client(cluster) as client:
        client.wait_for_workers(2, timeout=120)
        info = client.scheduler_info(n_workers=-1)["workers"]
        gpu = next(address for address, w in info.items() if w.get("resources", {}).get("GPU"))
        yield SimpleNamespace(address=cluster.scheduler_address, gpu=gpu, client=client)


@pytest.mark.prefect
def test_mixcube_gpu_shards_run_only_on_the_gpu_worker(
    prefect: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpu_and_cpu_worker: SimpleNamespace
) -> None:
    from flows.mixcube.build import build_mixcube

    overrides = {
        "originals": {"per_cell": 2, "cultures": ["South Korea", "UK"], "categories": ["Food", "Clothes"]},
        "release": {"version": "0.0.1"},
        "shard_size": 2,
    }
    default = BuildMixCubeConfig.demo(**overrides)
    runner = {"kind": "dask", "address": gpu_and_cpu_worker.address, "gpu_resources": {"GPU": 1}}
    on_dask = BuildMixCubeConfig.demo(**overrides, task_runner=runner)

    build_in(tmp_path / "default", monkeypatch, build_mixcube, default)
    state = build_in(tmp_path / "dask", monkeypatch, build_mixcube, on_dask)
    expected = release_files(tmp_path / "default" / "releases")
    assert expected and release_files(tmp_path / "dask" / "releases") == expected

    placement = state.result().shard_placement
    gpu_stages = {"masks", "synthesis_r1", "filters_r1"}
    assert gpu_stages <= set(placement)
    for stage in gpu_stages:
        assert set(placement[stage]) == {gpu_and_cpu_worker.gpu}, (stage, placement[stage])
    assert sum(placement["synthesis_r1"].values()) > 1  # several shards, all on the one GPU worker
    # The shard tasks carry the stage and gpu tags, so a Prefect tag limit or filter can single them out.
    shards = [t for t in task_runs(state.state_details.flow_run_id) if "-shard-" in t.name]
    synthesis = [t for t in shards if t.name.startswith("synthesis_r1-shard-")]
    assert synthesis and all({"gpu", "stage:synthesis_r1", "benchmark:mixcube"} <= set(t.tags) for t in synthesis)
    faces = [t for t in shards if t.name.startswith("faces-shard-")]
    assert faces and all("gpu" not in t.tags for t in faces)


def test_a_gpu_stage_without_gpu_workers_fails_with_what_to_start() -> None:
    """Dask would queue such shards forever; the build says which workers it lacks instead."""
    from distributed import Client, LocalCluster

    from flows.engine.scale_out import DaskShards, NoGpuWorkers
    from flows.mixcube.stages import GRAPH

    config = BuildMixCubeConfig.demo()
    settings = DaskTaskRunnerConfig(address="tcp://unused:8786", gpu_resources={"GPU": 1}, worker_wait_s=1)
    with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster, Client(cluster) as client:
        shards = DaskShards(SimpleNamespace(client=client), GRAPH.build(config), settings)
        with pytest.raises(NoGpuWorkers, match=r"`dask worker \S+ --resources GPU=1`"):
            list(shards("synthesis_r1", [0], lambda index: None))


def test_task_runner_config_is_checked_and_outside_the_build_id() -> None:
    with pytest.raises(ConfigError, match="n_workers configure a local cluster"):
        build_config(
            {"task_runner": {"kind": "dask", "address": "tcp://s:8786", "n_workers": 4}}, model=Build3XCMConfig
        )
    with pytest.raises(ConfigError, match="task_runner"):
        build_config({"task_runner": {"kind": "ray"}}, model=Build3XCMConfig)
    default = Build3XCMConfig.demo()
    remote = Build3XCMConfig.demo(task_runner={"kind": "dask", "address": "tcp://s:8786"})
    assert remote.resolved_build_id() == default.resolved_build_id()
    local = DaskTaskRunnerConfig(n_workers=3, gpu_resources={"GPU": 1}).cluster_kwargs()
    assert local["n_workers"] == 3 and local["resources"] == {"GPU": 1} and local["processes"] is True
