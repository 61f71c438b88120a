"""The README's operator sequence, for real: `prefect server start` on 127.0.0.1 with SQLite, `culturebench
prefect-setup`, `prefect deploy --all` from prefect.yaml, a process worker, and `prefect deployment run` of both demo
deployments, which must reach `Completed` and leave valid releases.

The project is copied into a temporary folder first: deployments run in the folder they were deployed from, and
their relative `./workspace` and `./releases` must not land in the checkout.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
import requests
import yaml
from datasets import load_dataset

from flows.engine.runner import artifact_key
from flows.mixcube.config import BuildMixCubeConfig
from flows.xcm.config import Build3XCMConfig
from flows.xcm.stages import STAGES
from tests.support.browser import artifact_dir, screenshot_flow_run
from tests.support.label_studio_server import free_port
from tests.support.paths import REPO_ROOT
from tests.support.readiness import answers_200, wait_until_ready

ROOT = REPO_ROOT
BIN = Path(sys.executable).parent
TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}
ETHNICITIES = ["African", "Caucasian", "EastAsian", "SouthAsian"]


def copy_project(dest: Path) -> Path:
    """The files git tracks, plus new ones it does not ignore: what a clean clone of this tree would hold."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    for name in listed:
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


# Each test's own deadline, shared out between its steps by `Budget`; pytest-timeout's, above it, is the last resort.
BUDGET_S = 1500
TIMEOUT_S = BUDGET_S + 300


class Budget:
    """A test's deadline shared out between its steps: each step waits at most its own bound and never past the
    deadline, so that one slow step (a build on a loaded machine, the browser) cannot eat the others' time unseen; the
    step that finds no time left fails naming itself and when the steps before it began."""

    def __init__(self, total_s: float = BUDGET_S) -> None:
        self.total_s = total_s
        self.start = time.monotonic()
        self.steps: list[str] = []

    def __call__(self, step: str, bound_s: float) -> float:
        """The seconds `step` may take: `bound_s`, or what is left of the test's time if that is less."""
        elapsed = time.monotonic() - self.start
        self.steps.append(f"{step} at {elapsed:.0f} s")
        left = self.total_s - elapsed
        if left < 1:
            raise AssertionError(f"no time left for {step}: the test's {self.total_s:.0f} s are spent ({self.steps})")
        return min(bound_s, left)


def run(command: list[str], env: dict[str, str], cwd: Path, timeout: float = 300) -> str:
    """`command` to its end within `timeout` s; fails naming the command when it exits non-zero or runs over."""
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{command} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


@contextlib.contextmanager
def background(command: list[str], env: dict[str, str], cwd: Path, log_path: Path) -> Iterator[subprocess.Popen]:
    """A process for the length of the block, its output in `log_path`; terminated (then killed) afterwards."""
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
        try:
            yield process
        finally:
            process.terminate()
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()


@pytest.fixture
def prefect_api(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A real Prefect server on a free port, with its own PREFECT_HOME and SQLite database; stopped afterwards."""
    port = free_port()
    home = tmp_path / "server-home"
    home.mkdir()
    env = {
        **os.environ,
        "PREFECT_HOME": str(home),
        "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_CLI_PROMPT": "false",
        "PREFECT_LOGGING_LEVEL": "INFO",  # an operator's default (the suite quiets in-process runs to WARNING)
    }
    server = [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    with background(server, env, tmp_path, tmp_path / "server.log") as process:
        healthy = partial(answers_200, f"{env['PREFECT_API_URL']}/health")
        wait_until_ready("prefect server", healthy, 180, process=process, log_path=tmp_path / "server.log")
        # the operator's own check (README, docs/operators.md), as written: it answers at once on a ready server
        run([str(BIN / "prefect"), "server", "status", "--wait", "--timeout", "120"], env, tmp_path, timeout=200)
        yield env


def process_worker(
    env: dict[str, str], project: Path, log_path: Path
) -> contextlib.AbstractContextManager[subprocess.Popen]:
    """`prefect worker start` on the project's pool, in the project folder."""
    worker = [str(BIN / "prefect"), "worker", "start", "--pool", "culturebench-process"]
    return background(worker, env, project, log_path)


def deployment_run(name: str, env: dict[str, str], project: Path, timeout: float = 300) -> str:
    """`prefect deployment run NAME`; returns the flow run id it printed."""
    output = run([str(BIN / "prefect"), "deployment", "run", name], env, project, timeout)
    match = re.search(r"UUID:\s*([0-9a-f-]{36})", output)
    assert match, output
    return match.group(1)


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, from /proc (Linux)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def marker_times(workspace: Path) -> dict[str, int]:
    return {p.parent.name: p.stat().st_mtime_ns for p in workspace.glob("tables/*/_SUCCESS")}


def wait_for(run_id: str, env: dict[str, str], timeout_s: float = 600, name: str = "") -> str:
    """The flow run's terminal state type, read from the server's API (an HTTP request a second: a `prefect
    flow-run inspect` process a poll would cost a core's worth of Python start-ups on a small machine)."""
    session = requests.Session()
    session.trust_env = False  # 127.0.0.1, never through a proxy
    deadline = time.monotonic() + timeout_s
    state = "unread"
    while time.monotonic() < deadline:
        with contextlib.suppress(requests.RequestException, ValueError, KeyError, TypeError):
            answer = session.get(f"{env['PREFECT_API_URL']}/flow_runs/{run_id}", timeout=30)
            state = answer.json()["state"]["type"] if answer.status_code == 200 else f"HTTP {answer.status_code}"
        if state in TERMINAL:
            return state
        time.sleep(1)
    raise AssertionError(f"flow run {name or run_id} did not finish in {timeout_s:.0f} s (last state: {state})")


@pytest.mark.browser
@pytest.mark.prefect
@pytest.mark.timeout(TIMEOUT_S)
def test_readme_sequence_deploys_and_runs_both_demos_to_completed(prefect_api: dict[str, str], tmp_path: Path) -> None:
    env = prefect_api
    budget = Budget()
    project = copy_project(tmp_path / "project")
    setup = run([str(BIN / "culturebench"), "prefect-setup"], env, project, budget("prefect-setup", 300))
    assert "created work pool culturebench-process" in setup and "created limit gpu = 1" in setup
    again = run([str(BIN / "culturebench"), "prefect-setup"], env, project, budget("prefect-setup again", 300))
    assert "already there: limit gpu" in again
    deployed = run([str(BIN / "prefect"), "--no-prompt", "deploy", "--all"], env, project, budget("deploy", 300))
    for name in ("build-3xcm/demo", "build-mixcube/demo", "sync-reviews/sync-reviews", "evaluate/demo-3xcm"):
        assert name in deployed, deployed

    def submit(name: str) -> str:
        return deployment_run(name, env, project, budget(f"deployment run {name}", 300))

    def finish(name: str) -> str:
        return wait_for(runs[name], env, budget(f"wait for {name}", 600), name)

    evaluations = ("evaluate/demo-3xcm", "evaluate/demo-mixcube", "evaluate/demo-mixcube-audit")
    with process_worker(env, project, tmp_path / "worker.log"):
        runs = {name: submit(name) for name in ("build-3xcm/demo", "build-mixcube/demo")}
        states = {name: finish(name) for name in runs}
        # The evaluate deployment on both demo releases, each with a tiny random model built on the worker.
        if set(states.values()) == {"COMPLETED"}:
            runs.update({name: submit(name) for name in evaluations})
            states.update({name: finish(name) for name in evaluations})
    assert states == {
        "build-3xcm/demo": "COMPLETED",
        "build-mixcube/demo": "COMPLETED",
        "evaluate/demo-3xcm": "COMPLETED",
        "evaluate/demo-mixcube": "COMPLETED",
        "evaluate/demo-mixcube-audit": "COMPLETED",
    }, (tmp_path / "worker.log").read_text()[-5000:]

    logs = run([str(BIN / "prefect"), "flow-run", "logs", runs["build-3xcm/demo"]], env, project, budget("logs", 300))
    assert "image_dedup: done (" in logs and "validation: done (" in logs, logs[-3000:]  # stage logs reach the API

    # What an operator sees: the run page in the Prefect UI, in headless Chromium.
    ui = env["PREFECT_API_URL"].removesuffix("/api")
    page = screenshot_flow_run(
        ui,
        runs["build-3xcm/demo"],
        artifact_dir() / "prefect-build-3xcm-demo.png",
        "Completed",
        ["build-3xcm-summary", "image-dedup-stats"],
        budget_s=budget("the Prefect UI screenshot", 300),
    )
    assert page.state_shown, f"the run page never showed Completed: {page.path}"
    assert page.artifacts_shown == ["build-3xcm-summary", "image-dedup-stats"], page.artifacts_path

    three = project / "releases" / "3xcm" / Build3XCMConfig.demo().release.version
    run([str(BIN / "culturebench"), "validate", str(three)], env, project, budget("validate", 300))
    assert len(load_dataset(str(three), "benchmark", split="train")) > 0
    mix = project / "releases" / "mixcube" / BuildMixCubeConfig.demo().release.version
    loaded = load_dataset(str(mix), split="train")
    assert len(loaded) == 5 * 30 and loaded["ethnicity"][:5] == ["original", *ETHNICITIES]

    # Both evaluations wrote their result folders, and published their headline metrics as table artifacts.
    three_results = list((project / "evaluations" / "3xcm" / Build3XCMConfig.demo().release.version).iterdir())
    mix_results = sorted((project / "evaluations" / "mixcube" / BuildMixCubeConfig.demo().release.version).iterdir())
    assert len(three_results) == 1 and three_results[0].name.endswith("--all")  # the deployment runs both tasks
    three_metrics = json.loads((three_results[0] / "metrics.json").read_text())
    assert {"M_cr", "M_lb", "M_ti", "SP", "precision@5", "diversity@5_country", "mrr", "ndcg@5"} <= set(three_metrics)
    assert three_metrics["tasks"] == ["triplet", "retrieval"] and three_metrics["meaningless_demo_model"]
    assert len(load_dataset(str(three_results[0]), "per_query", split="test")) == len(
        load_dataset(str(three), "benchmark", split="train")
    )
    assert len(load_dataset(str(three_results[0]), "retrieval_per_query", split="test")) > 0
    questions = next(f for f in mix_results if not f.name.endswith("--audit"))
    audit = next(f for f in mix_results if f.name.endswith("--audit"))
    assert len(mix_results) == 2 and len(load_dataset(str(questions), "per_query", split="test")) == 5 * 30
    audit_metrics = json.loads((audit / "metrics.json").read_text())
    assert audit_metrics["tasks"] == ["audit"] and set(audit_metrics["max_skew"]) >= {"communion", "agency"}
    assert (audit / "audit" / "figures" / "skew_heatmap.png").is_file()
    for benchmark, folder in (("3xcm", three_results[0]), ("mixcube", questions), ("mixcube", audit)):
        key = artifact_key(f"{benchmark}-{folder.name}") + "-headline"
        shown = run([str(BIN / "prefect"), "artifact", "inspect", key], env, project)
        assert "metric" in shown, shown


def test_release_deployments_hold_production_configs_that_fail_fast_without_their_models() -> None:
    from flows.mixcube.build import check_backends

    spec = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    by_name = {(d["entrypoint"].rsplit(":", 1)[1], d["name"]): d for d in spec["deployments"]}
    three = Build3XCMConfig.model_validate(by_name[("build_3xcm", "release")]["parameters"]["config"])
    assert three.demo_corpus is None and three.release.version == "1.0.0"
    assert (three.search.backend, three.download.backend, three.review.backend) == ("ddgs", "http", "label_studio")
    assert three.concepts.backend == "reviewed" and three.tagging.backend == "gemini"
    mix = BuildMixCubeConfig.model_validate(by_name[("build_mixcube", "release")]["parameters"]["config"])
    assert not mix.is_demo and (mix.faces.backend, mix.masks.backend, mix.inpaint.backend) == ("yunet", "sam", "sdxl")
    assert mix.filters.brisque is not None and mix.filters.clip is not None and mix.qa.backend == "label_studio"
    with pytest.raises(FileNotFoundError, match="model_path"):  # the models are not on this machine
        check_backends(mix)


@pytest.mark.prefect
@pytest.mark.timeout(TIMEOUT_S)
def test_a_flow_process_killed_mid_build_is_resumed_by_a_rerun_without_redoing_finished_stages(
    prefect_api: dict[str, str], tmp_path: Path
) -> None:
    env = prefect_api
    budget = Budget()
    project = copy_project(tmp_path / "project")
    run([str(BIN / "culturebench"), "prefect-setup"], env, project, budget("prefect-setup", 300))
    deploy = [str(BIN / "prefect"), "--no-prompt", "deploy", "--name", "build-3xcm/demo"]
    run(deploy, env, project, budget("deploy", 300))
    config = Build3XCMConfig.demo()
    workspace = project / "workspace" / config.resolved_build_id()

    with process_worker(env, project, tmp_path / "worker.log") as worker:
        first = deployment_run("build-3xcm/demo", env, project, budget("the first deployment run", 300))
        deadline = time.monotonic() + budget("the images stage of the first run", 300)
        while not (workspace / "tables" / "images" / "_SUCCESS").exists():  # kill once the downloads are done
            assert time.monotonic() < deadline, "the images stage never finished"
            time.sleep(0.05)
        engines = [pid for pid in descendants(worker.pid) if b"prefect" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert engines, "no flow run process under the worker"
        for pid in engines:
            os.kill(pid, signal.SIGKILL)
        assert wait_for(first, env, budget("the killed run's end", 600), "the killed run") == "CRASHED"
        before = marker_times(workspace)
        assert "images" in before and "validation" not in before
        assert not (project / "releases" / "3xcm").exists()

        second = deployment_run("build-3xcm/demo", env, project, budget("the second deployment run", 300))
        resumed = wait_for(second, env, budget("the resumed run", 600), "the resumed run")
        assert resumed == "COMPLETED", (tmp_path / "worker.log").read_text()[-5000:]
    after = marker_times(workspace)
    assert {stage: after[stage] for stage in before} == before  # no finished stage ran again
    assert set(after) == {s.name for s in STAGES}

    # The resumed release is byte for byte the release of an uninterrupted build of the same config: the same
    # relative roots and the code of a project copy (its manifest names the code), so a second copy, run from there.
    clean = copy_project(tmp_path / "clean")
    cli = "from flows.cli import app; app()"
    run([sys.executable, "-c", cli, "build", "3xcm", "--demo", "--engine", "local"], env, clean, budget("clean", 600))
    resumed_release = project / "releases" / "3xcm" / config.release.version
    clean_release = clean / "releases" / "3xcm" / config.release.version
    files = sorted(p.relative_to(clean_release) for p in clean_release.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(resumed_release) for p in resumed_release.rglob("*") if p.is_file())
    differing = [f for f in files if (clean_release / f).read_bytes() != (resumed_release / f).read_bytes()]
    assert differing == []
