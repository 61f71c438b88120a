"""Prefect's temporary API servers in the test process wait through `tests.support.readiness`: the `prefect`
fixture's test harness, and the ephemeral API a flow starts when no PREFECT_API_URL is set. Installed by
conftest.py for the whole session.

Prefect's own wait (`SubprocessASGIServer.start`, prefect 3.8.8) polls /health for a fixed number of seconds and
never looks at its server's process, except for uvicorn's startup-failure exit code 3, on which it starts again on
another port, without end. So a server that crashes at import holds a test for the whole timeout, and a timeout long
enough for a busy machine would hold it for minutes. `patient_start` keeps Prefect's bookkeeping (port, process,
`running`, stop at exit), takes Prefect's timeout as the idle machine's base, and fails at once on a dead server.

The class's module costs 4-5 s to import, so it is patched when something first imports it, not before.
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from functools import partial
from types import ModuleType
from typing import Any

from tests.support.readiness import ServerExited, answers_200, wait_until_ready

MODULE = "prefect.server.api.server"
UVICORN_STARTUP_FAILURE = 3  # uvicorn's exit code when it cannot bind (or its app's start-up fails)
PORT_ATTEMPTS = 3


def install() -> None:
    """Patch Prefect's server class now if its module is imported, else the moment it is."""
    module = sys.modules.get(MODULE)
    if module is not None:
        _patch(module)
    elif not any(isinstance(finder, _PatchOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


def patient_start(self: Any, timeout: int | None = None) -> None:
    """`SubprocessASGIServer.start`: start the server once; wait for /api/health as `wait_until_ready` does."""
    if self.running:
        return
    from prefect.settings import PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS

    base_s = float(timeout or PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value())
    if self.port is None:
        self.port = self.find_available_port()
    self.running = True
    try:
        for attempt in range(1, PORT_ATTEMPTS + 1):
            self.server_process = self._run_uvicorn_command()
            healthy = partial(answers_200, f"{self.api_url}/health")
            try:
                what = f"Prefect's temporary API server on {self.address}"
                wait_until_ready(what, healthy, base_s, process=self.server_process)
                break
            except ServerExited as exc:
                if exc.returncode != UVICORN_STARTUP_FAILURE or attempt == PORT_ATTEMPTS:
                    raise
                self.port = self.find_available_port()  # the port was taken meanwhile: Prefect's own answer
    except BaseException:
        self.running = False
        if self.server_process is not None and self.server_process.poll() is None:
            self.server_process.kill()
            self.server_process.wait()
        raise
    atexit.register(self.stop)


def _patch(module: ModuleType) -> None:
    module.SubprocessASGIServer.start = patient_start


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds MODULE as the other finders do, and patches it once its code has run; then leaves sys.meta_path."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _PatchAfterExec(spec.loader)
        return spec


class _PatchAfterExec(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        _patch(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, ... as the file's own loader
        return getattr(self.inner, name)
