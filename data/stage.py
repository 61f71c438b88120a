"""The stage contract shared by every stage: backend configs, optional-dependency checks and stats.

A stage is a small function with a typed pydantic config. Its backend is chosen by the config's `backend` field:
each backend's config class builds its backend (`BackendConfig.build`), and a stage's discriminated union of those
classes is the one list of its backends, never `if name == ...` spread around the code.
"""

from __future__ import annotations

import importlib
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar, Generic, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict

from data.schemas import STATUS_OK
from data.stage_stats import StageStats

B = TypeVar("B", covariant=True)


class BackendConfig(BaseModel, Generic[B]):
    """The config of one backend of a stage; `B` is what it builds (the stage's backend protocol).

    A subclass narrows `backend` to its name (`backend: Literal["x"] = "x"`) and implements `build()`, importing
    heavy optional dependencies there (`require`), never at module import. The stage's config type is the
    discriminated union of its backend classes, `Annotated[XConfig | YConfig, Field(discriminator="backend")]`:
    that union is the one list of the stage's backends, and pydantic rejects any other name, listing the allowed
    ones. A section whose stage reads its settings itself (the review backends, the MixCuBe originals) builds no
    object: it derives from `BackendConfig[NoReturn]` and keeps the default `build()`, which raises.
    """

    model_config = ConfigDict(extra="forbid")

    #: Its work is this machine's CPU (files read and decoded): a large sharded stage may spread its shards over
    #: local worker processes (`flows/engine/local_processes.py`). Network backends keep False: their rate limits
    #: and politeness are per process.
    cpu_bound: ClassVar[bool] = False

    backend: str

    def build(self) -> B:
        """The backend this config describes; model files and devices are checked now, models load on first use."""
        raise NotImplementedError(f"{type(self).__name__} (backend {self.backend!r}) builds no backend object")


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


def required_file(value: str, label: str, field: str, kind: str, hint: str) -> Path:
    """A model or weights file named by a config: missing, it is an error naming the field, never a silent download
    or random weights."""
    path = Path(value).expanduser()
    if not path.is_file():
        what = f"is a folder, not {kind}" if path.is_dir() else "does not exist"
        raise FileNotFoundError(f"{label} {value!r} ({field}) {what}. {hint}")
    return path


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
