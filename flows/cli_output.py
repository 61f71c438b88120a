"""What the CLI commands share: the console, progress bars and one-line OS errors."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

console = Console(stderr=True)


def os_error_line(exc: OSError) -> str:
    """One line naming the file and what to do, for the OS errors a build can meet on its disks."""
    import errno

    where = exc.filename or "?"
    if exc.errno == errno.ENOSPC:
        return f"no space left on the device writing {where}: free some space and rerun (finished work is kept)"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"cannot write {where} ({exc.strerror}): make it writable, or pass --workspace-root / --release-root"
    return f"{where}: {exc.strerror or exc}"


class progress_bars:
    """A rich progress bar per long stage (items or shards, as the stage reports them)."""

    def __enter__(self) -> progress_bars:
        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        )
        self.bar.__enter__()
        self.tasks: dict[str, Any] = {}
        return self

    def __call__(self, stage: str, done: int, total: int) -> None:
        if stage not in self.tasks:
            self.tasks[stage] = self.bar.add_task(stage, total=total)
        self.bar.update(self.tasks[stage], completed=done, total=total)

    def __exit__(self, *exc: object) -> None:
        self.bar.__exit__(*exc)
