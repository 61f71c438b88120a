"""A stand-in for a build in a shard worker (`flows/engine/local_processes.py`), in a module that imports nothing
heavy: a worker unpickles it by reference, so its start stays a bare interpreter's."""

from __future__ import annotations

import os
from pathlib import Path


class RecordingBuild:
    """Records which process wrote each shard; shard `bad` raises, shard `dies` ends its process."""

    def __init__(self, folder: Path, bad: int | None = None, dies: int | None = None) -> None:
        self.folder, self.bad, self.dies = folder, bad, dies

    def write_shard(self, stage: str, index: int) -> int:
        if index == self.bad:
            raise ValueError(f"{stage} shard {index} is unreadable")
        if index == self.dies:
            os._exit(3)
        (self.folder / f"{stage}-{index}").write_text(str(os.getpid()))
        return index
