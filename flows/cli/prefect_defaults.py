"""Prefect's settings that must be in the environment before anything imports Prefect (it reads them once, at
import): the CLI sets them before any command runs, and the test suite sets the same ones from here at its start,
so that a flow a test runs in its own process meets the settings a user's command does.

Imports nothing heavy: `culturebench --help` reads this module too."""

from __future__ import annotations

import os
from collections.abc import MutableMapping

#: How long Prefect waits for the temporary local API server it starts when PREFECT_API_URL is unset (its own
#: default is 20 s): a fresh database migrates on the first start, which takes over 20 s on 2 busy cores.
EPHEMERAL_STARTUP_TIMEOUT_S = 120


def prefect_defaults() -> dict[str, str]:
    """The variables and the values they get unless the environment already sets them."""
    return {
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": str(EPHEMERAL_STARTUP_TIMEOUT_S),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }


def apply_prefect_defaults(environ: MutableMapping[str, str] = os.environ) -> None:
    """Set each of `prefect_defaults()` that `environ` does not set already (a user's value wins)."""
    for name, value in prefect_defaults().items():
        environ.setdefault(name, value)
