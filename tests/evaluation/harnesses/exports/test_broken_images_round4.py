"""Hostile inputs, fourth round (issue 56, item 11): a forged release (a copy of a demo release with one image row
made null or made bytes that are no image, the manifest recomputed) is refused by all four exports by one rule
(`evaluation.harnesses.exports.common.released_images`), in one line naming the part, the row and the image's id; and
`validate` on a null-image forgery blames that row alone, not every row after it in the tars."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import flows.cli.output
from flows.cli import app
from tests.support.paths import REPO_ROOT
from tests.support.release_tamper import rehash_manifest

DEMO = {name: REPO_ROOT / "releases" / name / "0.1.0-demo" for name in ("3xcm", "mixcube")}
IMAGES = {"3xcm": ("image_metadata", "image_id"), "mixcube": ("default", "sample_id")}
HARNESSES = {"mteb": "3xcm", "clip-benchmark": "3xcm", "lmms-eval": "mixcube", "vlmevalkit": "mixcube"}
ROW = 5


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flows.cli.output.console, "width", 1000)


def cli(*args: object) -> tuple[int, str]:
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result.exit_code, result.output


def forged(tmp_path: Path, name: str, image: dict[str, object] | None) -> tuple[Path, str, str]:
    """A copy of the demo release of `name` whose image row ROW holds `image`; (release, part, that row's id)."""
    if not DEMO[name].is_dir():
        pytest.skip("needs the demo releases (make demo)")
    release = tmp_path / "rel" / name / DEMO[name].name
    shutil.copytree(DEMO[name], release)
    config, key = IMAGES[name]
    part = sorted((release / config).glob("*.parquet"))[0]
    table = pq.read_table(part)
    at = table.schema.get_field_index("image")
    cells = table["image"].to_pylist()
    cells[ROW] = image
    table = table.set_column(at, table.schema.field(at), pa.array(cells, table.schema.field(at).type))
    pq.write_table(table, part)
    rehash_manifest(release)
    return release, part.relative_to(release).as_posix(), str(table[key][ROW].as_py())


@pytest.mark.parametrize("harness", sorted(HARNESSES))
@pytest.mark.parametrize("kind", ["null", "not an image"])
def test_every_export_refuses_a_broken_image_by_one_rule(tmp_path: Path, harness: str, kind: str) -> None:
    image = None if kind == "null" else {"bytes": b"<html>not an image</html>", "path": None}
    release, part, image_id = forged(tmp_path, HARNESSES[harness], image)
    code, output = cli("export", release, "--harness", harness, "--out", tmp_path / "out")
    assert code != 0 and "Traceback" not in output, output
    lines = [line for line in output.splitlines() if repr(image_id) in line]
    assert len(lines) == 1, output
    assert part in lines[0] and f"row {ROW}" in lines[0], lines[0]
    assert ("has no bytes" if kind == "null" else "no image") in lines[0], lines[0]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.parquet"))


def test_validate_blames_the_null_image_row_alone(tmp_path: Path) -> None:
    release, _, image_id = forged(tmp_path, "3xcm", None)
    code, output = cli("validate", release)
    assert code == 1, output
    webdataset = [line for line in output.splitlines() if "webdataset" in line]
    assert webdataset == [], output  # the rows after it meet their own samples
    mode = [line for line in output.splitlines() if "release.mode" in line]
    assert len(mode) == 1 and repr(image_id) in mode[0], output
