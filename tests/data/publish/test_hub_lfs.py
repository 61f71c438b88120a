"""`culturebench publish` through the Hub's real upload path for large and binary files: preupload says `lfs`, the
LFS batch API hands out signed storage URLs (single PUTs, and multipart uploads above the fake's threshold), each
upload is verified, and the commit names the objects by sha256 (`lfsFile`). Against the fake Hub
(`tests/support/fake_hub.py`), which decides LFS as the Hub does and serves LFS files by a redirect to its storage.

What comes back is compared byte for byte with the release (`snapshot_download`) and row for row with its tables
(`datasets.load_dataset("ORG/NAME", config, revision=TAG)` in a process whose HF_ENDPOINT is the fake), and publishing
again uploads nothing: the check against each file's `lfs.sha256` in the Hub's tree finds the release there.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from math import ceil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from data.publish.integrity import read_manifest
from tests.data.publish import test_hub
from tests.data.publish.test_hub import TOKEN, invoke, one_line, publish, sha256s
from tests.support.fake_hub import GITATTRIBUTES, Blob, FakeHub, serving

#: Objects above this size go up in parts of this size: small enough that the small releases' tars and largest
#: Parquet files take the multipart path, and their small files the single PUT.
MULTIPART = 64 * 1024
DATE = "2026-05-01"

root = test_hub.root  # the fixture: a copy of the small releases' root, where a takedown can write

#: What a user runs, with HF_ENDPOINT set: each (repository, tag, config, split) loaded by name, its Arrow table
#: written out for the test to compare.
LOAD = r"""
import json, sys
import datasets
import pyarrow.parquet as pq

out, plan = sys.argv[1], json.loads(sys.argv[2])
for repo_id, revision, config, split in plan:
    table = datasets.load_dataset(repo_id, config, revision=revision, split=split).data.table
    pq.write_table(table, f"{out}/{repo_id.replace('/', '--')}--{config}--{split}.parquet")
"""


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    with serving(monkeypatch, TOKEN, multipart_threshold=MULTIPART) as server:
        yield server


def release_files(release: Path) -> dict[str, tuple[int, str]]:
    """Each file the release publishes (those its manifest lists, and the manifest): its size and sha256."""
    files = {rel: (entry.bytes, entry.sha256) for rel, entry in read_manifest(release).files.items()}
    manifest = (release / "manifest.json").read_bytes()
    files["manifest.json"] = (len(manifest), hashlib.sha256(manifest).hexdigest())
    return files


def lfs_files(hub: FakeHub, release: Path) -> dict[str, tuple[int, str]]:
    """The release's files the Hub's rule puts in LFS (`.gitattributes`, size, binary), read from the files."""
    return {
        rel: facts
        for rel, facts in release_files(release).items()
        if hub.needs_lfs(GITATTRIBUTES, rel, facts[0], (release / rel).read_bytes()[:512])
    }


def calls_since(hub: FakeHub, start: int, prefix: str) -> int:
    return sum(call.startswith(prefix) for call in hub.calls[start:])


def assert_went_through_lfs(hub: FakeHub, repo_id: str, tag: str, release: Path) -> None:
    """The release's LFS files were uploaded once each (in parts above MULTIPART) by the first publication to the
    fake, and the tag holds them in LFS."""
    lfs = lfs_files(hub, release)
    objects = {sha: size for size, sha in lfs.values()}
    assert hub.lfs_paths(repo_id, tag) == set(lfs)
    assert sorted(hub.uploads) == sorted(objects)
    assert calls_since(hub, 0, "PUT storage-put") == sum(
        ceil(size / MULTIPART) if size > MULTIPART else 1 for size in objects.values()
    )
    assert calls_since(hub, 0, "POST lfs-complete") == sum(size > MULTIPART for size in objects.values())
    assert calls_since(hub, 0, "POST lfs-verify") == len(objects)


def download(hub: FakeHub, repo_id: str, tag: str, into: Path) -> Path:
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(repo_id, repo_type="dataset", revision=tag, endpoint=hub.endpoint, local_dir=into))


@pytest.mark.slow
def test_a_release_goes_up_through_lfs_comes_back_byte_for_byte_and_is_not_uploaded_again(
    hub: FakeHub, root: Path, tmp_path: Path
) -> None:
    from huggingface_hub import HfApi, RepoFile
    from huggingface_hub.utils._runtime import is_xet_available

    release, repo_id, tag = root / "mixcube" / "0.0.1", "culturebench/mixcube", "0.0.1"
    files, lfs = release_files(release), lfs_files(hub, release)
    # The release holds what the Hub keeps in LFS, in both upload paths, and what it keeps in git.
    assert {rel for rel in files if rel.endswith((".tar", ".parquet"))} <= set(lfs)
    assert {"README.md", "manifest.json", "croissant.json"}.isdisjoint(lfs)
    assert {size > MULTIPART for size, _ in lfs.values()} == {True, False}
    assert is_xet_available()  # hf_xet is installed: without publish's switch, huggingface_hub would try Xet

    first = publish(release, repo_id)
    assert first.exit_code == 0, first.output
    assert one_line(first.output).startswith("created")
    assert not [call for call in hub.calls if " -> " in call], hub.calls  # no Xet route was tried, nothing refused
    assert_went_through_lfs(hub, repo_id, tag, release)
    assert is_xet_available()  # the switch is undone
    assert hub.storage_authorizations == []  # the token never left the Hub for its storage
    assert hub.authorizations and all(auth == f"Bearer {TOKEN}" for auth in hub.authorizations)

    # What huggingface_hub reads of an LFS file: the tree's and paths-info's `lfs` (sha256, size).
    api = HfApi(endpoint=hub.endpoint, token=TOKEN)
    tree = api.list_repo_tree(repo_id, recursive=True, revision=tag, repo_type="dataset")
    listed = {e.path: (e.lfs.size, e.lfs.sha256) for e in tree if isinstance(e, RepoFile) and e.lfs is not None}
    assert listed == lfs
    tar = next(rel for rel in lfs if rel.endswith(".tar"))
    (info,) = api.get_paths_info(repo_id, [tar], revision=tag, repo_type="dataset")
    assert isinstance(info, RepoFile) and info.lfs is not None and (info.lfs.size, info.lfs.sha256) == lfs[tar]

    got = sha256s(download(hub, repo_id, tag, tmp_path / "download"))
    assert got.pop(".gitattributes") == hashlib.sha256(GITATTRIBUTES).hexdigest()
    assert got == sha256s(release)

    # The same version again: the tag holds the release (by lfs.sha256), so nothing is uploaded or committed.
    before, uploads, commit = len(hub.calls), len(hub.uploads), hub.repo(repo_id).tags[tag]
    again = publish(release, repo_id)
    assert again.exit_code == 0 and one_line(again.output).startswith("unchanged"), again.output
    # A run that stopped before its tag: `main` holds the release, so it is tagged as it is.
    del hub.repo(repo_id).tags[tag]
    retagged = publish(release, repo_id)
    assert retagged.exit_code == 0 and one_line(retagged.output).startswith("created"), retagged.output
    assert hub.repo(repo_id).tags[tag] == commit and hub.commits_made[repo_id] == 1 and len(hub.uploads) == uploads
    assert not [c for c in hub.calls[before:] if c.split()[1] in {"preupload", "lfs-batch", "storage-put", "commit"}]

    # A takedown patch: only the LFS objects it changes go up; the rest (other masks, other tar shards) the Hub
    # holds already, and the batch API says so.
    sample_id = pq.read_table(next((release / "default").glob("*.parquet")), columns=["sample_id"])[0][0]
    taken = invoke("takedown", str(release), "--image-id", str(sample_id), "--reason", "asked", "--date", DATE)
    assert taken.exit_code == 0, taken.output
    patch = root / "mixcube" / "0.0.2"
    kept = {sha for _, sha in lfs_files(hub, patch).values()} & {sha for _, sha in lfs.values()}
    new = {sha for _, sha in lfs_files(hub, patch).values()} - kept
    assert kept and new  # the patch shares LFS objects with its parent, and changes some
    uploads = len(hub.uploads)
    assert publish(patch, repo_id).exit_code == 0
    assert sorted(hub.uploads[uploads:]) == sorted(new)
    assert hub.lfs_paths(repo_id, "0.0.2") == set(lfs_files(hub, patch))
    assert sha256s(download(hub, repo_id, "0.0.2", tmp_path / "patch")) == {
        **sha256s(patch),
        ".gitattributes": hashlib.sha256(GITATTRIBUTES).hexdigest(),
    }


def test_a_tag_whose_lfs_file_has_other_bytes_of_the_same_size_is_refused(hub: FakeHub, root: Path) -> None:
    release, repo_id = root / "3xcm" / "0.0.1", "culturebench/3xcm"
    assert publish(release, repo_id).exit_code == 0
    repo = hub.repo(repo_id)
    tagged = repo.commits[repo.tags["0.0.1"]]
    tar = next(path for path in sorted(tagged.files) if path.endswith(".tar"))
    data = tagged.files[tar].data
    tagged.files[tar] = Blob(data[:-1] + bytes([data[-1] ^ 1]), lfs=True)  # one bit: same size, other sha256

    result = publish(release, repo_id)
    assert result.exit_code == 1
    line = one_line(result.output)
    assert tar in line and "other bytes" in line and "0.0.1" in line
    assert hub.commits_made[repo_id] == 1


def test_a_refused_upload_is_one_line_naming_the_file_and_nothing_is_committed(hub: FakeHub, root: Path) -> None:
    release, repo_id = root / "mixcube" / "0.0.1", "culturebench/mixcube"
    hub.storage_refuses = True
    result = publish(release, repo_id)
    assert result.exit_code == 1
    line = one_line(result.output)
    lfs = lfs_files(hub, release)
    assert "HTTP 403" in line and "Request has expired" in line and any(f"'{rel}'" in line for rel in lfs), line
    assert "check the token" not in line  # the storage's URL is signed: the token was not the problem
    assert hub.commits_made[repo_id] == 0 and hub.repo(repo_id).tags == {}


def card_configs(release: Path) -> list[tuple[str, str, str]]:
    """Each (config, split, data files pattern) the card declares."""
    _, front, _ = (release / "README.md").read_text(encoding="utf-8").split("---\n", 2)
    return [
        (config["config_name"], files["split"], files["path"])
        for config in yaml.safe_load(front)["configs"]
        for files in config["data_files"]
    ]


@pytest.mark.slow
def test_every_config_loads_by_repository_id_and_tag_with_the_release_rows(
    hub: FakeHub, root: Path, tmp_path: Path
) -> None:
    plan, expected = [], {}
    for name in ("3xcm", "mixcube"):
        release, repo_id = root / name / "0.0.1", f"culturebench/{name}"
        assert publish(release, repo_id).exit_code == 0
        for config, split, pattern in card_configs(release):
            plan.append((repo_id, "0.0.1", config, split))
            shards = sorted(release.glob(pattern))
            assert shards, pattern
            expected[f"{repo_id.replace('/', '--')}--{config}--{split}"] = pa.concat_tables(
                [pq.read_table(shard) for shard in shards]
            )
    start, authorizations = len(hub.calls), len(hub.authorizations)
    out = tmp_path / "loaded"
    out.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))},
        "HF_ENDPOINT": hub.endpoint,  # what a user sets; no token: the repositories are public
        "HF_HOME": str(tmp_path / "hf-home"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "NO_PROXY": "127.0.0.1",
    }
    done = subprocess.run(
        [sys.executable, "-c", LOAD, str(out), json.dumps(plan)], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]

    for key, table in expected.items():
        loaded = pq.read_table(out / f"{key}.parquet")
        assert loaded.column_names == table.column_names, key
        assert loaded.num_rows == table.num_rows > 0, key
        assert loaded.to_pylist() == table.to_pylist(), key
    # Through the fake's API: the tree, the resolve route and its storage; the only misses are the files datasets
    # looks for and a release does not hold (404, as the Hub answers).
    calls = hub.calls[start:]
    assert {"GET list-tree", "GET storage-get"} <= set(calls)
    missing = [call for call in calls if " -> " in call]
    assert all(call.startswith("HEAD /datasets/") and call.endswith(" -> 404") for call in missing), missing
    assert len(hub.authorizations) == authorizations
