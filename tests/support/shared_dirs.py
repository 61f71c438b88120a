"""Folders built once per test run and read by many tests, also across pytest-xdist's worker processes.

Without xdist a session fixture builds once. With `-n N` each worker is a session of its own, so a session fixture
would build N times; `built_once` builds in the folder the workers share (the parent of each worker's base temp
folder), under a file lock, and the other workers wait for it and read the same folder. The tests only read what it
holds, and copy it before changing anything.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock


def run_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temp folder of this whole test run: the base temp folder, or its parent (shared by the workers) under
    xdist, where each worker's base temp folder is `<run>/popen-gwN`."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], Any]) -> Any:
    """`build(folder)` once per run in `<run>/shared-<name>/`; returns what it returned (JSON round-tripped, the
    same in every worker). A build that raised leaves no record: the next caller builds again (and fails the same)."""
    folder = run_root(tmp_path_factory) / f"shared-{name}"
    record = folder.with_name(folder.name + ".json")
    with FileLock(str(folder) + ".lock"):
        if not record.exists():
            if folder.exists():
                shutil.rmtree(folder)  # what a failed attempt left
            folder.mkdir(parents=True)
            record.write_text(json.dumps(build(folder)))
        return json.loads(record.read_text())
