"""The leaderboard's tables: result folders of one benchmark read back (`read_results`) into one table per task's
headline and one per breakdown the benchmark's papers report (`tables`), with the papers' published rows beside
ours where asked. `evaluate compare` prints the breakdowns (`breakdown_markdown`); `evaluation/leaderboard/page.py`
draws the page.

Each breakdown is read from the result's `metrics.json`:
* 3XCM: M_k and SP per query language (RQ2, Table 2's figures per language as Fig. 5 draws them), RQ3's six M_k
  overall (Table 3) and per query language, and the whole-pool retrieval figures per query language.
* MixCuBe: accuracy on the originals and on the synthesized images and the drop between them (§3, Fig. 3), accuracy
  per ethnicity and the drop from the original to each swap ethnicity (Fig. 4's axis), accuracy per country and per
  category, marker accuracy per ethnicity (Fig. 5). The drop per country needs each country's originals apart, which
  metrics.json does not hold: it is counted from `accuracy.parquet` (country x category x ethnicity), the original
  label being the one ethnicity `swap_drops.parquet` lists no swap of.

Everything read is checked (strict types, finite numbers); a field that is not what we write is one error naming the
file and the field (`MetricsReadError`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from data.publish.card import markdown_table
from data.text_safety import markdown_text
from evaluation import registry
from evaluation.leaderboard.paired import PairedTest, paired_tests
from evaluation.leaderboard.published_baselines import PublishedRow
from evaluation.leaderboard.spec import Cell, LeaderboardSpec, Outcomes, TableSpec
from evaluation.results.folder import (
    METRICS,
    headline_names,
    headline_value,
    read_metrics,
    tasks_of,
)
from evaluation.results.names import display_name

Kind = Literal["ours", "demo", "published"]


class LeaderboardError(ValueError):
    """Results that cannot share a page (another benchmark or release), or a page that may not be written."""


@dataclass(frozen=True)
class Result:
    """One result folder: its metrics.json (checked by `read_metrics`) and its breakdowns, by table key."""

    folder: Path
    metrics: dict[str, Any]
    breakdowns: dict[str, dict[str, Cell]]
    outcomes: dict[str, Outcomes] = field(default_factory=dict)  # per-query outcomes, by table key (paired tests)

    @property
    def benchmark(self) -> str:
        return str(self.metrics["benchmark"])

    @property
    def model_id(self) -> str:
        return str(self.metrics["model"]["model_id"])

    @property
    def release(self) -> tuple[str, str, str]:
        """(name, version, manifest sha256)."""
        release = self.metrics["release"]
        name = release.get("name")
        return (name if isinstance(name, str) else self.benchmark, release["version"], release["manifest_sha256"])

    @property
    def display_name(self) -> str:
        """The model's short name (`evaluation/results/names.py`); the full id stays on hover and in the JSON."""
        return display_name(self.metrics["model"])

    @property
    def demo(self) -> bool:
        return self.metrics.get("meaningless_demo_model") is True

    @property
    def tasks(self) -> list[str]:
        return tasks_of(self.benchmark, self.metrics)

    def headline(self, task: str) -> dict[str, Cell]:
        ci = self.metrics.get("ci95", {})
        cells = {}
        for name in headline_names(self.benchmark, {**self.metrics, "tasks": [task]}):
            low, high = ci.get(name, [None, None])
            cells[name] = Cell(headline_value(self.metrics, name), low, high)
        return cells


@dataclass(frozen=True)
class Row:
    label: str  # our model id, or the paper's alias
    kind: Kind
    cells: dict[str, Cell]
    result: int | None = None  # the result it comes from (its card, its figures), by position
    release: str = ""  # ours: the release version
    source: str = ""  # published: the paper and table
    cited: str = ""  # published: the table alone
    full_name: str = ""  # published: the model the alias names


@dataclass(frozen=True)
class Table:
    key: str
    title: str
    note: str
    columns: list[str]
    rows: list[Row]
    rank_by: str | None = None  # the paper's main figure (higher is better): the page lists rows by it first
    #: Published rows measured on another release than the page's: shown apart, never ranked among `rows`.
    elsewhere: list[Row] = field(default_factory=list)
    #: The paired tests of `rank_by` between every two results of the page's release (`paired.py`).
    tests: list[PairedTest] = field(default_factory=list)
    #: How the rows' intervals were made (method, resamples), from each result's metrics.
    intervals: str = ""


# -- reading --------------------------------------------------------------------------------------------------------
def _leaderboard(benchmark: str) -> LeaderboardSpec | None:
    ref = registry.get(benchmark).leaderboard
    return None if ref is None else ref.load()


def _table_specs(benchmark: str) -> list[TableSpec]:
    """Every table of a benchmark, in page order: each task's headline, then its breakdowns; a benchmark that
    names no leaderboard tables gets one headline table per task."""
    spec = _leaderboard(benchmark)
    if spec is not None:
        return spec.tables
    return [TableSpec(t.name, t.name, t.name, "", headline=True) for t in registry.get(benchmark).tasks]


def published_rows(benchmark: str) -> list[PublishedRow]:
    """The papers' own rows of the benchmark (none when its registry entry names none)."""
    ref = registry.get(benchmark).published
    return [] if ref is None else list(ref.load()())


def published_notice(benchmark: str) -> str:
    """What the page says of the benchmark's published rows (empty when it has none)."""
    ref = registry.get(benchmark).published_notice
    return "" if ref is None else str(ref.load())


def read_result(folder: str | Path) -> Result:
    """A result folder's metrics.json and breakdowns (MetricsReadError names a file and field it cannot read)."""
    folder = Path(folder)
    metrics = read_metrics(folder)
    path = folder / METRICS
    benchmark = metrics["benchmark"]
    spec = _leaderboard(benchmark)
    read = spec.read_breakdowns if spec is not None else None
    breakdowns = read(folder, path, metrics) if read is not None else {}
    tasks = tasks_of(benchmark, metrics)
    readers = spec.read_outcomes if spec is not None else {}
    read_outcomes = {t.key: readers[t.key] for t in _table_specs(benchmark) if t.key in readers and t.task in tasks}
    outcomes = {key: found for key, read_one in read_outcomes.items() if (found := read_one(folder)) is not None}
    return Result(folder, metrics, {k: v for k, v in breakdowns.items() if v}, outcomes)


def read_results(folders: Iterable[str | Path]) -> list[Result]:
    """Result folders of one benchmark, in the order given."""
    results = [read_result(f) for f in folders]
    benchmarks = sorted({r.benchmark for r in results})
    if len(benchmarks) > 1:
        raise LeaderboardError(f"results of different benchmarks cannot share a leaderboard: {benchmarks}")
    return results


# -- tables ---------------------------------------------------------------------------------------------------------
def _columns(rows: Iterable[Row]) -> list[str]:
    return list(dict.fromkeys(column for row in rows for column in row.cells))


def tables(results: Sequence[Result], *, published: bool = False, breakdowns_only: bool = False) -> list[Table]:
    """The benchmark's tables that any result fills, rows in the order given; with `published`, the papers' rows in
    the columns ours have: after ours where they were measured on the results' release (by manifest sha256), apart
    from them (`Table.elsewhere`, never ranked) where they were not."""
    if not results:
        return []
    benchmark = results[0].benchmark
    papers = published_rows(benchmark) if published else []
    # The release the page ranks on: that of the results (the demo model's rows are a reference from any release).
    here = {r.release[2] for r in results if not r.demo} or {r.release[2] for r in results}
    out = []
    for spec in _table_specs(benchmark):
        if breakdowns_only and spec.headline:
            continue
        rows = []
        for position, result in enumerate(results):
            if spec.task not in result.tasks:
                continue
            cells = result.headline(spec.task) if spec.headline else result.breakdowns.get(spec.key)
            if cells:
                kind: Kind = "demo" if result.demo else "ours"
                rows.append(Row(result.model_id, kind, cells, position, release=result.release[1]))
        if not rows:
            continue
        columns = _columns(rows)
        measured: dict[bool, list[Row]] = {True: [], False: []}
        for p in papers:
            if p.table == spec.key:
                row = Row(
                    p.model,
                    "published",
                    {c: Cell(p.values.get(c)) for c in columns},
                    source=p.source,
                    cited=p.cited,
                    full_name=p.full_name,
                )
                measured[p.measured_on is not None and p.measured_on in here].append(row)
        rows += measured[True]
        # pairs within one release only: the same queries
        by_release: dict[str, list[tuple[int, Outcomes]]] = {}
        for r in _positions(rows):
            if spec.key in results[r].outcomes:
                by_release.setdefault(results[r].release[2], []).append((r, results[r].outcomes[spec.key]))
        tests = paired_tests(list(by_release.values()))
        intervals = _intervals(benchmark, [results[r] for r in _positions(rows)])
        table = Table(spec.key, spec.title, spec.note, columns, rows, spec.rank_by, measured[False], tests, intervals)
        out.append(table)
    return out


def _positions(rows: Iterable[Row]) -> list[int]:
    return [row.result for row in rows if row.result is not None]


def _intervals(benchmark: str, results: Sequence[Result]) -> str:
    """How the results' intervals were made, each way once (results run with other settings say so)."""
    spec = _leaderboard(benchmark)
    if spec is None or spec.intervals is None:
        return ""
    return "; ".join(dict.fromkeys(spec.intervals(r.metrics) for r in results))


def number(value: float | None) -> str:
    """A figure as the cards print it: 3 places, a dash for none."""
    return "–" if value is None else f"{value:.3f}"


def breakdown_markdown(results: Sequence[Result]) -> str:
    """Each breakdown of the results as a Markdown section (title, then one row per result), for the terminal; every
    label read from a result folder is literal text (`markdown_text`)."""
    sections = []
    for table in tables(results, breakdowns_only=True):
        rows = [
            {
                "model": markdown_text(f"{row.label} @ {row.release}"),
                **{markdown_text(c): number(row.cells.get(c, Cell(None)).value) for c in table.columns},
            }
            for row in table.rows
        ]
        sections.append(f"## {table.title}\n\n{markdown_table(rows)}")
    return "\n".join(sections)


@dataclass(frozen=True)
class PageRelease:
    name: str
    version: str
    manifest_sha256: str
    others: list[str] = field(default_factory=list)  # releases of the demo reference rows, when another


def page_release(results: Sequence[Result]) -> PageRelease:
    """The one release a page shows: that of every result but the random demo model's, whose rows are a reference
    and may come from another release of the benchmark (the page names it); LeaderboardError otherwise."""
    benchmarks = sorted({r.benchmark for r in results})
    if len(benchmarks) != 1:
        raise LeaderboardError(f"one benchmark per page, not {benchmarks}")
    ranked = [r for r in results if not r.demo] or list(results)
    releases = list(dict.fromkeys(r.release for r in ranked))
    if len(releases) > 1:
        named = "; ".join(f"{n} {v} (manifest sha256 {s[:12]})" for n, v, s in releases)
        raise LeaderboardError(
            f"one release per page: the results are of {len(releases)} releases ({named}); write one page per release"
        )
    name, version, sha = releases[0]
    others = sorted({r.release[1] for r in results if r.release != releases[0]})
    return PageRelease(name, version, sha, others)
