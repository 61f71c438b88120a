"""The session's Label Studio server: started once per test run (a fresh database migrates in ~25 s), stopped at the
end. Registered in conftest.py through `pytest_plugins`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.label_studio_server import RunningLabelStudio, start_label_studio


@pytest.fixture(scope="session")
def label_studio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningLabelStudio]:
    server = start_label_studio(tmp_path_factory.mktemp("label-studio"))
    try:
        yield server
    finally:
        server.stop()
