"""The stage contract shared by every stage: backend registries, optional-dependency checks and stats.

A stage is a small function with a typed pydantic config. Its backend is chosen by the config's `backend` field
through a `Registry`, never by `if name == ...` spread around the code (design brief, habit 2).
"""

from __future__ import annotations

import importlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, Generic, Protocol, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from data.schemas import STATUS_OK
from data.workspace import StageStats

T = TypeVar("T")


class BackendConfig(Protocol):
    backend: str


class MissingExtraError(ImportError):
    """A production backend needs an optional dependency that is not installed."""


def require(module: str, extra: str) -> ModuleType:
    """Import an optional dependency, or fail with the extra that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"this backend needs the '{module}' package: install it with `pip install 'culturebench[{extra}]'`"
        ) from exc


def error_text(exc: BaseException, limit: int = 300) -> str:
    """`ErrorClass: detail`, cut to `limit` characters: how a failed item names its reason in a row."""
    return f"{type(exc).__name__}: {exc}"[:limit]


def required_file(value: str, label: str, field: str, kind: str, hint: str) -> Path:
    """A model or weights file named by a config: missing, it is an error naming the field, never a silent download
    or random weights."""
    path = Path(value).expanduser()
    if not path.is_file():
        what = f"is a folder, not {kind}" if path.is_dir() else "does not exist"
        raise FileNotFoundError(f"{label} {value!r} ({field}) {what}. {hint}")
    return path


class Registry(Generic[T]):
    """Maps a stage's backend names to factories that build the backend from its config."""

    def __init__(self, stage: str) -> None:
        self.stage = stage
        self._factories: dict[str, Callable[[Any], T]] = {}

    def register(self, backend: str) -> Callable[[Callable[[Any], T]], Callable[[Any], T]]:
        def decorate(factory: Callable[[Any], T]) -> Callable[[Any], T]:
            if backend in self._factories:
                raise ValueError(f"{self.stage}: backend {backend!r} registered twice")
            self._factories[backend] = factory
            return factory

        return decorate

    @property
    def backends(self) -> list[str]:
        return sorted(self._factories)

    def build(self, config: BackendConfig) -> T:
        try:
            factory = self._factories[config.backend]
        except KeyError:
            raise ValueError(
                f"{self.stage}: unknown backend {config.backend!r}; available: {', '.join(self.backends)}"
            ) from None
        return factory(config)


def stats_from_table(stage: str, table: pa.Table, rows_in: int | None = None, **extra: Any) -> StageStats:
    """Count kept and dropped rows of a collection table (status/error), a decision table (keep/reason), or a
    derived table whose failed rows carry an error (`Class: detail`, counted by class)."""
    names = table.column_names
    if "status" in names:
        kept_mask = pc.equal(table["status"], STATUS_OK)
        reasons = table.filter(pc.invert(kept_mask))["error"].to_pylist()
    elif "error" in names:
        kept_mask = pc.is_null(table["error"])
        reasons = [e.split(":", 1)[0] for e in table.filter(pc.invert(kept_mask))["error"].to_pylist()]
    elif "keep" in names:
        kept_mask = table["keep"]
        reasons = table.filter(pc.invert(kept_mask))["reason"].to_pylist()
    else:
        kept_mask, reasons = None, []
    kept = table.num_rows if kept_mask is None else pc.sum(kept_mask.cast(pa.int64())).as_py() or 0
    by_reason = Counter(reason or "unspecified" for reason in reasons)
    return StageStats(
        stage=stage,
        rows_in=table.num_rows if rows_in is None else rows_in,
        kept=kept,
        dropped=len(reasons),
        dropped_by_reason=dict(sorted(by_reason.items())),
        extra=extra,
    )
