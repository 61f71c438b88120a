"""Hostile inputs, fourth round (issue 56, item 6): an image taken down stays out of every command that reads an
older version of its release (`export`, `fetch-release`, `reassemble`, `evaluate`). Old versions stay immutable; each
command reads its root's denylist and refuses in one line naming how many images, the denylist and the newest
version, which leaves them out; the newest version itself goes through."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import flows.cli.output
from data.takedown.denylist import DenylistEntry, write_denylist
from flows.cli import app
from tests.collectors.test_release_images_hostile import CORPUS, image_rows, write_release
from tests.support.fake_image_host import FakeImageHost
from tests.support.paths import REPO_ROOT

DEMO = REPO_ROOT / "releases" / "3xcm" / "0.1.0-demo"


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flows.cli.output.console, "width", 1000)


def cli(*args: object) -> tuple[int, str]:
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result.exit_code, result.output


def one_refusal(code: int, output: str, *needles: str) -> str:
    assert code != 0, output
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if "taken down" in line]
    assert len(lines) == 1, output
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def taken_down(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """A copy of the demo release in a release root, one of its images taken down: (old version, patch, image id)."""
    if not DEMO.is_dir():
        pytest.skip("needs the demo release (make demo)")
    root = tmp_path_factory.mktemp("root")
    old = root / "3xcm" / DEMO.name
    shutil.copytree(DEMO, old)
    image = pq.read_table(old / "image_metadata", columns=["image_id"])["image_id"][0].as_py()
    code, output = cli("takedown", old, "--reason", "a test", "--image-id", image)
    assert code == 0, output
    return old, root / "3xcm" / "0.1.1-demo", image


@pytest.mark.parametrize("harness", ["mteb", "clip-benchmark"])
def test_an_export_of_an_older_version_is_refused_naming_the_newest(
    taken_down: tuple[Path, Path, str], tmp_path: Path, harness: str
) -> None:
    old, patch, image = taken_down
    code, output = cli("export", old, "--harness", harness, "--out", tmp_path / "old")
    one_refusal(code, output, "1 of its images", repr(image), "denylist.json", str(patch))
    assert not (tmp_path / "old").exists()  # nothing written
    code, output = cli("export", patch, "--harness", harness, "--out", tmp_path / "new")
    assert code == 0, output


def test_evaluate_and_reassemble_of_an_older_version_are_refused(
    taken_down: tuple[Path, Path, str], tmp_path: Path
) -> None:
    old, patch, image = taken_down
    code, output = cli("evaluate", "3xcm", old, "--demo-model", "--results-root", tmp_path / "results")
    one_refusal(code, output, repr(image), str(patch))
    assert not (tmp_path / "results").exists()
    code, output = cli("reassemble", "--pool", old, "--out", tmp_path / "re")
    one_refusal(code, output, repr(image), str(patch))
    code, output = cli("reassemble", "--pool", patch, "--out", tmp_path / "re2")
    assert code == 0, output
    before = json.loads((old / "manifest.json").read_text())
    assert before["version"] == old.name  # the old version stays as it was published


def test_fetch_release_requests_no_image_the_root_took_down(tmp_path: Path) -> None:
    with FakeImageHost(corpus=CORPUS) as host:
        rows = image_rows(host, 3)
        release = write_release(tmp_path / "root" / "3xcm" / "0.1.0", rows)
        entry = DenylistEntry(
            image_id="img-1", url=rows[1]["url"], reason="a test", date="2026-12-01", version="0.1.1",
            removed_from="0.1.0",
        )  # fmt: skip
        write_denylist(str(tmp_path / "root"), "3xcm", [entry])
        code, output = cli("fetch-release", release, "--out", tmp_path / "out")
        one_refusal(code, output, "1 of its images", "'img-1'", "denylist.json")
        assert sum(host.counts.values()) == 0  # not one request: not the other images either
        assert not (tmp_path / "out").exists()
