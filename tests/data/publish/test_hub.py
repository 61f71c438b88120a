"""`culturebench publish`: a release to a Hub dataset repository in one commit tagged with its version, against a
fake Hub on 127.0.0.1 (`tests/support/fake_hub.py`) that answers only the calls `huggingface_hub` makes, then downloaded
back with `snapshot_download` at the tag, compared byte for byte and loaded with `datasets`."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from flows.cli import app
from tests.support.fake_hub import FakeHub, serving

TOKEN = "hf_fake-publish-token-7c1e9d"
DATE = "2026-05-01"


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    with serving(monkeypatch, TOKEN) as server:
        yield server


@pytest.fixture
def root(small_releases: dict[str, Path], tmp_path: Path) -> Path:
    """A copy of the small releases' root (3xcm/0.0.1 and mixcube/0.0.1), so that a takedown can write beside them."""
    copy = tmp_path / "releases"
    shutil.copytree(small_releases["3xcm"].parents[1], copy)
    return copy


def invoke(*args: str) -> Any:
    result = CliRunner().invoke(app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def publish(release: Path, repo_id: str, *extra: str) -> Any:
    return invoke("publish", str(release), "--repo-id", repo_id, *extra)


def sha256s(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and ".cache" not in p.relative_to(folder).parts
    }


def download(hub: FakeHub, repo_id: str, tag: str, into: Path) -> Path:
    from huggingface_hub import snapshot_download

    path = snapshot_download(repo_id, repo_type="dataset", revision=tag, endpoint=hub.endpoint, local_dir=into)
    return Path(path)


def assert_is_the_release(downloaded: Path, release: Path) -> None:
    got = sha256s(downloaded)
    assert got.pop(".gitattributes", None) is not None, "the Hub's own .gitattributes is kept"
    assert got == sha256s(release)


def assert_loads(folder: Path) -> None:
    from datasets import load_dataset

    _, front, _ = (folder / "README.md").read_text(encoding="utf-8").split("---\n", 2)
    configs = yaml.safe_load(front)["configs"]
    assert configs
    for config in configs:
        (files,) = config["data_files"]
        rows = load_dataset(str(folder), config["config_name"], split=files["split"])
        assert rows.num_rows > 0, config["config_name"]


def one_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in output, output
    return lines[0]


def files_holding(folder: Path, needle: bytes) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and not p.is_symlink() and needle in p.read_bytes()]


@pytest.mark.slow
def test_publish_round_trip_is_idempotent_and_a_takedown_patch_is_a_new_tag(
    hub: FakeHub, root: Path, tmp_path: Path
) -> None:
    release, repo_id = root / "3xcm" / "0.0.1", "culturebench/3xcm"

    first = publish(release, repo_id)
    assert first.exit_code == 0, first.output
    repo = hub.repo(repo_id)
    commit = repo.tags["0.0.1"]
    assert hub.commits_made[repo_id] == 1 and repo.branches["main"] == commit
    line = one_line(first.output)
    assert line.startswith("created") and repo_id in line and "0.0.1" in line and commit in line
    assert {"POST create-repo", "GET list-refs", "POST preupload", "POST commit", "POST create-tag"} <= set(hub.calls)
    assert not [call for call in hub.calls if " -> " in call], hub.calls  # the fake answered every call

    downloaded = download(hub, repo_id, "0.0.1", tmp_path / "download-0.0.1")
    assert_is_the_release(downloaded, release)
    assert (downloaded / "README.md").read_bytes() == (release / "README.md").read_bytes()
    assert (downloaded / "croissant.json").is_file()
    assert_loads(downloaded)

    again = publish(release, repo_id)
    assert again.exit_code == 0, again.output
    assert one_line(again.output).startswith("unchanged") and commit in again.output
    assert hub.commits_made[repo_id] == 1 and repo.tags == {"0.0.1": commit}

    benchmark = json.loads((release / "manifest.json").read_text())
    assert benchmark["version"] == "0.0.1"
    import pyarrow.parquet as pq

    image_id = pq.read_table(next((release / "image_metadata").glob("*.parquet")), columns=["image_id"])[0][0]
    taken = invoke(
        "takedown", str(release), "--image-id", str(image_id), "--reason", "the rights holder asked", "--date", DATE
    )
    assert taken.exit_code == 0, taken.output
    patch = root / "3xcm" / "0.0.2"
    assert json.loads((patch / "manifest.json").read_text())["parent"]["version"] == "0.0.1"

    patched = publish(patch, repo_id)
    assert patched.exit_code == 0, patched.output
    assert one_line(patched.output).startswith("created")
    assert hub.commits_made[repo_id] == 2 and repo.tags["0.0.1"] == commit
    assert repo.commits[repo.tags["0.0.2"]].parent == commit and repo.branches["main"] == repo.tags["0.0.2"]
    assert_is_the_release(download(hub, repo_id, "0.0.2", tmp_path / "download-0.0.2"), patch)
    assert_is_the_release(download(hub, repo_id, "0.0.1", tmp_path / "again-0.0.1"), release)

    outputs = first.output + again.output + patched.output
    assert TOKEN not in outputs
    assert not files_holding(tmp_path, TOKEN.encode())
    assert all(auth == f"Bearer {TOKEN}" for auth in hub.authorizations)


def test_a_different_folder_claiming_a_published_version_is_refused_and_the_tag_stays(
    hub: FakeHub, root: Path, tmp_path: Path
) -> None:
    repo_id = "culturebench/mixcube"
    assert publish(root / "mixcube" / "0.0.1", repo_id).exit_code == 0
    repo = hub.repo(repo_id)
    tag, main = repo.tags["0.0.1"], repo.branches["main"]

    other = publish(root / "3xcm" / "0.0.1", repo_id)
    assert other.exit_code == 1
    line = one_line(other.output)
    assert "0.0.1" in line and "other files" in line
    assert repo.tags == {"0.0.1": tag} and repo.branches["main"] == main and hub.commits_made[repo_id] == 1
    assert_is_the_release(download(hub, repo_id, "0.0.1", tmp_path / "download"), root / "mixcube" / "0.0.1")


def test_no_token_is_one_line_naming_hf_token_and_no_request(
    hub: FakeHub, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HF_TOKEN")
    result = publish(root / "3xcm" / "0.0.1", "culturebench/3xcm")
    assert result.exit_code == 2
    assert "HF_TOKEN" in one_line(result.output)
    assert hub.calls == []


def test_a_wrong_token_is_refused_in_one_line_that_does_not_show_it(
    hub: FakeHub, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = "hf_wrong-token-0b8a"
    monkeypatch.setenv("HF_TOKEN", wrong)
    result = publish(root / "3xcm" / "0.0.1", "culturebench/3xcm")
    assert result.exit_code == 1
    assert "401" in one_line(result.output) and wrong not in result.output and TOKEN not in result.output
    assert hub.repos == {}


def test_a_release_that_differs_from_its_manifest_or_a_bad_repo_id_is_refused_before_any_request(
    hub: FakeHub, root: Path
) -> None:
    release = root / "3xcm" / "0.0.1"
    bad_id = publish(release, "not a repo id")
    assert bad_id.exit_code == 2 and "ORG/NAME" in one_line(bad_id.output)

    card = release / "README.md"
    card.write_bytes(card.read_bytes() + b"\nchanged after the build\n")
    tampered = publish(release, "culturebench/3xcm")
    assert tampered.exit_code == 2 and "README.md" in one_line(tampered.output)
    assert hub.calls == []
