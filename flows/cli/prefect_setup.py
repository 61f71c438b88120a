"""`culturebench prefect-setup`: the work pool and concurrency limits the deployments need
(flows/operations/prefect_setup.py)."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from flows.cli.errors import BadInput
from flows.cli.output import console


def prefect_setup_command(
    work_pool: Annotated[str, typer.Option(help="The process work pool the deployments run on.")] = "",
) -> None:
    """Create the work pool and the global concurrency limits (duckduckgo, gemini, gpu) on the server at
    PREFECT_API_URL, if missing. Run it once before `prefect deploy --all`."""
    from flows.operations.prefect_setup import WORK_POOL, ensure_prefect_setup

    if not os.environ.get("PREFECT_API_URL"):
        raise BadInput("PREFECT_API_URL is not set: point it at the server to set up")
    report = ensure_prefect_setup(work_pool or WORK_POOL)
    for line in report.created:
        console.print(f"created {line}")
    for line in report.kept:
        console.print(f"already there: {line}")
