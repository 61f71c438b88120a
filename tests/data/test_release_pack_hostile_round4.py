"""Hostile inputs, fourth round (issue 56, items 4 and 7): a forged release, a copy of a demo release with a file of
its `reference/` (or its manifest's `reference`, or its card) edited and the manifest's `files` recomputed
(`rehash_manifest`). Every command that reads a release's pack (`validate`, `evaluate`, `export`, `takedown`,
`reassemble`, `audit`) refuses it in one line naming the file and the field, before any work; every export checks
the pack (its files against the manifest, then against what the manifest and card state) before it writes, whether
its harness reads the pack or not; the lmms-eval README escapes the row values it shows."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import flows.cli.output
from data.publish.reader import Release
from evaluation.harnesses.exports import lmms_eval
from flows.cli import app
from tests.support.paths import REPO_ROOT
from tests.support.release_tamper import rehash_manifest

DEMO = {name: REPO_ROOT / "releases" / name / "0.1.0-demo" for name in ("3xcm", "mixcube")}
DIGEST = "its digest"
CHANGED = "the pack was changed after the build"


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's messages are one line; a terminal of 80 columns would wrap them."""
    monkeypatch.setattr(flows.cli.output.console, "width", 1000)


def cli(*args: object) -> tuple[int, str]:
    result = CliRunner().invoke(app, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.output


def copy(tmp_path: Path, benchmark: str) -> Path:
    """The demo release copied to <root>/<benchmark>/0.1.0-demo (a release root, as takedown wants it)."""
    folder = tmp_path / "releases" / benchmark / "0.1.0-demo"
    shutil.copytree(DEMO[benchmark], folder)
    return folder


def one_line(output: str, *needles: str) -> str:
    """The one line of `output` holding every needle."""
    lines = [line for line in output.splitlines() if all(n in line for n in needles)]
    assert len(lines) == 1, output
    return lines[0]


def edit_csv(path: Path, change: Callable[[list[str]], list[str]]) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    path.write_text("\n".join([lines[0], *(",".join(change(line.split(","))) for line in lines[1:])]) + "\n")


def forged_regions(tmp_path: Path) -> Path:
    """Japan moved to Latin America and the USA to Atlantis in the release's own countries.csv."""
    release = copy(tmp_path, "3xcm")
    moved = {"Japan": "Latin America", "USA": "Atlantis"}
    edit_csv(release / "reference" / "countries.csv", lambda row: [*row[:-1], moved.get(row[0], row[-1])])
    rehash_manifest(release)
    return release


def forged_aliases(tmp_path: Path) -> Path:
    """ "Korean" added to every MixCuBe culture's `label_aliases`: any answer naming Korea would be right."""
    release = copy(tmp_path, "mixcube")
    path = release / "reference" / "mixcube.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    for culture in data["cultures"]:
        culture["label_aliases"] = [*culture["label_aliases"], "Korean"]
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    rehash_manifest(release)
    return release


def edit_manifest(release: Path, change: Callable[[dict[str, Any]], None]) -> None:
    path = release / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    change(manifest)
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True), encoding="utf-8")


# -- 4: validate ------------------------------------------------------------------------------------------------------


def test_validate_refuses_a_pack_changed_after_the_build(tmp_path: Path) -> None:
    release = forged_regions(tmp_path)
    code, output = cli("validate", release)
    assert code == 1, output
    line = one_line(output, DIGEST)
    assert f"{release / 'reference'}: {DIGEST}" in line and "is not manifest.reference.sha256" in line, line
    assert CHANGED in line
    # what the manifest still claims of it: the shipped default pack, and its old regions
    assert "field 'reference.default' is True, not False" in one_line(output, "reference.default")
    assert "'Atlantis'" in one_line(output, "field 'reference.regions'")
    # and the card: Japan's row still says East Asia
    assert "region 'East Asia', not 'Latin America'" in one_line(output, "README.md", "'JP'")


def test_validate_refuses_a_manifest_whose_reference_claims_another_pack(tmp_path: Path) -> None:
    """The pack untouched, the manifest's record of it edited (the manifest lists no digest of itself)."""
    release = copy(tmp_path, "3xcm")
    edit_manifest(release, lambda m: m["reference"]["regions"].append("Atlantis"))
    code, output = cli("validate", release)
    assert code == 1, output
    line = one_line(output, "field 'reference.regions'")
    assert "names ['Atlantis']" in line and str(release / "manifest.json") in line, line


def test_validate_refuses_a_pack_the_manifest_does_not_record(tmp_path: Path) -> None:
    release = copy(tmp_path, "mixcube")
    edit_manifest(release, lambda m: m.pop("reference"))
    code, output = cli("validate", release)
    assert code == 1, output
    assert str(release / "reference") in one_line(output, "no field 'reference'")


def test_validate_refuses_a_card_that_misstates_the_pack(tmp_path: Path) -> None:
    release = copy(tmp_path, "mixcube")
    card = release / "README.md"
    text = card.read_text(encoding="utf-8")
    row = "| United Kingdom | GB | British | Europe |"
    assert row in text
    card.write_text(text.replace(row, "| United Kingdom | GB | British | Atlantis |"), encoding="utf-8")
    rehash_manifest(release)
    code, output = cli("validate", release)
    assert code == 1, output
    line = one_line(output, "section 'Reference pack'")
    assert str(card) in line and "'GB'" in line and "region 'Atlantis', not 'Europe'" in line, line


def test_validate_still_passes_the_demo_releases(tmp_path: Path) -> None:
    for benchmark in DEMO:
        code, output = cli("validate", copy(tmp_path / benchmark, benchmark))
        assert code == 0, output


# -- 4: every command that reads the pack -----------------------------------------------------------------------------


def test_evaluate_refuses_forged_regions_before_any_model_runs(tmp_path: Path) -> None:
    release = forged_regions(tmp_path)
    out = tmp_path / "result"
    code, output = cli("evaluate", "3xcm", release, "--task", "all", "--demo-model", "--out", out)
    assert code == 2, output
    line = one_line(output, DIGEST)
    assert line.startswith(f"cannot evaluate: {release / 'reference'}: {DIGEST}") and CHANGED in line, line
    assert "embed" not in output  # refused before the encoder ran
    assert not out.exists()


@pytest.mark.parametrize("harness", ["lmms-eval", "vlmevalkit"])
def test_export_refuses_forged_aliases(tmp_path: Path, harness: str) -> None:
    release = forged_aliases(tmp_path)
    out = tmp_path / "export"
    code, output = cli("export", release, "--harness", harness, "--out", out)
    assert code == 2, output
    line = one_line(output, DIGEST)
    assert f"{release / 'reference'}: {DIGEST}" in line and CHANGED in line, line
    assert len(output.strip().splitlines()) == 1, output
    assert not out.exists()


@pytest.mark.parametrize("harness", ["mteb", "clip-benchmark"])
def test_3xcm_exports_refuse_forged_regions(tmp_path: Path, harness: str) -> None:
    release = forged_regions(tmp_path)
    out = tmp_path / "export"
    code, output = cli("export", release, "--harness", harness, "--out", out)
    assert code == 2, output
    assert len(output.strip().splitlines()) == 1, output
    assert f"{release / 'reference'}: {DIGEST}" in one_line(output, DIGEST)
    assert not out.exists()


def test_takedown_refuses_a_forged_parent(tmp_path: Path) -> None:
    release = forged_regions(tmp_path)
    image = pq.read_table(release / "image_metadata", columns=["image_id"]).column("image_id")[0].as_py()
    code, output = cli(
        "takedown", release, "--image-id", image, "--reason", "the rights holder asked", "--date", "2026-05-01"
    )
    assert code != 0, output
    assert f"{release / 'reference'}: {DIGEST}" in one_line(output, DIGEST)
    assert sorted(p.name for p in release.parent.iterdir()) == ["0.1.0-demo"]  # no patch written


def test_audit_and_reassemble_refuse_a_forged_release(tmp_path: Path) -> None:
    release = forged_regions(tmp_path)
    code, output = cli("audit", release)
    assert code == 2, output
    assert f"{release / 'reference'}: {DIGEST}" in one_line(output, DIGEST)
    out = tmp_path / "reassembled"
    code, output = cli("reassemble", "--pool", release, "--out", out)
    assert code == 2, output
    assert f"{release / 'reference'}: {DIGEST}" in one_line(output, DIGEST)
    assert not out.exists()


# -- 7: exports validate first, and escape what they print ------------------------------------------------------------


def test_an_export_that_reads_no_pack_checks_it_against_the_manifest(tmp_path: Path) -> None:
    """mteb reads no pack, yet a release whose reference/ is not what its manifest lists (no recomputing here) is
    not the release the manifest describes: refused in one line naming the file, nothing written."""
    release = copy(tmp_path, "3xcm")
    edit_csv(
        release / "reference" / "countries.csv", lambda row: [*row[:-1], "Atlantis" if row[0] == "Japan" else row[-1]]
    )
    out = tmp_path / "export"
    code, output = cli("export", release, "--harness", "mteb", "--out", out)
    assert code == 2, output
    assert len(output.strip().splitlines()) == 1, output
    assert "reference/countries.csv" in output and str(release) in output, output
    assert not out.exists()


def test_lmms_eval_readme_escapes_the_values_it_shows(tmp_path: Path) -> None:
    release = Release.open(copy(tmp_path, "mixcube"))
    text = lmms_eval.readme(release, Counter({"original": 2, "<img src=x onerror=alert(1)>": 1, "a_b_": 1}), 4)
    assert "<img" not in text and "&lt;img src=x onerror=alert\\(1\\)&gt; 1" in text
    assert "a\\_b\\_ 1" in text
