"""Slots of Prefect global concurrency limits, which span every worker and process of a deployment: the remote
clients hold one around each call (DuckDuckGo, Gemini), and the engine's GPU slot (`flows/engine/slots.py`) is one."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator


@contextlib.contextmanager
def prefect_slot(limit_name: str | None, timeout_s: float | None = None) -> Iterator[None]:
    """Hold one slot of a Prefect global concurrency limit while inside a Prefect run; a no-op elsewhere.

    The limit spans every worker and process of a deployment, which an in-process limiter cannot. A limit that
    does not exist on the server is ignored (Prefect's `strict=False`), so local builds need no set-up.
    """
    if not limit_name or not _in_prefect_run() or not _limit_exists(limit_name):
        yield
        return
    from prefect.concurrency.sync import concurrency

    with concurrency(limit_name, occupy=1, timeout_seconds=timeout_s, strict=False):
        yield


_LIMIT_TTL_S = 60.0
_limits_seen: dict[str, tuple[bool, float]] = {}


def _limit_exists(name: str) -> bool:
    """Whether the server has this global limit, asked once a minute: Prefect itself would warn on every call."""
    seen = _limits_seen.get(name)
    if seen is not None and time.monotonic() - seen[1] < _LIMIT_TTL_S:
        return seen[0]
    from prefect import get_client
    from prefect.exceptions import ObjectNotFound

    try:
        with get_client(sync_client=True) as client:
            client.read_global_concurrency_limit_by_name(name)
        exists = True
    except ObjectNotFound:
        exists = False
        logging.getLogger(__name__).info(
            "Prefect global concurrency limit %r does not exist; only this process's own limits apply", name
        )
    _limits_seen[name] = (exists, time.monotonic())
    return exists


def _in_prefect_run() -> bool:
    try:
        from prefect.context import FlowRunContext, TaskRunContext
    except ImportError:  # pragma: no cover - prefect is a core dependency
        return False
    return FlowRunContext.get() is not None or TaskRunContext.get() is not None
