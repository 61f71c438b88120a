"""`culturebench --help` and the argument errors stay quick because the CLI imports its heavy dependencies inside
the commands that use them. Timing is `perf/cli_startup.py`'s job; this checks the cause, which a stray
module-level import would break: what importing the CLI and rendering its help pulls in."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.paths import REPO_ROOT

HEAVY = ("pyarrow", "numpy", "pandas", "torch", "prefect", "datasets", "PIL", "open_clip", "transformers")

PROBE = """
import json, sys
from typer.testing import CliRunner
from flows.cli import app
result = CliRunner().invoke(app, sys.argv[1:])
print(json.dumps({"exit": result.exit_code, "loaded": sorted(m for m in %r if m in sys.modules)}))
"""


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["build", "--help"], ["evaluate", "--help"], ["build", "nosuch"], ["takedown", "--help"]],
    ids=" ".join,
)
def test_help_and_usage_errors_import_no_heavy_library(argv: list[str]) -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE % (HEAVY,), *argv], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    probe = json.loads(out.stdout.strip().splitlines()[-1])
    assert probe["loaded"] == [], f"culturebench {' '.join(argv)} imported {probe['loaded']}"
    assert probe["exit"] == (2 if argv[-1] == "nosuch" else 0)
