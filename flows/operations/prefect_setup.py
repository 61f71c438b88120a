"""What a Prefect server needs before `prefect deploy --all`: the process work pool and the global concurrency limits
that the tasks hold (DuckDuckGo, Gemini, the GPU). Idempotent: existing objects are kept as they are, so an operator's
changes in the UI survive a rerun."""

from __future__ import annotations

from pydantic import BaseModel, Field

WORK_POOL = "culturebench-process"


class ConcurrencyLimit(BaseModel):
    name: str
    limit: int = Field(ge=1)
    why: str


# The names are the defaults of the configs that hold them (DdgsSearchConfig, GeminiConfig, BuildMixCubeConfig).
LIMITS = (
    ConcurrencyLimit(name="duckduckgo", limit=2, why="DuckDuckGo image searches in flight, all workers together"),
    ConcurrencyLimit(name="gemini", limit=8, why="Gemini requests in flight, all workers together"),
    ConcurrencyLimit(name="gpu", limit=1, why="model calls on the one GPU (SDXL, SAM, CLIP) at a time"),
)


class SetupReport(BaseModel):
    work_pool: str
    created: list[str]
    kept: list[str]


def ensure_prefect_setup(work_pool: str = WORK_POOL, limits: tuple[ConcurrencyLimit, ...] = LIMITS) -> SetupReport:
    """Create the work pool and the limits on the server at PREFECT_API_URL when they are missing."""
    from prefect import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate, WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    created, kept = [], []
    with get_client(sync_client=True) as client:
        try:
            client.read_work_pool(work_pool)
            kept.append(f"work pool {work_pool}")
        except ObjectNotFound:
            try:
                client.create_work_pool(WorkPoolCreate(name=work_pool, type="process"))
                created.append(f"work pool {work_pool}")
            except ObjectAlreadyExists:  # created by another set-up in between
                kept.append(f"work pool {work_pool}")
        for limit in limits:
            try:
                client.read_global_concurrency_limit_by_name(limit.name)
                kept.append(f"limit {limit.name}")
            except ObjectNotFound:
                client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=limit.name, limit=limit.limit))
                created.append(f"limit {limit.name} = {limit.limit} ({limit.why})")
    return SetupReport(work_pool=work_pool, created=created, kept=kept)
