"""Scale-out: a Prefect build's sharded stages as one Prefect task per shard on a Dask cluster (`prefect-dask`).

`shard_map(build)` opens the runner that `config.task_runner` names for the length of a build; the build's runner
(`flows/engine/runner.py`) opens it, and decides with it where the shards run. With the default runner it does
nothing and yields None: the shards run in the stage's own task, or in local worker processes
(`flows/engine/placement.py`). With Dask, a stage's pending shards are submitted to the cluster as `shard_task` runs
(named `<stage>-shard-<n>`, tagged with the stage and `gpu` where it needs one), a GPU stage's shards ask for the
configured Dask resources so only GPU workers take them, and the stage task waits for them and finishes the table.
Each worker builds a stage's plan and models once and writes its shards' parts straight into the workspace, so the
table is the one the default runner writes.
"""

from __future__ import annotations

import importlib
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import fsspec
from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.futures import as_completed
from pydantic import BaseModel

from data.stage import require
from flows.engine.graph import Build
from flows.engine.retries import RETRY_JITTER, STAGE_RETRIES, retry_delays, transient_failure
from flows.engine.task_runner import DaskTaskRunnerConfig


class ShardDone(BaseModel):
    stage: str
    index: int
    rows: int
    worker: str


class NoGpuWorkers(RuntimeError):
    """No worker of the cluster offers the resources a GPU stage's shards ask for."""


@task(
    cache_policy=NO_CACHE, retries=STAGE_RETRIES, retry_jitter_factor=RETRY_JITTER, retry_condition_fn=transient_failure
)
def shard_task(build: Build[Any], name: str, index: int) -> ShardDone:
    rows = build.write_shard(name, index)
    return ShardDone(stage=name, index=index, rows=rows, worker=_worker_address())


def _import_module(name: str) -> None:
    importlib.import_module(name)


def _worker_address() -> str:
    import distributed

    try:
        return distributed.get_worker().address
    except ValueError:  # not on a Dask worker
        return "flow process"


class DaskShards:
    """A `MapShards` that runs a stage's pending shards as Prefect tasks on the runner's Dask cluster, and counts
    where they ran (`placement`: stage -> worker -> shards)."""

    def __init__(self, runner: Any, build: Build[Any], settings: DaskTaskRunnerConfig) -> None:
        self.runner = runner
        self.build = build  # as the workers see it (flows/engine/scale_out.py `for_workers`)
        self.settings = settings
        self.placement: dict[str, Counter[str]] = {}
        self._connected: Future[None] | None = None

    def connect_in_background(self) -> None:
        """Start (or reach) the cluster and have its workers import the stages while the early, unsharded stages
        run: a local cluster's processes take seconds to start, and a worker's first shard would pay the imports.
        An error is raised to the first stage that needs the cluster."""
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dask-connect")
        module = self.build.graph.stages_for.__module__
        self._connected = pool.submit(lambda: self.runner.client.run(_import_module, module))
        pool.shutdown(wait=False)

    def settle(self) -> None:
        if self._connected is not None:
            wait([self._connected])

    def client(self) -> Any:
        if self._connected is not None:
            connected, self._connected = self._connected, None
            connected.result()
        return self.runner.client

    def __call__(self, stage: str, pending: list[int], run_here: Callable[[int], object]) -> Iterator[int]:
        if not pending:
            return
        gpu = self.build.stage(stage).gpu
        resources = dict(self.settings.gpu_resources) if gpu and self.settings.gpu_resources else None
        if resources:
            self._wait_for_workers_offering(resources)
        tags = ["culturebench", f"benchmark:{self.build.graph.name}", f"stage:{stage}", *(["gpu"] if gpu else [])]
        futures = {}
        for index in pending:
            shard = shard_task.with_options(
                task_run_name=f"{stage}-shard-{index:05d}", tags=tags, retry_delay_seconds=retry_delays()
            )
            submitted = self.client().submit(
                shard,
                key=f"{stage}-shard-{index:05d}-{uuid.uuid4().hex[:8]}",  # readable in the Dask dashboard
                parameters={"build": self.build, "name": stage, "index": index},
                return_type="state",
                resources=resources,
            )
            futures[self._wrap(submitted)] = index
        failures: list[tuple[int, BaseException]] = []
        for future in as_completed(list(futures)):
            try:
                done: ShardDone = future.result()
            except Exception as exc:  # wait for the other shards: their parts are kept for the retry
                failures.append((futures[future], exc))
                continue
            self.placement.setdefault(stage, Counter())[done.worker] += 1
            yield done.index
        if failures:
            index, first = min(failures, key=lambda failure: failure[0])
            first.add_note(f"{len(failures)} of {len(pending)} shards of {stage} failed (first: shard {index})")
            raise first

    def _wrap(self, submitted: Any) -> Any:
        from prefect_dask.task_runners import PrefectDaskFuture

        return PrefectDaskFuture(wrapped_future=submitted, task_run_id=submitted.task_run_id)

    def _wait_for_workers_offering(self, resources: dict[str, float]) -> None:
        """Dask would queue the shards forever if no worker offers the resources: fail with what to do instead."""
        deadline = time.monotonic() + self.settings.worker_wait_s
        while True:
            workers = self.client().scheduler_info(n_workers=-1).get("workers", {})
            if any(all(w.get("resources", {}).get(k, 0) >= v for k, v in resources.items()) for w in workers.values()):
                return
            if time.monotonic() >= deadline:
                address = self.client().scheduler.address
                wanted = " ".join(f"{k}={v:g}" for k, v in resources.items())
                raise NoGpuWorkers(
                    f"no worker of the Dask cluster at {address} offers {wanted} after {self.settings.worker_wait_s:g}"
                    f" s; start GPU workers with `dask worker {address} --resources {wanted}`, or empty "
                    "task_runner.gpu_resources to run GPU stages anywhere"
                )
            time.sleep(0.5)


def for_workers(build: Build[Any]) -> Build[Any]:
    """The build the workers get: a local workspace by its absolute path, since a worker's working directory is
    not the flow's. (A remote cluster needs a workspace it can see: a shared disk or an object store.)"""
    config = build.config
    fs, path = fsspec.core.url_to_fs(config.workspace_root)
    if "file" not in fs.protocol:
        return build
    return Build(build.graph, config.model_copy(update={"workspace_root": str(Path(path).resolve())}))


@contextmanager
def shard_map(build: Build[Any]) -> Iterator[DaskShards | None]:
    """The build's shard mapper for the length of the block: None for the default runner, else a Dask cluster,
    reached in the background when the build has work left, and shut down at the end if the build started it."""
    settings = build.config.task_runner
    if not isinstance(settings, DaskTaskRunnerConfig):
        yield None
        return
    prefect_dask = require("prefect_dask", "dask")
    if settings.address:
        runner = prefect_dask.DaskTaskRunner(address=settings.address)
    else:
        runner = prefect_dask.DaskTaskRunner(cluster_kwargs=settings.cluster_kwargs())
    get_run_logger().info("sharded stages run on a %s", settings.describe())
    with runner:
        mapper = DaskShards(runner, for_workers(build), settings)
        if not all(build.is_current(name) for name in build.names):
            mapper.connect_in_background()
        try:
            yield mapper
        finally:
            mapper.settle()  # a cluster still starting must not come up after the runner shut down
