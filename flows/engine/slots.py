"""The GPU slot: a Prefect global concurrency limit held around the work that runs a model on this machine, so the
builds and evaluations that share a GPU take turns, shard by shard. The engine owns it: the benchmarks' stages hold
it, and a domain function that needs the GPU takes it from its caller (`evaluation.run.GpuSlot`)."""

from __future__ import annotations

from contextlib import AbstractContextManager

from data.clients.concurrency import prefect_slot


def gpu_slot(limit_name: str | None) -> AbstractContextManager[None]:
    """Hold one slot of the GPU limit `limit_name` inside a Prefect run; nothing without a name or outside a run."""
    return prefect_slot(limit_name)
