"""The manifest models (`data/publish/manifest.py`): each rule refused in one line naming the field, the same rules
when a folder is read (`read_manifest`) and when one is written (`ImmutableFolder.commit`), and round trips: every
manifest a build writes validates and reads back field for field, unchanged."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from data.publish.folder import ImmutableFolder
from data.publish.format import MANIFEST, ReleaseReadError
from data.publish.integrity import read_manifest
from data.publish.json_file import read_json_object
from data.publish.manifest import (
    FileEntry,
    ManifestError,
    Provenance,
    ReassembledManifest,
    ReleaseManifest,
    ResultManifest,
    first_problem,
    validated,
)
from data.publish.release import ReleaseConfig, ReleaseWriter
from data.reference import default_pack
from tests.support.paths import REPO_ROOT

SHA = "ab" * 32
BASE: dict[str, Any] = {"name": "3xcm", "version": "0.0.1", "files": {"a.parquet": {"sha256": SHA, "bytes": 3}}}
RECORD: dict[str, Any] = {
    "version": "0.0.2",
    "parent": "0.0.1",
    "date": "2026-05-01",
    "reason": "asked",
    "rows": {"summary": "one row"},
    "removed": [{"image_id": "x", "sha256": SHA, "url": "http://x/a.jpg", "why": "requested"}],
}
PATCH: dict[str, Any] = {**BASE, "parent": {"version": "0.0.1", "manifest_sha256": SHA}, "takedowns": [RECORD]}


def problem(document: dict[str, Any], model: type[ReleaseManifest | ResultManifest] = ReleaseManifest) -> str:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(document)
    return first_problem(caught.value)


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"name": "a/b"}, "field 'name' must be a plain name like 3xcm, not 'a/b'"),
        ({"name": "3xcm\n"}, "field 'name' must be a plain name"),
        ({"name": 3}, "field 'name' must be a plain name"),
        ({"version": "../x"}, "field 'version' must be a semantic version (X.Y.Z), not '../x'"),
        ({"version": "1.0.0\n"}, "field 'version' must be a semantic version"),
        ({"files": []}, "field 'files' must map each file to its sha256 and size"),
        ({"files": {"../a": {"sha256": SHA, "bytes": 1}}}, "files['../a']: not a relative path inside the release"),
        ({"files": {"/etc/x": {"sha256": SHA, "bytes": 1}}}, "files['/etc/x']: not a relative path inside"),
        ({"files": {MANIFEST: {"sha256": SHA, "bytes": 1}}}, "not a relative path inside"),
        ({"files": {"a": {"sha256": "0" * 63, "bytes": 1}}}, "files['a']: no sha256 of 64 hex digits"),
        ({"files": {"a": {"sha256": "A" * 64, "bytes": 1}}}, "files['a']: no sha256 of 64 hex digits"),
        ({"files": {"a": {"bytes": 1}}}, "files['a']: no sha256 of 64 hex digits"),
        ({"files": {"a": "x"}}, "files['a']: no sha256 of 64 hex digits"),
        ({"files": {"a": {"sha256": SHA, "bytes": True}}}, "files['a']: 'bytes' must be a size in bytes"),
        ({"files": {"a": {"sha256": SHA, "bytes": -1}}}, "files['a']: 'bytes' must be a size in bytes"),
        ({"files": {"a": {"sha256": SHA, "bytes": 1.0}}}, "files['a']: 'bytes' must be a size in bytes"),
        ({"files": {"a": {"sha256": SHA}}}, "files['a']: 'bytes' must be a size in bytes"),
        ({"mode": "zip"}, "field 'mode'"),
        ({"takedowns": "x", "parent": PATCH["parent"]}, "field 'takedowns': "),
        ({"takedowns": [{"version": 1}], "parent": PATCH["parent"]}, "field 'takedowns[0]': not a takedown record"),
        ({"takedowns": [RECORD]}, "field 'parent': a patch (it lists takedowns) names its parent"),
        ({"parent": {"version": "0.0.1"}, "takedowns": [RECORD]}, "field 'parent.manifest_sha256': "),
        ({"parent": {"version": "../x", "manifest_sha256": SHA}}, "field 'parent.version' must be a semantic"),
        ({"config": []}, "field 'config': "),
        ({"config": {"release": [1]}}, "'config.release' must be an object"),
        ({"seeds": {"assembly": "x"}}, "field 'seeds.assembly': "),
        ({"seeds": {"assembly": True}}, "field 'seeds.assembly': "),
        ({"code_version": {"package": "culturebench"}}, "field 'code_version.version': "),
        ({"deviations": "not a list"}, "field 'deviations': "),
        ({"demo": "yes"}, "field 'demo': "),
        ({"validation": {"summary": 3}}, "field 'validation.summary': "),
    ],
)
def test_each_rule_is_refused_in_one_line_naming_the_field(change: dict[str, Any], needle: str) -> None:
    message = problem({**BASE, **change})
    assert needle in message and "\n" not in message, message


def test_a_takedown_record_is_refused_whole_naming_what_is_wrong_inside() -> None:
    record = {**RECORD, "removed": [{"image_id": "x", "sha256": SHA, "url": None}]}  # no `why`
    message = problem({**PATCH, "takedowns": [RECORD, record]})
    assert message.startswith("field 'takedowns[1]': not a takedown record (removed[0].why: "), message


def test_a_result_manifest_needs_its_release_and_model() -> None:
    result = {**BASE, "name": "evaluation-3xcm", "model": {"model_id": "m"}, "release_manifest_sha256": SHA}
    result["code_version"] = {"package": "culturebench", "version": "0.1.0", "git_commit": None, "git_dirty": None}
    assert ResultManifest.model_validate(result).release_manifest_sha256 == SHA
    assert "field 'release_manifest_sha256'" in problem({**result, "release_manifest_sha256": "x"}, ResultManifest)
    assert "field 'model'" in problem({k: v for k, v in result.items() if k != "model"}, ResultManifest)


def test_a_valid_patch_reads_typed() -> None:
    model = ReleaseManifest.model_validate(PATCH)
    assert model.parent is not None and model.parent.manifest_sha256 == SHA
    assert model.takedowns is not None and model.takedowns[0].removed[0].image_id == "x"
    assert model.files["a.parquet"] == FileEntry(sha256=SHA, bytes=3)
    assert model.mode == "images" and model.is_patch


def _round_trip(document: dict[str, Any], model: ReleaseManifest | ResultManifest | ReassembledManifest) -> None:
    back = model.model_dump(mode="json", exclude_unset=True)
    assert back == document
    # What a writer would write from the model: the same bytes (the writers keep `sort_keys=True`).
    assert json.dumps(back, indent=2, sort_keys=True, ensure_ascii=False) == json.dumps(
        document, indent=2, sort_keys=True, ensure_ascii=False
    )


ROOT = REPO_ROOT


def _demo_manifests() -> list[Path]:
    """The manifests `make demo` (run before the tests, as CI does) writes: both demo releases and their results."""
    return sorted(p for top in ("releases", "evaluations") for p in (ROOT / top).glob(f"**/{MANIFEST}"))


@pytest.mark.skipif(not _demo_manifests(), reason="no demo outputs: run `make demo` first")
@pytest.mark.parametrize("path", _demo_manifests(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_demo_manifest_validates_and_reads_back_unchanged(path: Path) -> None:
    document = json.loads(path.read_text(encoding="utf-8"))
    if document["name"].startswith("evaluation-"):
        read = read_manifest(path.parent, ResultManifest)
        _round_trip(document, read.model)
        assert read.model.release_manifest_sha256 == document["release_manifest_sha256"]
    else:
        read = read_manifest(path.parent)
        _round_trip(document, read.model)
        assert read.model.config == document["config"] and read.model.seeds == document["seeds"]


@pytest.fixture
def releases(small_releases: dict[str, Path]) -> dict[str, Path]:
    return small_releases  # conftest's, built once per session


# The typed fields a build writes, by benchmark: each must read back equal to the JSON the build wrote.
COMMON = ("build_id", "config", "backends", "deviations", "reference_data_sha256", "seeds")
COMMON += ("stage_fingerprints", "stage_stats")
TYPED = {
    "3xcm": (*COMMON, "review", "reuse"),
    "mixcube": (*COMMON, "demo", "models", "incomplete", "left_over_by_outcome", "cells_below_target"),
}


@pytest.mark.parametrize("name", ["3xcm", "mixcube"])
def test_a_built_release_reads_back_every_field(releases: dict[str, Path], name: str) -> None:
    folder = releases[name]
    document = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    read = read_manifest(folder)
    model = read.model
    _round_trip(document, model)
    assert (read.name, read.version, model.mode) == (document["name"], document["version"], document["mode"])
    for field in TYPED[name]:
        assert field in document, field
        assert getattr(model, field) == document[field], field
    assert model.model_extra == {k: v for k, v in document.items() if k not in ReleaseManifest.model_fields}
    assert model.code_version is not None
    assert model.code_version.model_dump(mode="json", exclude_unset=True) == document["code_version"]
    assert {rel: (e.sha256, e.bytes) for rel, e in model.files.items()} == {
        rel: (e["sha256"], e["bytes"]) for rel, e in document["files"].items()
    }
    if name == "3xcm":
        assert model.validation is not None and model.validation.summary == document["validation"]["summary"]


def test_a_takedown_patch_reads_back_its_parent_and_records(releases: dict[str, Path], tmp_path: Path) -> None:
    import pyarrow.parquet as pq
    from typer.testing import CliRunner

    from flows.cli import app

    root = tmp_path / "releases"
    shutil.copytree(releases["3xcm"].parent.parent, root)
    parent = root / "3xcm" / "0.0.1"
    image_id = pq.read_table(next((parent / "benchmark").glob("*.parquet")))[
        "semantically_relevant_candidate_image_id"
    ][0].as_py()
    args = ["takedown", str(parent), "--image-id", image_id, "--reason", "asked", "--date", "2026-05-01"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    patch = root / "3xcm" / "0.0.2"
    document = json.loads((patch / MANIFEST).read_text(encoding="utf-8"))
    model = read_manifest(patch).model
    _round_trip(document, model)
    assert model.is_patch and model.parent is not None and model.takedowns is not None
    assert model.parent.version == "0.0.1" and model.parent.manifest_sha256 == read_manifest(parent).sha256
    assert [r.image_id for r in model.takedowns[-1].removed] == [image_id]


@pytest.mark.slow
def test_a_reassembled_benchmark_reads_back_unchanged(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from flows.cli import app

    out = tmp_path / "reassembled"
    pool = ROOT / "data" / "authors" / "xcm-bench.csv"
    result = CliRunner().invoke(app, ["reassemble", "--pool", str(pool), "--out", str(out)])
    assert result.exit_code == 0, result.output
    document = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    model = ReassembledManifest.model_validate(document)
    _round_trip(document, model)
    assert set(model.files) == {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()} - {MANIFEST}


def test_a_writer_refuses_a_malformed_manifest_and_publishes_nothing(tmp_path: Path) -> None:
    writer = ReleaseWriter(ReleaseConfig(root=str(tmp_path / "rel"), version="0.0.1"), "3xcm")
    writer.write_bytes("a.txt", b"a")
    with pytest.raises(ManifestError, match=r"field 'seeds\.assembly'") as caught:
        writer.commit({"name": "3xcm", "version": "0.0.1", "seeds": {"assembly": "seven"}})
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "rel" / "3xcm" / "0.0.1").exists()


def test_a_writer_refuses_a_name_that_is_no_plain_name(tmp_path: Path) -> None:
    folder = ImmutableFolder.at(str(tmp_path / "out"), "x", "0.0.1", ResultManifest)
    folder.write_bytes("a.txt", b"a")
    with pytest.raises(ManifestError, match="field 'name' must be a plain name"):
        folder.commit({"name": "Evaluation/3xcm", "version": "0.0.1"})
    folder.abort()
    assert not (tmp_path / "out").exists()


def test_a_release_writer_refuses_bad_provenance_before_writing(tmp_path: Path) -> None:
    from flows.mixcube.release import write_mixcube_release

    config = ReleaseConfig(root=str(tmp_path / "rel"), version="0.0.1")
    with pytest.raises(ManifestError, match="field 'deviations'"):
        write_mixcube_release(
            config, None, None, {"deviations": "none"}, default_pack()
        )  # refused before blobs or rows are read
    assert not (tmp_path / "rel").exists()


def test_validated_keeps_extra_keys() -> None:
    model = validated(Provenance, {"future_field": [1, {"a": None}], "build_id": "b"})
    assert model.model_extra == {"future_field": [1, {"a": None}]} and model.build_id == "b"


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"{x", "not valid JSON"),
        (b"[1]", "a JSON list, not an object"),
        (b"\xff{}", "not UTF-8 text"),
        (b"{" + b" " * 2000 + b"}", "larger than 0 MB; not ours"),
    ],
)
def test_the_json_object_reader_names_the_file(tmp_path: Path, content: bytes, needle: str) -> None:
    path = tmp_path / "x.json"
    path.write_bytes(content)
    with pytest.raises(ReleaseReadError) as caught:
        read_json_object(path, 1000, error=ReleaseReadError, too_big="not ours")
    assert str(caught.value).startswith(f"{path}: ") and needle in str(caught.value)


def test_the_json_object_reader_gives_the_bytes_it_read(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_bytes(b'{"a": 1}')
    assert read_json_object(path, 1000) == ({"a": 1}, b'{"a": 1}')


def test_read_manifest_names_file_and_field(tmp_path: Path) -> None:
    (tmp_path / MANIFEST).write_text(json.dumps({**BASE, "takedowns": "x", "parent": PATCH["parent"]}))
    with pytest.raises(ReleaseReadError) as caught:
        read_manifest(tmp_path)
    assert str(caught.value).startswith(f"{tmp_path / MANIFEST}: field 'takedowns': "), caught.value
