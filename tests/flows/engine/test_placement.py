"""Where a build's shards run, decided by the runner once per build (`flows/engine/runner.py` `placement`): local
worker processes for large CPU-bound plans (`flows/engine/placement.py`), kept up from stage to stage, giving the
same release as the shards run in order; every shard run exactly once; a failing shard, a dying worker or workers
that cannot start fail their own shards without losing the others. A `Build` run without a placement runs its
shards in order: it does not decide where they run."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import psutil
import pyarrow as pa
import pytest
from joblib.externals.loky.backend import fork_exec  # type: ignore[import-untyped]

import curation.image_dedup as image_dedup_module
import curation.pair_batches as pair_batches_module
import data.process_pool as process_pool
import flows.engine.placement as placement_module
import flows.xcm.build as xcm_build_module
from data.process_pool import WorkerDied, run_apart, run_in_processes
from data.stage import stats_from_table
from flows.engine.config import BuildConfigBase
from flows.engine.graph import BuildGraph, Stage
from flows.engine.placement import LocalPlacement, LocalProcesses
from flows.engine.runner import BuildPlacement, placement
from flows.engine.shards import InOrder, ShardPlan
from flows.engine.task_runner import DaskTaskRunnerConfig, DefaultTaskRunnerConfig
from flows.xcm.build import XCM
from flows.xcm.config import Build3XCMConfig
from tests.conftest import SMALL_CONCEPTS, SMALL_COUNTRIES
from tests.support.recording_build import RecordingBuild

TWO_WORKERS = DefaultTaskRunnerConfig(processes=2, processes_from_items=1)


def never_here(index: int) -> None:
    raise AssertionError(f"shard {index} ran in the stage's own process")


def shards_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "shards"
    folder.mkdir()
    return folder


def recording(folder: Path, **kwargs: Any) -> RecordingBuild:
    """A `RecordingBuild` with the config a placement reads (it travels with the build, by value)."""
    build = RecordingBuild(folder, **kwargs)
    build.config = SimpleNamespace(task_runner=TWO_WORKERS)  # type: ignore[attr-defined]
    return build


def writers(folder: Path, stage: str) -> dict[int, int]:
    """Shard -> the process that wrote it."""
    return {int(p.name.split("-")[1]): int(p.read_text()) for p in folder.iterdir() if p.name.startswith(f"{stage}-")}


def test_each_pending_shard_runs_once_in_the_worker_processes(tmp_path: Path) -> None:
    tmp_path = shards_folder(tmp_path)
    done = list(LocalProcesses(recording(tmp_path), 2)("s", [0, 2, 3, 5, 7], never_here))
    assert sorted(done) == [0, 2, 3, 5, 7]
    written = writers(tmp_path, "s")
    assert sorted(written) == [0, 2, 3, 5, 7]
    assert os.getpid() not in written.values() and 1 <= len(set(written.values())) <= 2


def test_a_failing_shard_is_raised_after_the_others_finish(tmp_path: Path) -> None:
    tmp_path = shards_folder(tmp_path)
    mapper = LocalProcesses(recording(tmp_path, bad=3), 2)
    done: list[int] = []
    with pytest.raises(ValueError, match="s shard 3 is unreadable") as raised:
        done.extend(mapper("s", list(range(8)), never_here))
    assert sorted(done) == [0, 1, 2, 4, 5, 6, 7]  # their parts are kept for the retry
    assert "1 of 8 shards of s failed (first: shard 3)" in raised.value.__notes__


def test_a_worker_that_dies_fails_only_its_own_shard(tmp_path: Path) -> None:
    tmp_path = shards_folder(tmp_path)
    mapper = LocalProcesses(recording(tmp_path, dies=2), 2)
    done: list[int] = []
    with pytest.raises(WorkerDied, match=r"worker died \(exit code 3\) during shard 2 of s") as raised:
        done.extend(mapper("s", list(range(12)), never_here))
    assert sorted(done) == [i for i in range(12) if i != 2]  # the shard beside it in flight ran again, alone
    assert sorted(writers(tmp_path, "s")) == sorted(done)  # nothing is reported done that was not written
    assert "1 of 12 shards of s failed (first: shard 2)" in raised.value.__notes__


def test_workers_that_cannot_start_fail_every_shard_instead_of_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_processes(*args: object, **kwargs: object) -> None:
        raise OSError("fork: Resource temporarily unavailable")

    monkeypatch.setattr(fork_exec, "fork_exec", no_processes)
    monkeypatch.setattr(process_pool, "_pool", None)  # a new pool, which must start its workers
    mapper = LocalProcesses(recording(shards_folder(tmp_path)), 2)
    with pytest.raises(
        RuntimeError, match=r"shard 0 of s not run: no worker process \(OSError: fork: Resource"
    ) as raised:
        list(mapper("s", list(range(5)), never_here))
    assert "5 of 5 shards of s failed (first: shard 0)" in raised.value.__notes__


def test_the_workers_stay_warm_from_stage_to_stage_of_a_build_and_stop_with_it(tmp_path: Path) -> None:
    folder = shards_folder(tmp_path)
    build = recording(folder)
    with placement(build, cluster=False) as where:  # type: ignore[arg-type]  # as the runner opens it for a build
        started: set[int] = set()
        for stage in ("first", "second"):
            mapper = where(stage, plan_of(40))
            assert isinstance(mapper, LocalProcesses)
            assert sorted(mapper(stage, [0, 1, 2, 3], never_here)) == [0, 1, 2, 3]
            if not started:  # the processes the first stage started (the workers, loky's resource tracker)
                started = {child.pid for child in psutil.Process().children()}
    first, second = (set(writers(folder, stage).values()) for stage in ("first", "second"))
    assert first <= started and second <= started  # the second stage's shards ran in the first stage's workers
    deadline = time.monotonic() + 10
    while any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in first):
        assert time.monotonic() < deadline, "the build's workers outlived it"
        time.sleep(0.1)


def plan_of(items: int, cpu_bound: bool = True) -> ShardPlan[int]:
    return ShardPlan(
        list(range(items)), shard_size=10, process=lambda c: pa.table({}), summarize=None, cpu_bound=cpu_bound
    )  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("runner", "plan", "expected"),
    [
        (DefaultTaskRunnerConfig(processes=2, processes_from_items=100), plan_of(100), LocalProcesses),
        (DefaultTaskRunnerConfig(processes=2, processes_from_items=101), plan_of(100), InOrder),
        (DefaultTaskRunnerConfig(processes=2, processes_from_items=1), plan_of(100, cpu_bound=False), InOrder),
        (DefaultTaskRunnerConfig(processes=1, processes_from_items=1), plan_of(100), InOrder),
        (DefaultTaskRunnerConfig(processes=2, processes_from_items=1), plan_of(10), InOrder),  # one shard
        # A Dask config's build run stage by stage in one process (`--engine local`) keeps its shards there.
        (DaskTaskRunnerConfig(n_workers=2), plan_of(100), InOrder),
    ],
)
def test_where_a_plans_shards_run(runner: object, plan: ShardPlan[int], expected: type) -> None:
    build = SimpleNamespace(config=SimpleNamespace(task_runner=runner))
    assert isinstance(LocalPlacement(build)("s", plan), expected)  # type: ignore[arg-type]


class ToyConfig(BuildConfigBase):
    build_prefix: ClassVar[str] = "toy"


def toy_build(root: Path) -> Any:
    schema = pa.schema([("item", pa.int64()), ("status", pa.string()), ("error", pa.string())])

    def process(chunk: Sequence[int]) -> pa.Table:
        return pa.table({"item": list(chunk), "status": ["ok"] * len(chunk), "error": [None] * len(chunk)})

    def items(ctx: Any) -> ShardPlan[int]:
        return ShardPlan(list(range(40)), 10, process, lambda t: stats_from_table("items", t), cpu_bound=True)

    graph = BuildGraph("toy", lambda config: (Stage("items", 1, (), lambda c: None, items, schema),))
    return graph.build(ToyConfig(workspace_root=str(root), task_runner=TWO_WORKERS))


def test_the_runner_decides_where_the_shards_run_not_the_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[list[int]] = []

    def here(function: Callable[[int], Any], items: list[int], workers: int, describe: Any) -> Iterator[Any]:
        sent.append(list(items))
        for position, item in enumerate(items):
            yield position, function(item)

    monkeypatch.setattr(placement_module, "run_in_processes", here)
    alone = toy_build(tmp_path / "alone")
    alone.run("items")  # no placement: one after another, here, whatever its task runner allows
    assert sent == []
    build = toy_build(tmp_path / "placed")
    with placement(build, cluster=False) as where:
        assert isinstance(where, BuildPlacement) and where.workers("items") == {}
        build.run("items", placement=where)
    assert sent == [[0, 1, 2, 3]]  # its four shards, to the local workers
    assert build.ws.read_table("items") == alone.ws.read_table("items")


def small_config(root: Path, **runner: object) -> Build3XCMConfig:
    return Build3XCMConfig.demo(
        countries=SMALL_COUNTRIES,
        concepts={"include": SMALL_CONCEPTS},
        demo_corpus={"countries": SMALL_COUNTRIES, "concepts": SMALL_CONCEPTS, "images_per_query": 2},
        download={"backend": "local", "shard_size": 8},
        image_dedup={"shard_size": 8},
        release={"version": "0.0.1", "root": str(root / "releases")},
        workspace_root=str(root / "workspace"),
        task_runner={"kind": "default", **runner},
    )


def release_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_a_build_whose_shards_ran_in_worker_processes_releases_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Batches of a few candidate rows: the dedup's pair batches go to the worker processes too.
    monkeypatch.setattr(pair_batches_module, "BATCH_ROWS", 4)
    sent: list[int] = []

    def recorded(function: Any, items: Any, workers: int, describe: Any) -> Any:
        sent.append(len(items))
        yield from run_in_processes(function, items, workers, describe)

    monkeypatch.setattr(image_dedup_module, "run_in_processes", recorded)
    validations: list[int] = []

    def recorded_validation(function: Any, describe: str) -> Any:
        validations.append(1)
        return run_apart(function, describe)

    monkeypatch.setattr(xcm_build_module, "run_apart", recorded_validation)
    in_order = small_config(tmp_path / "in-order", processes=1)
    workers = small_config(tmp_path / "workers", processes=2, processes_from_items=1)
    assert workers.resolved_build_id() == in_order.resolved_build_id()  # how it runs is not what it builds
    build = XCM.build(workers)
    XCM.prepare_reference(build)
    for name in build.names[: build.names.index("images")]:
        build.run(name)
    plan = build.stage(name="images").run(build.context("images"))
    assert isinstance(LocalPlacement(build)("images", plan), LocalProcesses)
    assert isinstance(LocalPlacement(XCM.build(in_order))("images", plan), InOrder)

    XCM.build_locally(in_order)
    XCM.build_locally(workers)
    first, second = (release_files(tmp_path / run / "releases") for run in ("in-order", "workers"))
    assert first and first == second
    assert sent and min(sent) > 1  # the dedup's batches went to the workers
    # The release ran no validation of its own: the validation stage vouched for its tables (issue 60). Where it
    # does validate, it does so in a process of its own (tests/curation/test_validate.py, worker-process).
    assert validations == []
