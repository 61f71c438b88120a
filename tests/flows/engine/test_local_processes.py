"""Local worker processes for large CPU-bound sharded stages: the same release as the shards run in order, every
shard run exactly once, and a failing or dying worker fails its shards without losing the others."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

import curation.image_dedup as image_dedup_module
import curation.pair_batches as pair_batches_module
import flows.xcm.build as xcm_build_module
from data.process_pool import run_apart, run_in_processes
from flows.engine.local_processes import LocalProcesses, local_shards
from flows.engine.shards import InOrder, ShardPlan
from flows.engine.task_runner import DaskTaskRunnerConfig, DefaultTaskRunnerConfig
from flows.xcm.build import XCM
from flows.xcm.config import Build3XCMConfig
from tests.conftest import SMALL_CONCEPTS, SMALL_COUNTRIES
from tests.support.recording_build import RecordingBuild


def never_here(index: int) -> None:
    raise AssertionError(f"shard {index} ran in the stage's own process")


def shards_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "shards"
    folder.mkdir()
    return folder


def test_each_pending_shard_runs_once_in_the_worker_processes(tmp_path: Path) -> None:
    tmp_path = shards_folder(tmp_path)
    done = list(LocalProcesses(RecordingBuild(tmp_path), 2)("s", [0, 2, 3, 5, 7], never_here))  # type: ignore[arg-type]
    assert sorted(done) == [0, 2, 3, 5, 7]
    writers = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert set(writers) == {"s-0", "s-2", "s-3", "s-5", "s-7"}
    assert str(os.getpid()) not in writers.values()
    assert len(set(writers.values())) == 2  # each worker took a shard as soon as it started


def test_a_failing_shard_is_raised_after_the_others_finish(tmp_path: Path) -> None:
    tmp_path = shards_folder(tmp_path)
    mapper = LocalProcesses(RecordingBuild(tmp_path, bad=3), 2)  # type: ignore[arg-type]
    done: list[int] = []
    with pytest.raises(ValueError, match="s shard 3 is unreadable") as raised:
        done.extend(mapper("s", list(range(8)), never_here))
    assert sorted(done) == [0, 1, 2, 4, 5, 6, 7]  # their parts are kept for the retry
    assert "1 of 8 shards of s failed (first: shard 3)" in raised.value.__notes__


def test_a_worker_that_dies_fails_its_shard_and_the_shards_it_would_have_taken(tmp_path: Path) -> None:
    tmp_path = shards_folder(tmp_path)
    mapper = LocalProcesses(RecordingBuild(tmp_path, dies=2), 2)  # type: ignore[arg-type]
    done: list[int] = []
    with pytest.raises(RuntimeError, match="exited with 3 during shard 2"):
        done.extend(mapper("s", list(range(12)), never_here))
    written = sorted(int(p.name.split("-")[1]) for p in tmp_path.iterdir())
    assert written == sorted(done) and 2 not in done  # nothing is reported done that was not written


def test_workers_that_cannot_start_fail_every_shard_instead_of_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_processes(*args: object, **kwargs: object) -> None:
        raise OSError("fork: Resource temporarily unavailable")

    monkeypatch.setattr(subprocess, "Popen", no_processes)
    mapper = LocalProcesses(RecordingBuild(shards_folder(tmp_path)), 2)  # type: ignore[arg-type]
    with pytest.raises(
        RuntimeError, match=r"shard 0 of s not run: a worker failed \(OSError: fork: Resource"
    ) as raised:
        list(mapper("s", list(range(5)), never_here))
    assert "5 of 5 shards of s failed (first: shard 0)" in raised.value.__notes__


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
    assert isinstance(local_shards(build, plan), expected)  # type: ignore[arg-type]


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
    assert isinstance(local_shards(build, plan), LocalProcesses)
    assert isinstance(local_shards(XCM.build(in_order), plan), InOrder)

    XCM.build_locally(in_order)
    XCM.build_locally(workers)
    first, second = (release_files(tmp_path / run / "releases") for run in ("in-order", "workers"))
    assert first and first == second
    assert sent and min(sent) > 1  # the dedup's batches went to the workers
    assert validations == [1]  # and the release's validation to a process of its own; in order, it stayed here
