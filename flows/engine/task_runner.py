"""Where a Prefect build runs its stages' shards: in the stage's own process (default) or on a Dask cluster.

This is part of every build config, but not of its build id: the same config on another runner continues the same
build and releases the same bytes.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

LOCAL_CLUSTER_FIELDS = ("n_workers", "threads_per_worker", "processes", "memory_limit")


class DefaultTaskRunnerConfig(BaseModel):
    """Each stage is one Prefect task. Its shards run one after another in the flow's process, or, for a large stage
    of CPU work only (a folder imported, images hashed), in local worker processes (`flows/engine/placement.py`).
    """

    model_config = ConfigDict(extra="forbid")
    kind: Literal["default"] = "default"
    processes: int | None = Field(
        default=None,
        ge=1,
        description="Local worker processes for the shards of a large CPU-bound stage. Unset: one per core; 1: "
        "every shard in the stage's own process.",
    )
    processes_from_items: int = Field(
        default=5_000,
        ge=1,
        description="A CPU-bound stage with fewer items runs its shards in its own process: starting a worker (its "
        "imports, the stage's inputs) costs seconds.",
    )


class DaskTaskRunnerConfig(BaseModel):
    """The sharded stages (download, hashing, embedding, face detection, masks, inpainting, filters) map their
    shards as Prefect tasks onto a Dask cluster through `prefect-dask`: a local cluster started for the build, or an
    existing one by address. The workspace must be storage every worker sees (a shared disk, or s3://, gs://)."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["dask"] = "dask"
    address: str | None = Field(
        default=None,
        description="Scheduler of an existing cluster, e.g. tcp://scheduler:8786. Unset: a local cluster per build.",
    )
    n_workers: int = Field(default=2, ge=1, description="Local cluster: worker processes.")
    threads_per_worker: int = Field(
        default=1, ge=1, description="Local cluster: shards one worker runs at once (sharing its models)."
    )
    processes: bool = Field(default=True, description="Local cluster: workers are processes (False: threads).")
    memory_limit: str | None = Field(default=None, description="Local cluster: per worker, e.g. '8GiB'. Unset: auto.")
    gpu_resources: dict[str, float] = Field(
        default_factory=dict,
        description="Dask worker resources a GPU stage's shard holds, e.g. {'GPU': 1}: such shards run only on "
        "workers started with `--resources GPU=1` (a local cluster gives every worker these). Empty: anywhere.",
    )
    worker_wait_s: float = Field(
        default=60.0,
        gt=0,
        description="How long a GPU stage waits for a worker that offers `gpu_resources` before it fails.",
    )

    @model_validator(mode="after")
    def _address_or_local(self) -> DaskTaskRunnerConfig:
        local = [name for name in LOCAL_CLUSTER_FIELDS if name in self.model_fields_set]
        if self.address and local:
            raise ValueError(f"{', '.join(local)} configure a local cluster; with an address the cluster is yours")
        return self

    def cluster_kwargs(self) -> dict[str, Any]:
        """`distributed.LocalCluster` arguments. The dashboard takes a free port (its link is in the run's logs), so
        two builds may run side by side."""
        kwargs: dict[str, Any] = {
            "n_workers": self.n_workers,
            "threads_per_worker": self.threads_per_worker,
            "processes": self.processes,
            "dashboard_address": "127.0.0.1:0",
        }
        if self.memory_limit:
            kwargs["memory_limit"] = self.memory_limit
        if self.gpu_resources:
            kwargs["resources"] = dict(self.gpu_resources)
        return kwargs

    def describe(self) -> str:
        if self.address:
            return f"dask cluster at {self.address}"
        return f"local dask cluster ({self.n_workers} {'processes' if self.processes else 'threads'})"


TaskRunnerConfig = Annotated[DefaultTaskRunnerConfig | DaskTaskRunnerConfig, Field(discriminator="kind")]
