"""Which task failures Prefect retries, and after how long: shared by the stage tasks and the shard tasks."""

from __future__ import annotations

from typing import Any

from prefect.tasks import exponential_backoff

from annotation.label_studio import LabelStudioUnavailable

# A stage (or shard) is retried only for errors that a later attempt can outlive: a service that stayed down
# through the per-request retries, a dropped connection or a timeout. Bad input and bugs fail at once. Finished
# shards are kept, so a retry resumes where the failure struck.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError, LabelStudioUnavailable)
STAGE_RETRIES = 2
STAGE_RETRY_DELAYS_S: list[float] = exponential_backoff(backoff_factor=30)(STAGE_RETRIES)  # 30 s, then 60 s
RETRY_JITTER = 0.5


def transient_failure(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect's retry condition: retry only when the task failed with a transient error."""
    try:
        state.result()
    except TRANSIENT_ERRORS:
        return True
    except BaseException:
        return False
    return False


def retry_delays() -> list[float]:
    """Read when a task is configured, so a test can shorten the delays."""
    return STAGE_RETRY_DELAYS_S
