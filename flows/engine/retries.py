"""Which task failures Prefect retries, and after how long: shared by the stage tasks and the shard tasks."""

from __future__ import annotations

from typing import Any

from prefect.tasks import exponential_backoff

from data.transient_errors import is_transient

# A stage (or shard) is retried only for errors that a later attempt can outlive (`data/transient_errors.py`: a
# dropped connection, a timeout, and what the backends register, such as a review server that stayed down through
# the per-request retries). Bad input and bugs fail at once. Finished shards are kept, so a retry resumes where the
# failure struck.
STAGE_RETRIES = 2
STAGE_RETRY_DELAYS_S: list[float] = exponential_backoff(backoff_factor=30)(STAGE_RETRIES)  # 30 s, then 60 s
RETRY_JITTER = 0.5


def transient_failure(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect's retry condition: retry only when the task failed with a transient error."""
    try:
        state.result()
    except BaseException as exc:
        return is_transient(exc)
    return False


def retry_delays() -> list[float]:
    """Read when a task is configured, so a test can shorten the delays."""
    return STAGE_RETRY_DELAYS_S
