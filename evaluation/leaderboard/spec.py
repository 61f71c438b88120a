"""What a benchmark hands the leaderboard (`LeaderboardSpec`, named by its registry entry): the page's tables in
order, and how one result folder's breakdowns are read; with the pieces every benchmark's reading shares (`Cell`,
the strict models of what we write, a result's parquet table read and checked)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from evaluation.results.folder import MetricsReadError

#: A table that a result folder may hold beside metrics.json is a few kB; a bigger one is not ours.
MAX_TABLE_BYTES = 64 << 20
#: A breakdown's row over every query (beside one per group).
OVERALL = "all"


@dataclass(frozen=True)
class Cell:
    value: float | None
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class TableSpec:
    """One table of a benchmark's page: a task's headline (`headline`) or one of its breakdowns, by key."""

    key: str
    task: str
    title: str
    note: str
    rank_by: str | None = None
    headline: bool = False


#: A result folder's breakdowns: cells by table key, then by group.
Breakdowns = dict[str, dict[str, "Cell"]]
#: One result's per-query outcome of a table's main figure (True: the query counts for it), by the query's key
#: (3XCM: the benchmark row's index; MixCuBe: the image's sample_id); a query without an outcome is absent.
Outcomes = dict[str, bool]


@dataclass(frozen=True)
class LeaderboardSpec:
    tables: list[TableSpec]
    #: (the result folder, its metrics.json path, the metrics) -> its breakdowns (none: headline tables only).
    read_breakdowns: Callable[[Path, Path, dict[str, Any]], Breakdowns] | None = None
    #: Per table key whose `rank_by` is a share of queries: (the result folder) -> the per-query outcomes behind it,
    #: for the paired tests between models (`evaluation/leaderboard/paired.py`); None for a result without its
    #: per-query table (it is then paired with no other).
    read_outcomes: dict[str, Callable[[Path], Outcomes | None]] = field(default_factory=dict)
    #: (a result's metrics) -> how its intervals were made (method, resamples), for the page's notes.
    intervals: Callable[[dict[str, Any]], str] | None = None


# -- reading ---------------------------------------------------------------------------------------------------------
class Strict(BaseModel):
    """What we wrote, no less: numbers are numbers (finite, never text or true/false); unknown fields are ignored."""

    model_config = ConfigDict(strict=True, allow_inf_nan=False, extra="ignore", frozen=True)


class Estimate(Strict):
    value: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None


def _field(loc: Sequence[int | str]) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".")


_S = TypeVar("_S", bound=Strict)


def sections(path: Path, model: type[_S], document: dict[str, Any]) -> _S:
    try:
        return model.model_validate(document)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise MetricsReadError(f"{path}: field {_field(error['loc'])!r}: {error['msg']}") from None


def cell(estimate: Estimate | None) -> Cell:
    return Cell(None) if estimate is None else Cell(estimate.value, estimate.ci_low, estimate.ci_high)


def difference(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def read_table(path: Path, columns: dict[str, str]) -> list[dict[str, Any]]:
    """The named columns of a result's parquet table (`columns`: name -> "string" | "integer" | "boolean", a
    trailing "?" allowing nulls), checked."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if path.is_symlink() or not path.is_file():
        raise MetricsReadError(f"{path}: not a regular file")
    if path.stat().st_size > MAX_TABLE_BYTES:
        raise MetricsReadError(f"{path}: larger than {MAX_TABLE_BYTES >> 20} MB; not a table we wrote")
    try:
        table = pq.read_table(path, columns=list(columns))
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise MetricsReadError(f"{path}: not a table we wrote ({' '.join(str(exc).split())[:200]})") from None
    check = {"string": pa.types.is_string, "integer": pa.types.is_integer, "boolean": pa.types.is_boolean}
    for name, wanted in columns.items():
        column, kind, nullable = table.column(name), wanted.rstrip("?"), wanted.endswith("?")
        typed = check[kind](column.type) or (nullable and pa.types.is_null(column.type))
        if not typed or (column.null_count and not nullable):
            nulls = "" if nullable else " without nulls"
            raise MetricsReadError(f"{path}: column {name!r} must be {kind}{nulls}, not {column.type}")
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows
