"""Releases on hostile input, third round (issue 38): takedowns from an older parent or at once, a patch naming
itself as its parent, takedown records that removed nothing, forgeries whose manifest was recomputed (a card,
croissant.json or tars that lie about the tables, swapped image bytes, a false `mode`), and a `fetch-release` table
whose sha256 is no sha256. Each case ends in a release that is right, or in one line naming what is wrong."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import flows.cli.output
from data.takedown import denylist as denylist_module
from data.takedown.denylist import FILE as DENYLIST
from data.takedown.denylist import DenylistEntry, read_denylist, write_denylist
from flows.cli import app
from tests.support.paths import REPO_ROOT
from tests.support.readiness import load_factor
from tests.support.release_tamper import rehash_manifest

DATE = "2026-05-01"
CULTUREBENCH = Path(sys.executable).with_name("culturebench")
REPO = REPO_ROOT
IMAGES = {"3xcm": ("image_metadata", "image_id"), "mixcube": ("default", "sample_id")}


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's messages are one line; a terminal of 80 columns would wrap them."""
    monkeypatch.setattr(flows.cli.output.console, "width", 1000)


@pytest.fixture
def root(small_releases: dict[str, Path], tmp_path: Path) -> Path:
    """A copy of the small releases' root: <root>/3xcm/0.0.1 and <root>/mixcube/0.0.1 (conftest's, built once)."""
    copy = tmp_path / "releases"
    shutil.copytree(small_releases["3xcm"].parent.parent, copy)
    return copy


def invoke(*args: str) -> Any:
    result = CliRunner().invoke(app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert "Traceback" not in result.output, result.output
    return result


def take_down(release: Path, *names: str, reason: str = "the rights holder asked", **options: str) -> Any:
    extra = [arg for key, value in {"date": DATE, **options}.items() for arg in (f"--{key}", value)]
    return invoke("takedown", str(release), *names, "--reason", reason, *extra)


def error_line(output: str, needle: str) -> str:
    """The one line of `output` that holds `needle` (a CLI error is one line, never a traceback)."""
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if needle in line]
    assert len(lines) == 1, output
    return lines[0]


def rows_of(folder: Path, config: str) -> list[dict[str, Any]]:
    table = pa.concat_tables([pq.read_table(p) for p in sorted((folder / config).glob("*.parquet"))])
    return (table.drop_columns(["image"]) if "image" in table.column_names else table).to_pylist()


def versions(benchmark_root: Path) -> set[str]:
    return {p.name for p in benchmark_root.iterdir() if p.is_dir()}


def quintets(folder: Path) -> dict[str, list[str]]:
    """MixCuBe: each original id with its sample ids."""
    out: dict[str, list[str]] = {}
    for row in rows_of(folder, "default"):
        out.setdefault(row["original_id"], []).append(row["sample_id"])
    return out


def newest(benchmark_root: Path) -> Path:
    from data.takedown.patch import _precedence_key

    return benchmark_root / max((p.name for p in benchmark_root.iterdir() if p.is_dir()), key=_precedence_key)


def denylisted_ids(benchmark_root: Path) -> set[str]:
    return {e.image_id for e in read_denylist(str(benchmark_root.parent), benchmark_root.name).entries}


def removable(parent: Path, benchmark: str) -> list[str]:
    """Two images whose takedowns leave a valid patch: two swaps of other quintets (MixCuBe), two correct
    candidates of the first triplets (3XCM)."""
    if benchmark == "mixcube":
        return [samples[1] for samples in list(quintets(parent).values())[:2]]
    triplets = rows_of(parent, "benchmark")
    first = triplets[0]["semantically_relevant_candidate_image_id"]
    second = next(r["semantically_relevant_candidate_image_id"] for r in triplets[1:] if first not in r.values())
    return [first, second]


# -- item 1: a takedown from an older parent, or two at once -----------------------------------------------------


@pytest.mark.parametrize("benchmark", ["mixcube", "3xcm"])
def test_a_takedown_from_an_older_parent_takes_down_every_image_of_the_denylist(root: Path, benchmark: str) -> None:
    """The repro: 0.0.2 takes A down from 0.0.1; 0.0.5, also from 0.0.1, took B down and put A back. Now the patch
    applies the root's denylist, records that in its takedown, and `validate` derives it again from that record."""
    benchmark_root = root / benchmark
    parent = benchmark_root / "0.0.1"
    config, key = IMAGES[benchmark]
    first, second = removable(parent, benchmark)
    assert take_down(parent, "--image-id", first, reason="A").exit_code == 0
    after_first = denylisted_ids(benchmark_root)
    assert first in after_first

    result = take_down(parent, "--image-id", second, reason="B", version="0.0.5")
    assert result.exit_code == 0, result.output
    latest = benchmark_root / "0.0.5"
    held = {r[key] for r in rows_of(latest, config)}
    assert not held & denylisted_ids(benchmark_root)  # neither A (and what left with it) nor B
    record = json.loads((latest / "manifest.json").read_text())["takedowns"][-1]
    assert record["parent"] == "0.0.1" and set(record["requested"]["denylisted"]) <= after_first
    why = {r["image_id"]: r["why"] for r in record["removed"]}
    assert why[first] == "on the denylist" and why[second] == "requested"
    code = invoke("validate", str(latest))
    assert code.exit_code == 0, code.output

    # A version that would not be the newest is refused before anything is written: 0.0.5 would keep its image.
    before, entries = versions(benchmark_root), read_denylist(str(root), benchmark).entries
    third = next(r[key] for r in rows_of(parent, config) if r[key] in held and r[key] not in (first, second))
    late = take_down(parent, "--image-id", third, version="0.0.3")
    assert late.exit_code == 2, late.output
    line = error_line(late.output, "0.0.5")
    assert "0.0.3" in line and "newest" in line
    assert versions(benchmark_root) == before and read_denylist(str(root), benchmark).entries == entries


TAKEDOWN = """
import sys, time
from pathlib import Path
import data.takedown.denylist
import flows.operations.takedown
from flows.cli import app
data.takedown.denylist.LOCK_TIMEOUT_S = 600  # about the order, not the wait: a slow machine must not fail it
ready, go = Path(sys.argv[1]), Path(sys.argv[2])
ready.touch()
while not go.exists():
    time.sleep(0.005)
sys.argv = ["culturebench", *sys.argv[3:]]
app()
"""


@pytest.mark.slow
def test_takedowns_at_once_leave_no_denylisted_image_in_the_newest_version(root: Path, tmp_path: Path) -> None:
    """Two takedowns from one parent at the same moment (0.0.2 and 0.0.3): before, 0.0.3 held the quintet 0.0.2
    removed. Now they run one after the other under the denylist's lock; the later patch applies the earlier's
    entries, or, when 0.0.3 came first, 0.0.2 is refused as not the newest. Nothing taken down comes back."""
    benchmark_root = root / "mixcube"
    parent = benchmark_root / "0.0.1"
    names = removable(parent, "mixcube")
    go = tmp_path / "go"
    ready = [tmp_path / f"ready-{i}" for i in range(len(names))]
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect-home"), "COLUMNS": "1000"}
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", TAKEDOWN, str(flag), str(go), "takedown", str(parent), "--image-id", name,
             "--reason", "r", "--date", DATE, "--version", version],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )
        for name, version, flag in zip(names, ("0.0.2", "0.0.3"), ready, strict=True)
    ]  # fmt: skip
    deadline = time.monotonic() + 300
    while not all(flag.exists() for flag in ready) and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()  # both at once
    outputs = [p.communicate(timeout=600)[0].decode() for p in processes]
    codes = [p.returncode for p in processes]
    assert sorted(codes) in ([0, 0], [0, 2]), outputs
    for code, output in zip(codes, outputs, strict=True):
        if code == 2:  # 0.0.3 was first: 0.0.2 would not be the newest
            assert "would not be the newest" in output and "Traceback" not in output, output
    latest = newest(benchmark_root)
    assert latest.name == "0.0.3"
    held = {r["sample_id"] for r in rows_of(latest, "default")}
    entries = read_denylist(str(root), "mixcube").entries
    assert entries and not held & {e.image_id for e in entries}
    assert {e.version for e in entries} <= versions(benchmark_root)  # only patches that were written
    assert not (benchmark_root / f"{DENYLIST}.lock").exists()
    result = invoke("validate", str(latest))
    assert result.exit_code == 0, result.output


def test_a_takedown_that_cannot_take_the_denylists_lock_writes_nothing(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    benchmark_root = root / "mixcube"
    lock = benchmark_root / f"{DENYLIST}.lock"
    lock.write_text("pid 999999 on a crashed host\n")
    monkeypatch.setattr(denylist_module, "LOCK_TIMEOUT_S", 0.2)
    before = versions(benchmark_root)
    result = take_down(benchmark_root / "0.0.1", "--image-id", removable(benchmark_root / "0.0.1", "mixcube")[0])
    assert result.exit_code == 1, result.output
    line = error_line(result.output, "nothing was written")
    assert str(lock) in line and "no takedown is running" in line
    assert versions(benchmark_root) == before and lock.exists() and not (benchmark_root / DENYLIST).exists()


@pytest.mark.parametrize(("taken_in", "valid"), [("0.0.0", False), ("0.0.1", False), ("0.0.2", True)])
def test_validate_checks_a_release_against_its_roots_denylist(root: Path, taken_in: str, valid: bool) -> None:
    """An image of a release that its root's denylist lists from a takedown at or before the release's version is
    a violation; a release published before the takedown held it legitimately."""
    folder = root / "mixcube" / "0.0.1"
    row = rows_of(folder, "default")[3]
    entry = DenylistEntry(
        image_id=row["sample_id"], sha256=row["sha256"], reason="r", date=DATE, version=taken_in, removed_from="x"
    )
    write_denylist(str(root), "mixcube", [entry])
    result = invoke("validate", str(folder))
    if valid:
        assert result.exit_code == 0, result.output
    else:
        assert result.exit_code == 1, result.output
        line = error_line(result.output, "denylist")
        assert row["sample_id"] in line and str(root / "mixcube" / DENYLIST) in line and taken_in in line


# -- item 13: a patch naming itself as its parent; a record that removed nothing ------------------------------------


def _claim_patch(folder: Path, parent_version: str, parent_sha: str, record: dict[str, Any]) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["parent"] = {"version": parent_version, "manifest_sha256": parent_sha}
    manifest["takedowns"] = [record]
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2))


def _record(version: str, parent: str, **fields: Any) -> dict[str, Any]:
    return {"version": version, "parent": parent, "date": DATE, "reason": "x", "rows": {"summary": "x"}, **fields}


def test_a_patch_naming_itself_as_its_parent_is_one_line_at_once(root: Path) -> None:
    """`validate` checked the parent by checking the patch again, until RecursionError (64 s on the demo)."""
    from data.publish.integrity import read_manifest
    from flows.operations.validate import replay_patch

    folder = root / "3xcm" / "0.0.1"
    image = rows_of(folder, "image_metadata")[0]
    removed = [{"image_id": image["image_id"], "sha256": image["sha256"], "url": image["url"], "why": "requested"}]
    sha = hashlib.sha256((folder / "manifest.json").read_bytes()).hexdigest()
    _claim_patch(folder, "0.0.1", sha, _record("0.0.1", "0.0.1", removed=removed, requested={"image_ids": ["x"]}))
    started = time.perf_counter()
    violations = replay_patch(read_manifest(folder))
    assert time.perf_counter() - started < 2 * load_factor()  # 64 s before, on an idle machine
    assert [v.rule for v in violations] == ["patch.parent"]
    result = invoke("validate", str(folder))
    assert result.exit_code == 1, result.output
    line = error_line(result.output, "patch.parent")
    assert "'parent.version'" in line and str(folder / "manifest.json") in line and "earlier" in line


@pytest.mark.parametrize(
    ("removed", "requested", "field"),
    [
        ([], {"image_ids": ["ID"]}, "'takedowns[0].removed' is empty"),
        ([], None, "'takedowns[0].removed' is empty"),
        ("one", {}, "'takedowns[0].requested' names no image"),
    ],
)
def test_a_takedown_record_that_removed_nothing_gets_validates_own_message(
    root: Path, removed: Any, requested: Any, field: str
) -> None:
    """It got the takedown command's words ("name at least one image: --image-id, --sha256 or --url", exit 2)."""
    parent = root / "mixcube" / "0.0.1"
    patch = root / "mixcube" / "0.0.2"
    shutil.copytree(parent, patch)
    row = rows_of(parent, "default")[1]
    removed = [{"image_id": row["sample_id"], "sha256": row["sha256"], "url": None, "why": "requested"}] * (
        removed == "one"
    )
    record = _record("0.0.2", "0.0.1", removed=removed)
    if requested is not None:
        record["requested"] = {k: [row["sample_id"]] for k in requested}
    manifest = json.loads((patch / "manifest.json").read_text())
    manifest["version"] = "0.0.2"
    (patch / "manifest.json").write_text(json.dumps(manifest))
    sha = hashlib.sha256((parent / "manifest.json").read_bytes()).hexdigest()
    _claim_patch(patch, "0.0.1", sha, record)
    result = invoke("validate", str(patch))
    assert result.exit_code == 1, result.output
    line = error_line(result.output, field)
    assert "patch.manifest" in line and str(patch / "manifest.json") in line
    assert "--image-id" not in result.output


# -- item 15: forgeries whose manifest was recomputed --------------------------------------------------------------


def _edit_json(path: Path, edit: Any) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data, indent=2))


def _croissant_sha(folder: Path, benchmark: str) -> None:
    def edit(doc: dict[str, Any]) -> None:
        objects = [e for e in doc["distribution"] if e["@type"] == "cr:FileObject"]
        objects[0]["sha256"] = objects[1]["sha256"]  # another file's, well-formed

    _edit_json(folder / "croissant.json", edit)


def _card_configs(folder: Path, benchmark: str) -> None:
    card = folder / "README.md"
    text = card.read_text()
    assert "path: benchmark/train-*.parquet" in text
    card.write_text(text.replace("path: benchmark/train-*.parquet", "path: benchmark_cd/train-*.parquet", 1))


def _swapped_images(folder: Path, benchmark: str) -> None:
    """Two rows' image bytes and sha256 swapped inside the Parquet file: each image still hashes to its row's
    sha256, but the rows' num_bytes and the tars say otherwise."""
    config, _ = IMAGES[benchmark]
    path = next((folder / config).glob("*.parquet"))
    table = pq.read_table(path)
    rows = table.to_pylist()
    jpeg = [i for i, r in enumerate(rows) if r.get("format", "JPEG") == "JPEG"]  # their bytes are the source's
    a = jpeg[0]
    b = next(i for i in jpeg if len(rows[i]["image"]["bytes"]) != len(rows[a]["image"]["bytes"]))
    for column in ("image", "sha256"):
        rows[a][column], rows[b][column] = rows[b][column], rows[a][column]
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)


def _mode_urls(folder: Path, benchmark: str) -> None:
    def edit(manifest: dict[str, Any]) -> None:
        manifest["mode"] = "urls"
        manifest["config"].setdefault("release", {})["mode"] = "urls"  # a careful forger says it twice

    _edit_json(folder / "manifest.json", edit)


def _tar_sample(folder: Path, benchmark: str) -> None:
    """The second sample's image in the first tar replaced by the first's (same size as a tar, new sha256)."""
    path = next((folder / "images").glob("*.tar"))
    with tarfile.open(path) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]  # type: ignore[union-attr]
    images = [i for i, (m, _) in enumerate(members) if m.name.endswith(".jpg")]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for i, (member, data) in enumerate(members):
            if i == images[1]:
                data = members[images[0]][1]
                member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    path.write_bytes(buffer.getvalue())


FORGERIES = {
    "croissant sha256": (_croissant_sha, ["croissant"], "croissant.json"),
    "card configs": (_card_configs, ["card.configs"], "README.md"),
    "swapped image bytes": (_swapped_images, ["image.num_bytes", "webdataset"], "train-00000"),
    "mode urls": (_mode_urls, ["release.mode"], "manifest.json"),
    "tar sample": (_tar_sample, ["webdataset"], "images/00000.tar"),
}


@pytest.mark.slow
@pytest.mark.parametrize("benchmark", ["3xcm", "mixcube"])
@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_a_forgery_with_its_manifest_recomputed_is_invalid(
    root: Path, benchmark: str, forgery: str, small_releases: dict[str, Path]
) -> None:
    if forgery == "card configs" and benchmark == "mixcube":
        pytest.skip("MixCuBe has one table: no other table to point its config at")
    forge, rules, named = FORGERIES[forgery]
    folder = root / benchmark / "0.0.1"
    forge(folder, benchmark)
    rehash_manifest(folder)
    result = invoke("validate", str(folder))
    assert result.exit_code == 1, result.output
    for rule in rules:
        assert any(f"{rule}: " in line and named in line for line in result.output.splitlines()), result.output
    assert "integrity" not in result.output  # every file matches the manifest: the claims do not


def test_the_genuine_releases_claim_only_what_holds(small_releases: dict[str, Path]) -> None:
    from data.publish.format import IMAGE_CONFIGS
    from data.publish.integrity import read_manifest, verify_claims

    for name, folder in small_releases.items():
        assert verify_claims(read_manifest(folder), IMAGE_CONFIGS[name]) == []


def test_a_takedown_refuses_a_parent_whose_card_lies_and_writes_nothing(root: Path) -> None:
    parent = root / "3xcm" / "0.0.1"
    _card_configs(parent, "3xcm")
    rehash_manifest(parent)
    image = rows_of(parent, "image_metadata")[0]["image_id"]
    result = take_down(parent, "--image-id", image)
    assert result.exit_code == 2, result.output
    assert "README.md: configs[" in error_line(result.output, "do not hold")
    assert versions(root / "3xcm") == {"0.0.1"} and not (root / "3xcm" / DENYLIST).exists()


# -- item 16: fetch-release and a sha256 that is none ---------------------------------------------------------------


@pytest.mark.parametrize("value", [None, "not-a-sha256", "Z" * 64, "A" * 64, "0" * 63])
def test_fetch_release_refuses_a_sha256_that_is_none(tmp_path: Path, value: str | None) -> None:
    """A null or non-hex sha256 made every download `changed` (exit 0): the release's fault, not the source's."""
    part = "train-00000-of-00001.parquet"
    release = tmp_path / "rel"
    (release / "image_metadata").mkdir(parents=True)
    rows: list[dict[str, str | None]] = [
        {"image_id": f"img-{i}", "url": f"http://127.0.0.1:9/{i}.jpg", "sha256": f"{i:064x}", "format": "JPEG"}
        for i in range(3)
    ]
    rows[1]["sha256"] = value
    table = pa.Table.from_pylist(rows, schema=pa.schema([(k, pa.string()) for k in rows[0]]))
    pq.write_table(table, release / "image_metadata" / part)
    data = (release / "image_metadata" / part).read_bytes()
    files = {f"image_metadata/{part}": {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}}
    manifest = {"name": "3xcm", "version": "0.1.0", "mode": "urls", "files": files}
    (release / "manifest.json").write_text(json.dumps(manifest))
    out = tmp_path / "out"
    result = invoke("fetch-release", str(release), "--out", str(out), "--allow-private-addresses")
    assert result.exit_code == 2, result.output
    line = error_line(result.output, "'sha256'")
    assert part in line and "row 2" in line and "'img-1'" in line
    assert not out.exists()
