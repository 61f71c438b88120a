"""Hostile inputs, fourth round (issue 56, item 15): a Hub that redirects a publication to another host, port or
scheme gets nothing sent there, and a repository id the Hub refuses (`org/x--y`) is refused before any work.

Against the fake Hub of `tests/support/fake_hub.py`, with a `TrapServer` standing for the host a redirect points to.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from data.publish.hub import PublishInputError, PublishRefused, preview_release
from flows.cli import app
from tests.support.fake_hub import FakeHub, TrapServer, serving, trap

TOKEN = "hf_fake-hostile-token-41c2"
REPO = "culturebench/3xcm"
CREATE = "/api/repos/create"
COMMIT = f"/api/datasets/{REPO}/commit/main"
REFS = f"/api/datasets/{REPO}/refs"


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    with serving(monkeypatch, TOKEN) as server:
        yield server


@pytest.fixture
def release(small_releases: dict[str, Path], tmp_path: Path) -> Path:
    copy = tmp_path / "releases"
    shutil.copytree(small_releases["3xcm"].parents[1], copy)
    return copy / "3xcm" / "0.0.1"


def publish(release: Path, repo_id: str) -> Any:
    result = CliRunner().invoke(app, ["publish", str(release), "--repo-id", repo_id])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def one_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in output, output
    return lines[0]


def _other_host(trap_server: TrapServer) -> str:
    return trap_server.url  # 127.0.0.2: another host


def _other_scheme(trap_server: TrapServer) -> str:
    host, port = trap_server.address
    return f"https://{host}:{port}"  # a TLS handshake would still be a connection the trap records


#: Where the hostile Hub points its redirect: (trap host, how the Location is made from the trap).
ELSEWHERE: dict[str, tuple[str, Callable[[TrapServer], str]]] = {
    "another host": ("127.0.0.2", _other_host),
    "another port": ("127.0.0.1", _other_host),
    "another scheme": ("127.0.0.1", _other_scheme),
}


@pytest.mark.parametrize("elsewhere", sorted(ELSEWHERE))
def test_a_307_on_create_repo_to_another_origin_is_not_followed_and_nothing_reaches_it(
    hub: FakeHub, release: Path, elsewhere: str
) -> None:
    host, location = ELSEWHERE[elsewhere]
    with trap(host) as target:
        hub.redirects[CREATE] = f"{location(target)}{CREATE}"
        result = publish(release, REPO)
    assert result.exit_code == 1, result.output
    line = one_line(result.output)
    assert "another origin" in line and "not followed" in line and TOKEN not in result.output
    assert target.connections == [] and target.requests == []
    assert hub.calls == [f"POST {CREATE} -> 307"] and hub.repos == {}


def test_a_307_on_the_commit_sends_no_release_byte_elsewhere_and_commits_nothing(hub: FakeHub, release: Path) -> None:
    with trap() as target:
        hub.redirects[COMMIT] = f"{target.url}{COMMIT}"
        result = publish(release, REPO)
    assert result.exit_code == 1, result.output
    assert "another origin" in one_line(result.output)
    assert target.connections == []
    assert f"POST {COMMIT} -> 307" in hub.calls and hub.commits_made[REPO] == 0 and not hub.repo(REPO).tags


def test_the_flows_preview_refuses_a_redirect_elsewhere_too(hub: FakeHub, release: Path) -> None:
    with trap() as target:
        hub.redirects[REFS] = f"{target.url}{REFS}"
        with pytest.raises(PublishRefused, match="another origin"):
            preview_release(release, REPO, TOKEN, endpoint=hub.endpoint)
    assert target.connections == []


def test_a_redirect_within_the_hub_is_followed_and_downloads_still_follow_the_hub_to_its_storage(
    hub: FakeHub, release: Path, tmp_path: Path
) -> None:
    hub.redirects[CREATE] = f"{hub.endpoint}{CREATE}"  # the same origin: a moved route, as the Hub may answer
    result = publish(release, REPO)
    assert result.exit_code == 0, result.output
    assert hub.calls[:2] == [f"POST {CREATE} -> 307", "POST create-repo"]

    # The guard is the publication's only: huggingface_hub's client is its own again, and a download follows the
    # Hub's 302 to its storage (another origin) as before.
    from huggingface_hub import snapshot_download

    folder = Path(
        snapshot_download(
            REPO, repo_type="dataset", revision="0.0.1", endpoint=hub.endpoint, local_dir=tmp_path / "download"
        )
    )
    assert (folder / "manifest.json").read_bytes() == (release / "manifest.json").read_bytes()
    assert any(call == "GET storage-get" for call in hub.calls)


@pytest.mark.parametrize("repo_id", ["culturebench/x--y", "culture--bench/x", "culturebench/x-", "culturebench/x_-y-"])
def test_a_repo_id_the_hub_refuses_is_refused_before_any_request(hub: FakeHub, release: Path, repo_id: str) -> None:
    result = publish(release, repo_id)
    assert result.exit_code == 2, result.output
    line = one_line(result.output)
    assert repo_id in line and "not a Hub repository id" in line
    assert hub.calls == []
    with pytest.raises(PublishInputError, match="not a Hub repository id"):
        preview_release(release, repo_id, TOKEN, endpoint=hub.endpoint)
    assert hub.calls == []
