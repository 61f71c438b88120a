"""Shared fixtures. Every test runs with its own temporary PREFECT_HOME and workspace."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.cli.prefect_defaults import EPHEMERAL_STARTUP_TIMEOUT_S, apply_prefect_defaults
from tests.support import prefect_startup
from tests.support.shared_dirs import built_once

pytest_plugins = [
    "tests.support.label_studio_fixtures",
    "tests.support.brisque_weights",
    "tests.support.scheduling",
    "pytester",
]  # the Label Studio server, the BRISQUE weights, the markers and xdist's groups, pytester (test_scheduling.py)

# Before anything imports Prefect (it reads its settings once, at import): the CLI's settings, so that a flow a test
# runs here, or in a child process, waits for its temporary API as a user's command does; and in this process that
# wait scales with the machine's load and ends at once if the server dies (tests/support/prefect_startup.py).
apply_prefect_defaults()
prefect_startup.install()
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")

SMALL_COUNTRIES = ["USA", "UK", "Spain", "Japan", "Kenya"]  # 4 language groups: en, es, ja, sw
SMALL_CONCEPTS = ["train", "food", "school"]


@pytest.fixture(autouse=True)
def isolated_prefect_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "prefect-home"
    home.mkdir()
    monkeypatch.setenv("PREFECT_HOME", str(home))
    monkeypatch.setenv("PREFECT_RESULTS_LOCAL_STORAGE_PATH", str(home / "storage"))
    return home


@pytest.fixture(autouse=True)
def isolated_datasets_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """datasets caches a local folder by its name and config, not its content: two releases named 0.0.1 in
    different folders would share one cache entry. Each test gets its own cache."""
    import datasets.config

    cache = tmp_path / "hf-datasets-cache"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache))
    return cache


@pytest.fixture
def workspace_root(tmp_path: Path) -> Path:
    return tmp_path / "workspace"


@pytest.fixture
def release_root(tmp_path: Path) -> Path:
    return tmp_path / "releases"


@pytest.fixture
def small_demo_config(workspace_root: Path, release_root: Path):  # -> Build3XCMConfig
    """A demo build small enough for unit tests: 3 concepts x 5 countries, 2 images per query."""
    from flows.xcm.config import Build3XCMConfig

    return Build3XCMConfig.demo(
        workspace_root=str(workspace_root),
        countries=SMALL_COUNTRIES,
        concepts={"include": SMALL_CONCEPTS},
        demo_corpus={"countries": SMALL_COUNTRIES, "concepts": SMALL_CONCEPTS, "images_per_query": 2},
        release={"root": str(release_root), "version": "0.0.1"},
    )


@pytest.fixture(scope="session")
def small_releases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A small 3XCM demo release and a small MixCuBe one (2 cultures x 2 categories x 1 original), both 0.0.1 in one
    release root, built once per test run (once for all xdist workers): tests read them, and copy them before changing
    anything."""
    from flows.mixcube.build import build_locally as build_mixcube
    from flows.mixcube.config import BuildMixCubeConfig
    from flows.xcm.build import build_locally as build_3xcm
    from flows.xcm.config import Build3XCMConfig

    def build(root: Path) -> dict[str, str]:
        three = Build3XCMConfig.demo(
            workspace_root=str(root / "ws3"),
            countries=SMALL_COUNTRIES,
            concepts={"include": SMALL_CONCEPTS},
            demo_corpus={"countries": SMALL_COUNTRIES, "concepts": SMALL_CONCEPTS, "images_per_query": 2},
            release={"root": str(root / "rel"), "version": "0.0.1"},
        )
        mix = BuildMixCubeConfig.demo(
            workspace_root=str(root / "wsm"),
            originals={"per_cell": 1, "cultures": ["South Korea", "UK"], "categories": ["Food", "Clothes"]},
            release={"root": str(root / "rel"), "version": "0.0.1"},
            shard_size=4,
        )
        return {"3xcm": build_3xcm(three).release_path, "mixcube": build_mixcube(mix).release_path}

    return {name: Path(path) for name, path in built_once(tmp_path_factory, "small-releases", build).items()}


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One Prefect test server per session (about 10 s to start on an idle machine, the CLI's timeout times the load
    factor on a busy one); its database lives in a temp folder."""
    os.environ["PREFECT_HOME"] = str(tmp_path_factory.mktemp("prefect-session-home"))
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=EPHEMERAL_STARTUP_TIMEOUT_S):
        yield


@pytest.fixture
def prefect(prefect_server: None, isolated_prefect_home: Path) -> Iterator[Path]:
    """Per-test Prefect settings on the shared server: this test's own PREFECT_HOME and result storage."""
    from prefect.settings import PREFECT_HOME, PREFECT_RESULTS_LOCAL_STORAGE_PATH, temporary_settings

    with temporary_settings(
        {PREFECT_HOME: isolated_prefect_home, PREFECT_RESULTS_LOCAL_STORAGE_PATH: isolated_prefect_home / "storage"}
    ):
        yield isolated_prefect_home
