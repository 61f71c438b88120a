"""What the CLI commands share: the console, progress bars and one-line OS errors."""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from rich.console import Console

if TYPE_CHECKING:  # rich.progress is imported when the bars are made
    from rich.progress import TaskID

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
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        )
        self.bar.__enter__()
        self.tasks: dict[str, TaskID] = {}
        return self

    def __call__(self, stage: str, done: int, total: int) -> None:
        if stage not in self.tasks:
            self.tasks[stage] = self.bar.add_task(stage, total=total)
        self.bar.update(self.tasks[stage], completed=done, total=total)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.bar.__exit__(exc_type, exc, traceback)


class InputFileError(ValueError):
    """A file given on the command line that cannot be used: one line naming it."""


def read_mapping(path: Path, what: str) -> dict[str, Any]:
    """A YAML (or JSON) file holding a mapping, for `what` (a config); InputFileError names the file and why."""
    import yaml

    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFileError(
            f"{path}: not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start}); save it as UTF-8"
        ) from None
    try:
        value = yaml.safe_load(text)  # YAML reads JSON too
    except (yaml.YAMLError, RecursionError) as exc:
        raise InputFileError(f"{path}: not valid YAML or JSON ({' '.join(str(exc).split())[:300]})") from None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputFileError(f"{path}: a YAML {type(value).__name__}, not a mapping of {what}")
    return value


def validation_line(exc: Any, source: str) -> str:
    """A pydantic ValidationError as `source: field: message` of its first error, and how many others there are."""
    errors = exc.errors()
    first = errors[0] if errors else {"loc": (), "msg": str(exc)}
    field = ".".join(str(part) for part in first["loc"])
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return " ".join(f"{source}: {field + ': ' if field else ''}{first['msg']}{more}".split())
