"""The pack is the build's default (issue 57, parts 7 and 8): a demo build given a pack takes its countries,
concepts and demo selection from it, in the CLI, a config and the deployment's parameters; a selection outside the
pack is one line before any work, and a Prefect run fails with that line; a version another build has taken is
refused before the first stage."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from flows.cli import app
from flows.engine.config import ConfigError, build_config
from flows.xcm.config import Build3XCMConfig
from tests.support.paths import REPO_ROOT

GLOBALRG = REPO_ROOT / "examples" / "packs" / "globalrg"


def cli(*args: object) -> tuple[int, str]:
    result = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.output


@pytest.fixture
def pack(tmp_path: Path) -> Path:
    folder = tmp_path / "two"
    code, output = cli(
        "reference", "init", folder, "--from", GLOBALRG, "--countries", "Peru,Kenya", "--concepts", "dance,festival"
    )
    assert code == 0, output
    return folder


def deployment_config() -> dict:
    spec = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text(encoding="utf-8"))
    demo = next(d for d in spec["deployments"] if d["entrypoint"] == "flows/xcm/build.py:build_3xcm")
    return dict(demo["parameters"]["config"])


def test_the_deployments_demo_parameters_take_the_packs_selection(pack: Path) -> None:
    raw = {**deployment_config(), "reference": str(pack)}
    config = build_config(raw, model=Build3XCMConfig)
    assert config.countries == ["Kenya", "Peru"]  # the pack's order
    assert config.demo_corpus is not None and sorted(config.demo_corpus.concepts) == ["dance", "festival"]
    assert sorted(config.concepts.include or []) == ["dance", "festival"]
    # the same build as `build 3xcm --demo --reference PACK`
    assert config.resolved_build_id() == Build3XCMConfig.demo(reference=str(pack)).resolved_build_id()
    # and, without a pack, the default demo, as before
    assert build_config(deployment_config(), model=Build3XCMConfig) == Build3XCMConfig.demo()


def test_a_selection_outside_the_pack_is_one_line(pack: Path, tmp_path: Path) -> None:
    raw = {**deployment_config(), "reference": str(pack), "countries": ["Argentina", "Peru"]}
    with pytest.raises(ConfigError) as refused:
        build_config(raw, model=Build3XCMConfig)
    message = str(refused.value)
    assert "\n" not in message and "countries" in message and "'Argentina'" in message and "two" in message
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"countries": ["Argentina", "Peru"]}), encoding="utf-8")
    start = time.monotonic()
    code, output = cli(
        "build", "3xcm", "--demo", "--engine", "local", "--reference", pack, "--config", tmp_path / "c.yaml",
        "--workspace-root", tmp_path / "ws", "--release-root", tmp_path / "rel",
    )  # fmt: skip
    assert code != 0 and "'Argentina'" in output, output
    assert len([line for line in output.splitlines() if line.strip()]) == 1, output
    assert time.monotonic() - start < 30 and not (tmp_path / "ws").exists()


@pytest.mark.prefect
def test_a_prefect_run_with_a_selection_outside_the_pack_fails_with_that_line(prefect: Path, pack: Path) -> None:
    from flows.xcm.build import build_3xcm

    raw = {**deployment_config(), "reference": str(pack), "countries": ["Argentina", "Peru"]}
    state = build_3xcm(raw, return_state=True)
    assert state.is_failed(), state
    assert state.message is not None and "'Argentina'" in state.message and "\n" not in state.message


def test_a_version_another_build_took_is_refused_before_the_first_stage(pack: Path, tmp_path: Path) -> None:
    version = tmp_path / "rel" / "3xcm" / "0.1.0-demo"
    version.mkdir(parents=True)
    (version / "manifest.json").write_text(json.dumps({"build_id": "3xcm-000000000000"}), encoding="utf-8")
    start = time.monotonic()
    code, output = cli(
        "build", "3xcm", "--demo", "--engine", "local", "--reference", pack,
        "--workspace-root", tmp_path / "ws", "--release-root", tmp_path / "rel",
    )  # fmt: skip
    assert code != 0, output
    assert "release 3xcm 0.1.0-demo already exists" in output and "3xcm-000000000000" in output, output
    assert time.monotonic() - start < 30
    stages = tmp_path / "ws"
    assert not any(p.name == "search" for p in stages.rglob("*")) if stages.exists() else True


@pytest.mark.parametrize("entrypoint", ["flows/xcm/build.py:build_3xcm", "flows/mixcube/build.py:build_mixcube"])
def test_the_deployments_parameters_pass_prefects_own_schema_check(entrypoint: str) -> None:
    """What `prefect deploy` sends the server, checked as the server checks it (enforce_parameter_schema): a null
    where the schema says array is a 422 at deploy time, so the pack's selection is left out, not null."""
    from importlib import import_module

    from prefect._internal.schemas.validators import validate_values_conform_to_schema
    from prefect.utilities.callables import parameter_schema

    spec = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text(encoding="utf-8"))
    path, name = entrypoint.split(":")
    module = path.removesuffix(".py").replace("/", ".")
    schema = parameter_schema(getattr(import_module(module), name)).model_dump_for_openapi()
    deployments = [d for d in spec["deployments"] if d["entrypoint"] == entrypoint]
    assert deployments
    for deployment in deployments:  # as the server's DeploymentCreate checks them
        validate_values_conform_to_schema(deployment.get("parameters", {}), schema, ignore_required=True)
