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

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from data.publish.card import markdown_table
from data.text_safety import markdown_text
from evaluation.leaderboard.published_baselines import published_rows
from evaluation.results.folder import (
    METRICS,
    MetricsReadError,
    headline_names,
    headline_value,
    read_metrics,
    tasks_of,
)
from evaluation.xcm.metrics import PAPER_SYMBOL

Kind = Literal["ours", "demo", "published"]
#: A table that a result folder may hold beside metrics.json is a few kB; a bigger one is not ours.
MAX_TABLE_BYTES = 64 << 20
ACCURACY_TABLE = "accuracy.parquet"
SWAP_DROPS_TABLE = "swap_drops.parquet"
#: The whole-pool retrieval figures shown per query language (evaluation/xcm/retrieval.py's names).
RETRIEVAL_BY_LANGUAGE = ("precision@5", "diversity@5_country", "diversity@5_region", "mrr", "ndcg@5", "ravenea.mrr")
OVERALL = "all"


class LeaderboardError(ValueError):
    """Results that cannot share a page (another benchmark or release), or a page that may not be written."""


@dataclass(frozen=True)
class Cell:
    value: float | None
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class Result:
    """One result folder: its metrics.json (checked by `read_metrics`) and its breakdowns, by table key."""

    folder: Path
    metrics: dict[str, Any]
    breakdowns: dict[str, dict[str, Cell]]

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


@dataclass(frozen=True)
class _Spec:
    key: str
    task: str
    title: str
    note: str
    rank_by: str | None = None
    headline: bool = False


def _specs(benchmark: str) -> list[_Spec]:
    """Every table of a benchmark, in page order: each task's headline, then its breakdowns."""
    if benchmark == "3xcm":
        per_language = "per query language ('all': every query)"
        specs = [
            _Spec(
                "triplet",
                "triplet",
                "RQ2: who wins the triplet (3XCM §3.2.2, Table 2)",
                "M_k: the share of queries whose candidate k scores highest (Eq. 3); SP = M_lb / M_cr (Eq. 4). "
                "M_cr higher is better; M_lb, M_ti and SP lower.",
                rank_by="M_cr",
                headline=True,
            ),
            _Spec(
                "rq3",
                "triplet",
                "RQ3: the six M_k with a cultural descriptor (3XCM §3.2.3, Table 3)",
                "Queries '{concept} of {country}': correct, object-relevant language-biased, object-relevant, "
                "cultural-descriptor-relevant, language-biased, totally irrelevant.",
            ),
        ]
        specs += [
            _Spec(f"rq2.M_{s}", "triplet", f"RQ2 M_{s} {per_language}", "Table 2's figure (Fig. 5 per country).")
            for s in PAPER_SYMBOL["rq2"].values()
        ]
        specs.append(_Spec("rq2.SP", "triplet", f"RQ2 SP {per_language}", "SP = M_lb / M_cr per language (Eq. 4)."))
        specs += [
            _Spec(f"rq3.M_{s}", "triplet", f"RQ3 M_{s} {per_language}", "Table 3's figure (Fig. 7 per country).")
            for s in PAPER_SYMBOL["rq3"].values()
        ]
        specs.append(
            _Spec(
                "retrieval",
                "retrieval",
                "Retrieval over the whole pool (GlobalRG §3.2, RAVENEA §3.1)",
                "precision@k and diversity@k as GlobalRG's; *_en over English queries only (GlobalRG's Table 3 "
                "row); mrr and ndcg@5 as trec_eval's; ravenea.* as RAVENEA's gdeval.py scores them.",
                headline=True,
            )
        )
        specs += [
            _Spec(f"retrieval.{m}", "retrieval", f"Retrieval {m} {per_language}", "Over the whole pool, per language.")
            for m in RETRIEVAL_BY_LANGUAGE
        ]
        return specs
    return [
        _Spec(
            "questions",
            "questions",
            "Country and Cultural Marker Identification (MixCuBe §3, App. B.2-B.3)",
            "accuracy: App. A.5's answer rule over every image; marker_accuracy: the judge's verdicts on Food; "
            "accuracy_with_our_aliases: ours, with our aliases accepted too.",
            rank_by="accuracy",
            headline=True,
        ),
        _Spec(
            "original_vs_synthesized",
            "questions",
            "Originals against their synthesized swaps (MixCuBe §3, Fig. 3)",
            "drop = accuracy on the originals - accuracy on the synthesized images (positive: the swap lost).",
        ),
        _Spec("accuracy_by_ethnicity", "questions", "Accuracy per ethnicity (Fig. 3-4, App. D)", "Every country."),
        _Spec(
            "drop_by_ethnicity",
            "questions",
            "Drop from the original to each swap ethnicity (Fig. 4's columns, every country pooled)",
            "Accuracy on the originals - accuracy on that ethnicity's swaps.",
        ),
        _Spec(
            "accuracy_by_country",
            "questions",
            "Accuracy per country (§3: low- and high-resource cultures)",
            "Originals and swaps.",
        ),
        _Spec(
            "drop_by_country",
            "questions",
            "Drop from the originals to the swaps per country (Fig. 3-4's rows)",
            f"Counted from each result's {ACCURACY_TABLE}: a country's originals - its synthesized images.",
        ),
        _Spec("accuracy_by_category", "questions", "Accuracy per category", "Food, Festival, Clothes."),
        _Spec(
            "marker_accuracy_by_ethnicity",
            "questions",
            "Cultural Marker Identification accuracy per ethnicity (Food; Fig. 5, Fig. 8a)",
            "The judge's verdicts (App. B.3).",
        ),
        _Spec(
            "audit",
            "audit",
            "Multilingual CLIP bias audit (§3.5-3.6, App. A)",
            "MaxSkew per prompt set and the harm rates over the quintets.",
            headline=True,
        ),
    ]


# -- reading --------------------------------------------------------------------------------------------------------
class _Strict(BaseModel):
    """What we wrote, no less: numbers are numbers (finite, never text or true/false); unknown fields are ignored."""

    model_config = ConfigDict(strict=True, allow_inf_nan=False, extra="ignore", frozen=True)


class _Estimate(_Strict):
    value: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None


class _WinRates(_Strict):
    group: str
    rates: dict[str, _Estimate]
    sp: _Estimate | None = None


class _Report(_Strict):
    overall: _WinRates
    by_language: list[_WinRates] = []


class _RetrievalGroup(_Strict):
    metrics: dict[str, _Estimate]


class _Retrieval(_Strict):
    overall: _RetrievalGroup
    by_language: dict[str, _RetrievalGroup] = {}


class _XcmSections(_Strict):
    rq2: _Report | None = None
    rq3: _Report | None = None
    retrieval: _Retrieval | None = None


class _MixCubeSections(_Strict):
    accuracy_original: float | None = None
    accuracy_synthesized: float | None = None
    drop_original_minus_synthesized: float | None = None
    accuracy_by_ethnicity: dict[str, float | None] = {}
    accuracy_by_country: dict[str, float | None] = {}
    accuracy_by_category: dict[str, float | None] = {}
    marker_accuracy_by_ethnicity: dict[str, float | None] = {}


def _field(loc: Sequence[int | str]) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".")


_S = TypeVar("_S", bound=_Strict)


def _sections(path: Path, model: type[_S], document: dict[str, Any]) -> _S:
    try:
        return model.model_validate(document)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise MetricsReadError(f"{path}: field {_field(error['loc'])!r}: {error['msg']}") from None


def _cell(estimate: _Estimate | None) -> Cell:
    return Cell(None) if estimate is None else Cell(estimate.value, estimate.ci_low, estimate.ci_high)


def _xcm_breakdowns(sections: _XcmSections) -> dict[str, dict[str, Cell]]:
    out: dict[str, dict[str, Cell]] = {}
    for task, report in (("rq2", sections.rq2), ("rq3", sections.rq3)):
        if report is None:
            continue
        groups = [(OVERALL, report.overall), *((g.group, g) for g in report.by_language)]
        for category, symbol in PAPER_SYMBOL[task].items():
            out[f"{task}.M_{symbol}"] = {name: _cell(g.rates.get(category)) for name, g in groups}
        if task == "rq2":
            out["rq2.SP"] = {name: _cell(g.sp) for name, g in groups}
        else:
            out["rq3"] = {f"M_{s}": _cell(report.overall.rates.get(c)) for c, s in PAPER_SYMBOL["rq3"].items()}
    if sections.retrieval is not None:
        pool = [(OVERALL, sections.retrieval.overall), *sections.retrieval.by_language.items()]
        for metric in RETRIEVAL_BY_LANGUAGE:
            out[f"retrieval.{metric}"] = {name: _cell(g.metrics.get(metric)) for name, g in pool}
    return out


def _difference(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _read_table(path: Path, columns: dict[str, str]) -> list[dict[str, Any]]:
    """The named columns of a result's parquet table (`columns`: name -> "string" | "integer"), checked."""
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
    check = {"string": pa.types.is_string, "integer": pa.types.is_integer}
    for name, kind in columns.items():
        column = table.column(name)
        if not check[kind](column.type) or column.null_count:
            raise MetricsReadError(f"{path}: column {name!r} must be {kind} without nulls, not {column.type}")
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows


def _drop_by_country(folder: Path) -> tuple[str, dict[str, Cell]] | None:
    """(the original label, each country's originals' accuracy - its swaps'), pooled over categories as
    `drop_original_minus_synthesized` pools everything; None for a result without the two tables."""
    accuracy_path, drops_path = folder / ACCURACY_TABLE, folder / SWAP_DROPS_TABLE
    if not (os.path.lexists(accuracy_path) and os.path.lexists(drops_path)):
        return None
    counts = {"country": "string", "ethnicity": "string", "answered": "integer", "correct": "integer"}
    rows = _read_table(accuracy_path, counts)
    swaps = {r["ethnicity"] for r in _read_table(drops_path, {"ethnicity": "string"})}
    originals = sorted({r["ethnicity"] for r in rows} - swaps)
    if len(originals) != 1:
        raise MetricsReadError(
            f"{accuracy_path}: column 'ethnicity' must hold exactly one label that {drops_path.name} has no swap of "
            f"(the originals), not {originals[:5]}"
        )
    tallies: dict[str, list[int]] = {}  # country -> [original correct, answered, swap correct, answered]
    for r in rows:
        tally = tallies.setdefault(r["country"], [0, 0, 0, 0])
        at = 0 if r["ethnicity"] == originals[0] else 2
        tally[at] += r["correct"]
        tally[at + 1] += r["answered"]

    def rate(correct: int, answered: int) -> float | None:
        return correct / answered if answered else None

    drops = {country: Cell(_difference(rate(*t[:2]), rate(*t[2:]))) for country, t in tallies.items()}
    return originals[0], drops


def _mixcube_breakdowns(folder: Path, sections: _MixCubeSections) -> dict[str, dict[str, Cell]]:
    out = {
        "original_vs_synthesized": {
            "original": Cell(sections.accuracy_original),
            "synthesized": Cell(sections.accuracy_synthesized),
            "drop": Cell(sections.drop_original_minus_synthesized),
        },
        "accuracy_by_ethnicity": {k: Cell(v) for k, v in sections.accuracy_by_ethnicity.items()},
        "accuracy_by_country": {k: Cell(v) for k, v in sections.accuracy_by_country.items()},
        "accuracy_by_category": {k: Cell(v) for k, v in sections.accuracy_by_category.items()},
        "marker_accuracy_by_ethnicity": {k: Cell(v) for k, v in sections.marker_accuracy_by_ethnicity.items()},
    }
    counted = _drop_by_country(folder)
    if counted is not None:
        original, out["drop_by_country"] = counted
        base = sections.accuracy_by_ethnicity.get(original)
        out["drop_by_ethnicity"] = {
            e: Cell(_difference(base, v)) for e, v in sections.accuracy_by_ethnicity.items() if e != original
        }
    return out


def read_result(folder: str | Path) -> Result:
    """A result folder's metrics.json and breakdowns (MetricsReadError names a file and field it cannot read)."""
    folder = Path(folder)
    metrics = read_metrics(folder)
    path = folder / METRICS
    benchmark = metrics["benchmark"]
    breakdowns: dict[str, dict[str, Cell]] = {}
    if benchmark == "3xcm":
        breakdowns = _xcm_breakdowns(_sections(path, _XcmSections, metrics))
    elif "questions" in tasks_of(benchmark, metrics):
        breakdowns = _mixcube_breakdowns(folder, _sections(path, _MixCubeSections, metrics))
    return Result(folder, metrics, {k: v for k, v in breakdowns.items() if v})


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
    """The benchmark's tables that any result fills, rows in the order given; with `published`, the papers' rows
    after ours, in the columns ours have."""
    if not results:
        return []
    benchmark = results[0].benchmark
    papers = published_rows(benchmark) if published else []
    out = []
    for spec in _specs(benchmark):
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
        rows += [
            Row(
                p.model,
                "published",
                {c: Cell(p.values.get(c)) for c in columns},
                source=p.source,
                cited=p.cited,
                full_name=p.full_name,
            )
            for p in papers
            if p.table == spec.key
        ]
        out.append(Table(spec.key, spec.title, spec.note, columns, rows, spec.rank_by))
    return out


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
