"""The `publish-3xcm` / `publish-mixcube` deployments for real: `prefect server start`, `culturebench prefect-setup`,
`prefect deploy` from prefect.yaml, a process worker, and `prefect deployment run` against the fake Hub
(`tests/support/fake_hub.py`), the token in a Prefect Secret block.

Three runs: each shows its preview and pauses with nothing written to the Hub; one resumed with approval commits and
tags the release (the Hub then holds its bytes), one resumed with a rejection ends Completed, named Rejected, one left
alone ends Failed at its timeout; neither writes anything. The token is in no log line, artifact, parameter or
worker output.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
import requests

from data.publish.integrity import read_manifest
from tests.flows import test_deployments as deployments
from tests.flows.test_deployments import BIN, Budget, copy_project, process_worker, run
from tests.support.fake_hub import FakeHub

TOKEN = "hf_fake-deployment-token-5d2c8a"
BLOCK = "hub-token"
TIMEOUT_S = 1500
# Long enough for the three runs to reach their pause on a loaded machine before this one gives up waiting.
APPROVAL_TIMEOUT_S = 60

prefect_api = deployments.prefect_api  # a real `prefect server` on a free port (the fixture of test_deployments.py)


def api(env: dict[str, str], method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    session = requests.Session()
    session.trust_env = False  # 127.0.0.1, never through a proxy
    answer = session.request(method, f"{env['PREFECT_API_URL']}{path}", json=body, timeout=30)
    assert answer.status_code < 300, f"{method} {path}: {answer.status_code} {answer.text[:500]}"
    return answer.json()


def wait_state(env: dict[str, str], run_id: str, wanted: set[str], timeout_s: float, name: str) -> dict[str, Any]:
    """The flow run once its state type is one of `wanted`; fails naming the run and its last state."""
    deadline, state = time.monotonic() + timeout_s, "unread"
    while time.monotonic() < deadline:
        with contextlib.suppress(requests.RequestException, AssertionError, KeyError, TypeError):
            found = api(env, "GET", f"/flow_runs/{run_id}")
            state = found["state"]["type"]
            if state in wanted:
                return dict(found)
            if state in deployments.TERMINAL:
                break
        time.sleep(1)
    raise AssertionError(f"{name}: {state}, not {sorted(wanted)}, within {timeout_s:.0f} s")


def logged(env: dict[str, str], run_id: str, line: str, timeout_s: float) -> str:
    """The run's log messages once one holds `line` (logs reach the API a little after the states)."""
    deadline, messages = time.monotonic() + timeout_s, ""
    while time.monotonic() < deadline:
        logs = api(env, "POST", "/logs/filter", {"logs": {"flow_run_id": {"any_": [run_id]}}, "limit": 200})
        messages = "\n".join(log["message"] for log in logs)
        if line in messages:
            break
        time.sleep(1)
    return messages


def submit(env: dict[str, str], project: Path, deployment: str, params: dict[str, Any], timeout: float) -> str:
    """`prefect deployment run NAME --params JSON`; the flow run id it printed."""
    output = run(
        [str(BIN / "prefect"), "deployment", "run", deployment, "--params", json.dumps(params)], env, project, timeout
    )
    return output.split("UUID:", 1)[1].split()[0]


@pytest.mark.prefect
@pytest.mark.timeout(TIMEOUT_S + 300)
def test_publish_deployment_commits_only_after_approval_and_nothing_on_rejection_or_timeout(
    prefect_api: dict[str, str], small_releases: dict[str, Path], tmp_path: Path
) -> None:
    from prefect.flow_runs import resume_flow_run
    from prefect.settings import PREFECT_API_URL, temporary_settings

    budget = Budget(TIMEOUT_S)
    hub = FakeHub(TOKEN).start()
    # No HF_* variable reaches the worker: the token must come from the Secret block, the Hub from the parameter.
    env = {key: value for key, value in prefect_api.items() if not key.startswith(("HF_", "HUGGINGFACE_"))}
    env["HF_HUB_DISABLE_TELEMETRY"] = "1"
    project = copy_project(tmp_path / "project")
    try:
        run([str(BIN / "culturebench"), "prefect-setup"], env, project, budget("prefect-setup", 300))
        save = (
            "import os; from prefect.blocks.system import Secret; Secret(value=os.environ['V']).save(os.environ['N'])"
        )
        run([str(BIN / "python"), "-c", save], {**env, "V": TOKEN, "N": BLOCK}, project, budget("block", 300))
        deploy = [str(BIN / "prefect"), "--no-prompt", "deploy", "--name", "publish/publish-3xcm"]
        deployed = run([*deploy, "--name", "publish/publish-mixcube"], env, project, budget("deploy", 300))
        assert "publish/publish-3xcm" in deployed and "publish/publish-mixcube" in deployed, deployed

        three, mix = small_releases["3xcm"], small_releases["mixcube"]
        common = {"token_secret_block": BLOCK, "endpoint": hub.endpoint, "approval_timeout_s": APPROVAL_TIMEOUT_S}
        plans = {  # the unanswered run first: its pause is the one with a deadline
            "timed out": ("publish/publish-3xcm", three, "culturebench/3xcm-unanswered"),
            "approved": ("publish/publish-3xcm", three, "culturebench/3xcm"),
            "rejected": ("publish/publish-mixcube", mix, "culturebench/mixcube"),
        }
        with process_worker(env, project, tmp_path / "worker.log"):
            runs = {
                name: submit(
                    env,
                    project,
                    deployment,
                    {**common, "release": str(release), "repo_id": repo},
                    budget(f"run {name}", 300),
                )
                for name, (deployment, release, repo) in plans.items()
            }
            for name, run_id in runs.items():
                wait_state(env, run_id, {"PAUSED"}, budget(f"{name} pauses", 300), name)
            # Paused: each run read the Hub (its preview) and wrote nothing, not even a repository.
            assert hub.repos == {} and not [c for c in hub.calls if c.startswith(("POST", "PUT"))], hub.calls
            for name, run_id in runs.items():
                (preview,) = api(env, "POST", "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [run_id]}}})
                files = len(read_manifest(plans[name][1]).files) + 1  # and the manifest
                assert plans[name][2] in preview["data"] and f"| files | {files} (" in preview["data"], preview
                assert "repository | " + plans[name][2] + " (new, public)" in preview["data"]

            with temporary_settings({PREFECT_API_URL: env["PREFECT_API_URL"]}):
                resume_flow_run(UUID(runs["approved"]), run_input={"approve": True, "note": "card checked"})
                resume_flow_run(UUID(runs["rejected"]), run_input={"approve": False, "note": "wrong repository"})
            ended = {
                name: wait_state(env, run_id, deployments.TERMINAL, budget(f"{name} ends", 300), name)
                for name, run_id in runs.items()
            }
            # The server fails an expired pause itself ("never resumed"); the run, still up, logs what it meant.
            unanswered = f"no approval within {APPROVAL_TIMEOUT_S} s: nothing was committed to {plans['timed out'][2]}"
            timeout_log = logged(env, runs["timed out"], unanswered, budget("the timeout's log line", 120))
        worker_log = (tmp_path / "worker.log").read_text(errors="replace")
        states = {name: (found["state"]["type"], found["state"]["message"] or "") for name, found in ended.items()}
        assert ended["approved"]["state"]["name"] == "Completed", (states, worker_log[-5000:])
        rejected = ended["rejected"]["state"]
        assert (rejected["type"], rejected["name"]) == ("COMPLETED", "Rejected"), states
        assert rejected["message"] == "rejected (wrong repository): nothing was committed to culturebench/mixcube"
        assert states["timed out"][0] == "FAILED", states
        assert unanswered in states["timed out"][1] or "never resumed" in states["timed out"][1], states
        assert unanswered in timeout_log, timeout_log

        # The approved run's commit holds the release, byte for byte, tagged with its version.
        repo = hub.repo("culturebench/3xcm")
        version = read_manifest(three).version
        held = hub.files_at("culturebench/3xcm", version)
        assert held.pop(".gitattributes") and hub.commits_made == {"culturebench/3xcm": 1}
        expected = {p.relative_to(three).as_posix(): p.read_bytes() for p in three.rglob("*") if p.is_file()}
        assert held == expected and repo.tags == {version: repo.branches["main"]}
        assert set(hub.repos) == {("dataset", "culturebench/3xcm")}  # the others: not even created

        # The token reached the Hub (from the block) and nowhere else.
        assert hub.authorizations and all(auth == f"Bearer {TOKEN}" for auth in hub.authorizations)
        ids = list(runs.values())
        logs = api(env, "POST", "/logs/filter", {"logs": {"flow_run_id": {"any_": ids}}, "limit": 200})
        messages = "\n".join(log["message"] for log in logs)
        assert "waiting for approval" in messages and "approved (card checked)" in messages, messages
        artifacts = api(env, "POST", "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": ids}}})
        flow_runs = [api(env, "GET", f"/flow_runs/{run_id}") for run_id in ids]
        for where, text in (
            ("logs", messages),
            ("artifacts", json.dumps(artifacts)),
            ("flow runs", json.dumps(flow_runs)),
            ("worker", worker_log),
        ):
            assert TOKEN not in text, where
    finally:
        hub.stop()


def test_the_flow_asks_nobody_when_the_tag_holds_the_release_and_fails_before_asking_on_a_bad_release(
    prefect: Path, small_releases: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from data.publish.hub import publish_release
    from flows.operations.publish import publish

    hub = FakeHub(TOKEN).start()
    monkeypatch.setenv("HF_TOKEN", TOKEN)  # no block named: the worker's HF_TOKEN
    try:
        release = small_releases["3xcm"]
        version = read_manifest(release).version
        publish_release(release, "culturebench/3xcm", TOKEN, endpoint=hub.endpoint)
        calls = len(hub.calls)
        state = publish(release=str(release), repo_id="culturebench/3xcm", endpoint=hub.endpoint, return_state=True)
        assert state.is_completed() and state.result() == f"unchanged: culturebench/3xcm tag {version}"
        assert hub.commits_made["culturebench/3xcm"] == 1
        assert not [c for c in hub.calls[calls:] if c.startswith(("POST", "PUT"))]

        tampered = shutil.copytree(release, tmp_path / "tampered")
        card = tampered / "README.md"
        card.write_bytes(card.read_bytes() + b"\nchanged after the build\n")
        calls = len(hub.calls)
        state = publish(release=str(tampered), repo_id="culturebench/other", endpoint=hub.endpoint, return_state=True)
        assert state.is_failed() and "nothing was published" in str(state.message) and "README.md" in str(state.message)
        assert hub.calls[calls:] == []  # refused before any call to the Hub
    finally:
        hub.stop()
