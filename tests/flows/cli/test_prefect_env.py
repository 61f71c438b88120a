"""The CLI gives Prefect's temporary server time to start before any command imports Prefect: Prefect reads its
settings once, at import, and the build command imports a benchmark's flow (and so Prefect) before it runs. Setting
the variable later was silently ignored, and a fresh server that took over Prefect's default 20 s to migrate its
database failed `make demo` with "Timed out while attempting to connect to ephemeral Prefect API server"."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent(
    """
    from typer.testing import CliRunner
    import flows.cli
    result = CliRunner().invoke(flows.cli.app, ["config"])
    assert result.exit_code == 0, result.output
    import flows.xcm.build  # what `culturebench build 3xcm` imports before it runs the flow
    from prefect.settings import PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS
    print(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value())
    """
)


@pytest.mark.slow
def test_prefect_sees_the_cli_startup_timeout(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"}
    env["PREFECT_HOME"] = str(tmp_path / "missing" / "prefect-home")
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "120"
    assert (tmp_path / "missing" / "prefect-home").is_dir()  # created: Prefect does not create missing parents
