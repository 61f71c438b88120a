"""`culturebench validate` on tampered releases (issue 27, item 5): every file is checked against the manifest and
every image's bytes against its sha256, each mismatch is named, a manifest field switches no check off, and
MixCuBe releases are validated too."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import flows.cli
from flows.cli import app
from tests.support.release_tamper import rehash_manifest


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flows.cli.console, "width", 1000)


@pytest.fixture
def releases(small_releases: dict[str, Path]) -> dict[str, Path]:
    return small_releases  # conftest's, built once per session


def _copy(release: Path, tmp_path: Path) -> Path:
    target = tmp_path / release.parent.name / release.name
    shutil.copytree(release, target)
    return target


def _validate(folder: Path) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["validate", str(folder)])
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.output


def _manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def _write_manifest(folder: Path, manifest: dict) -> None:
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2))


def _replace_text(folder: Path, rel: str, old: str, new: str) -> None:
    path = folder / rel
    text = path.read_text()
    assert old in text, rel
    path.write_text(text.replace(old, new, 1))


def _flip_image_byte(folder: Path, config: str) -> None:
    """One byte of one image changed inside the Parquet file, which is otherwise written as before."""
    path = next((folder / config).glob("*.parquet"))
    table = pq.read_table(path)
    images = table["image"].to_pylist()
    data = bytearray(images[0]["bytes"])
    data[len(data) // 2] ^= 0xFF
    images[0] = {**images[0], "bytes": bytes(data)}
    column = pa.array(images, table.schema.field("image").type)
    pq.write_table(table.set_column(table.schema.get_field_index("image"), "image", column), path)


def _replace_tar_member(folder: Path) -> None:
    path = next((folder / "images").glob("*.tar"))
    with tarfile.open(path) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]  # type: ignore[union-attr]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for i, (member, data) in enumerate(members):
            if i == 0:
                data = data[::-1]
                member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    path.write_bytes(buffer.getvalue())


def _zero_a_sha(folder: Path) -> None:
    manifest = _manifest(folder)
    first = sorted(manifest["files"])[0]
    manifest["files"][first]["sha256"] = "0" * 64
    _write_manifest(folder, manifest)


TAMPERINGS: dict[str, tuple[Callable[[Path], None], str]] = {
    "croissant licence": (
        lambda f: _replace_text(f, "croissant.json", "licenses/by-nc-sa/4.0", "publicdomain/zero/1.0"),
        "croissant.json",
    ),
    "card licence": (lambda f: _replace_text(f, "README.md", "cc-by-nc-sa-4.0", "cc0-1.0"), "README.md"),
    "tar member replaced": (_replace_tar_member, "images/00000.tar"),
    "tar deleted": (lambda f: (f / "images" / "00000.tar").unlink(), "images/00000.tar is missing"),
    "a file added": (lambda f: (f / "images" / "extra.txt").write_text("x"), "images/extra.txt is not in the"),
    "manifest sha256 zeroed": (_zero_a_sha, "another sha256"),
}


@pytest.mark.parametrize("benchmark", ["3xcm", "mixcube"])
@pytest.mark.parametrize("tampering", sorted(TAMPERINGS))
def test_a_tampered_release_is_invalid_naming_the_file(
    releases: dict[str, Path], tmp_path: Path, benchmark: str, tampering: str
) -> None:
    folder = _copy(releases[benchmark], tmp_path)
    assert _validate(folder)[0] == 0
    tamper, named = TAMPERINGS[tampering]
    tamper(folder)
    code, output = _validate(folder)
    assert code == 1, output
    assert named in output and "integrity" in output


def test_an_edited_authors_csv_is_invalid(releases: dict[str, Path], tmp_path: Path) -> None:
    folder = _copy(releases["3xcm"], tmp_path)
    path = folder / "benchmarks" / "xcm-bench.csv"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join([lines[0], lines[2], lines[1], *lines[3:]]))  # two rows swapped, same size
    code, output = _validate(folder)
    assert code == 1 and "benchmarks/xcm-bench.csv has another sha256" in output, output


@pytest.mark.parametrize("benchmark,config", [("3xcm", "image_metadata"), ("mixcube", "default")])
def test_a_flipped_image_byte_inside_parquet_is_found(
    releases: dict[str, Path], tmp_path: Path, benchmark: str, config: str
) -> None:
    folder = _copy(releases[benchmark], tmp_path)
    _flip_image_byte(folder, config)
    code, output = _validate(folder)
    assert code == 1 and f"{config}/" in output, output
    # With the manifest rewritten to the new file hashes, the image itself still does not hash to its sha256.
    rehash_manifest(folder)
    code, output = _validate(folder)
    assert code == 1 and "does not hash to its sha256" in output, output


def test_a_manifest_field_switches_no_check_off(releases: dict[str, Path], tmp_path: Path) -> None:
    """`takedowns` in the manifest made a release a patch, which turned off the balance replay: a release whose
    rows were not chosen least-used then validated. Now the patch must be replayed from its parent."""
    folder = _copy(releases["3xcm"], tmp_path)
    manifest = _manifest(folder)
    # A well-formed claim (a malformed one is refused when the manifest is read): the parent must be replayed.
    manifest["parent"] = {"version": "0.0.9", "manifest_sha256": "0" * 64}
    manifest["takedowns"] = [
        {
            "version": manifest["version"],
            "parent": "0.0.9",
            "date": "2026-05-01",
            "reason": "x",
            "rows": {"summary": "x"},
            "removed": [],
        }
    ]
    _write_manifest(folder, manifest)
    code, output = _validate(folder)
    assert code == 1, output
    assert "patch" in output


@pytest.mark.parametrize(
    "content,named",
    [
        (b"{x", "not valid JSON"),
        (b"[1, 2]", "not an object"),
        (b"\xff\xfe{}", "not UTF-8"),
        (json.dumps({"name": "../x", "version": "0.0.1", "files": {}}).encode(), "field 'name'"),
        (json.dumps({"name": "3xcm", "version": "/etc", "files": {}}).encode(), "field 'version'"),
        (json.dumps({"name": "3xcm", "version": "0.0.1", "files": {"../x": {}}}).encode(), "files['../x']"),
        (json.dumps({"name": "other", "version": "0.0.1", "files": {}}).encode(), "validate knows"),
    ],
)
def test_an_unreadable_manifest_is_one_line_exit_2(tmp_path: Path, content: bytes, named: str) -> None:
    (tmp_path / "manifest.json").write_bytes(content)
    code, output = _validate(tmp_path)
    assert code == 2 and named in output and len(output.strip().splitlines()) == 1, output


def test_mixcube_rules_are_checked(releases: dict[str, Path], tmp_path: Path) -> None:
    folder = _copy(releases["mixcube"], tmp_path)
    code, output = _validate(folder)
    assert code == 0 and "mixcube" in output, output
    path = next((folder / "default").glob("*.parquet"))
    table = pq.read_table(path)
    order = list(range(table.num_rows))
    order[1], order[2] = order[2], order[1]  # two swaps of one quintet out of order
    pq.write_table(table.take(order), path)
    rehash_manifest(folder)  # the files agree with the manifest: only the rules can object
    code, output = _validate(folder)
    assert code == 1 and "quintet_order" in output, output


# -- takedown patches: derived again from their parent --------------------------------------------------------------


@pytest.fixture
def patched(releases: dict[str, Path], tmp_path: Path) -> Path:
    """A copy of the 3XCM release root with a genuine patch 0.0.2 (one correct candidate taken down)."""
    root = tmp_path / "releases"
    shutil.copytree(releases["3xcm"].parent.parent, root, ignore=shutil.ignore_patterns("mixcube"))
    parent = root / "3xcm" / "0.0.1"
    candidate = pq.read_table(next((parent / "benchmark").glob("*.parquet")))[
        "semantically_relevant_candidate_image_id"
    ][0].as_py()
    args = ["takedown", str(parent), "--image-id", candidate, "--reason", "asked", "--date", "2026-05-01"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return root / "3xcm" / "0.0.2"


def test_a_genuine_patch_is_derived_again_from_its_parent(patched: Path) -> None:
    code, output = _validate(patched)
    assert code == 0, output


def test_a_forged_patch_row_is_found_by_the_replay(patched: Path) -> None:
    """Rows swapped between two queries' irrelevant candidates break no per-row rule a patch alone can check with
    its balance replay off; deriving the patch again from its parent finds them."""
    path = next((patched / "benchmark").glob("*.parquet"))
    table = pq.read_table(path)
    rows = table.to_pylist()
    prefix = "non_relevant_candidate_"
    a, b = next(
        (i, j)
        for i in range(len(rows))
        for j in range(i + 1, len(rows))
        if rows[i]["query_concept"] == rows[j]["query_concept"]
        and rows[i]["query_country"] == rows[j]["query_country"]
        and rows[i][f"{prefix}index"] != rows[j][f"{prefix}index"]
    )
    for column in (c for c in table.column_names if c.startswith(prefix)):
        rows[a][column], rows[b][column] = rows[b][column], rows[a][column]
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)
    rehash_manifest(patched)
    code, output = _validate(patched)
    assert code == 1 and "patch.replay" in output and "benchmark is not what" in output, output


def test_a_patch_without_its_parent_or_with_another_parent_is_invalid(patched: Path) -> None:
    parent = patched.parent / "0.0.1"
    card = parent / "README.md"
    card.write_text(card.read_text() + "\nedited\n")
    rehash_manifest(parent)  # a valid release, but not the one the patch names
    code, output = _validate(patched)
    assert code == 1 and "is not the parent manifest the patch names" in output, output
    shutil.rmtree(parent)
    code, output = _validate(patched)
    assert code == 1 and "patch.parent" in output and "not beside the patch" in output, output


def test_a_takedown_refuses_a_tampered_parent_and_writes_nothing(releases: dict[str, Path], tmp_path: Path) -> None:
    folder = _copy(releases["3xcm"], tmp_path)
    _replace_text(folder, "README.md", "cc-by-nc-sa-4.0", "cc0-1.0")
    image = pq.read_table(next((folder / "image_metadata").glob("*.parquet")), columns=["image_id"])[0][0].as_py()
    args = ["takedown", str(folder), "--image-id", image, "--reason", "asked", "--date", "2026-05-01"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "differ from manifest.json: README.md has" in result.output
    assert sorted(p.name for p in folder.parent.iterdir()) == [folder.name]
