"""`make demo`'s MixCuBe evaluation run again into its own folder: `unchanged`, not refused as "other settings" (the
settings checked before the model runs lacked the demo model's answer cap, which the result records)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from flows.cli import app
from tests.support.paths import REPO_ROOT

RELEASE = REPO_ROOT / "releases" / "mixcube" / "0.1.0-demo"
RESULT = REPO_ROOT / "evaluations" / "mixcube" / "0.1.0-demo" / "transformers--demo-random-vlm"


def test_the_demo_evaluation_again_is_unchanged(tmp_path: Path) -> None:
    folder = tmp_path / "result"
    shutil.copytree(RESULT, folder)
    before = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    result = CliRunner().invoke(app, ["evaluate", "mixcube", str(RELEASE), "--demo-model", "--out", str(folder)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output.strip().splitlines()[-1])["status"] == "unchanged"
    assert {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before
