"""3XCM on the leaderboard: its tables in page order (RQ2's headline, RQ3's six M_k, each M_k and SP per query
language, the whole-pool retrieval and its figures per language) and how a result's breakdowns are read from its
metrics.json (`LEADERBOARD`, named by the registry)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import Field

from evaluation.leaderboard.spec import (
    OVERALL,
    Breakdowns,
    Cell,
    Estimate,
    LeaderboardSpec,
    Outcomes,
    Strict,
    TableSpec,
    cell,
    read_table,
    sections,
)
from evaluation.results.folder import PER_QUERY
from evaluation.xcm.metrics import PAPER_SYMBOL

#: The whole-pool retrieval figures shown per query language (evaluation/xcm/retrieval.py's names).
RETRIEVAL_BY_LANGUAGE = ("precision@5", "diversity@5_country", "diversity@5_region", "mrr", "ndcg@5", "ravenea.mrr")


def _tables() -> list[TableSpec]:
    per_language = "per query language ('all': every query)"
    specs = [
        TableSpec(
            "triplet",
            "triplet",
            "RQ2: who wins the triplet (3XCM §3.2.2, Table 2)",
            "M_k: the share of queries whose candidate k scores highest (Eq. 3); SP = M_lb / M_cr (Eq. 4). "
            "M_cr higher is better; M_lb, M_ti and SP lower.",
            rank_by="M_cr",
            headline=True,
        ),
        TableSpec(
            "rq3",
            "triplet",
            "RQ3: the six M_k with a cultural descriptor (3XCM §3.2.3, Table 3)",
            "Queries '{concept} of {country}': correct, object-relevant language-biased, object-relevant, "
            "cultural-descriptor-relevant, language-biased, totally irrelevant.",
        ),
    ]
    specs += [
        TableSpec(f"rq2.M_{s}", "triplet", f"RQ2 M_{s} {per_language}", "Table 2's figure (Fig. 5 per country).")
        for s in PAPER_SYMBOL["rq2"].values()
    ]
    specs.append(TableSpec("rq2.SP", "triplet", f"RQ2 SP {per_language}", "SP = M_lb / M_cr per language (Eq. 4)."))
    per_country = "per query country ('all': every query)"
    specs += [
        TableSpec(f"rq2.country.M_{s}", "triplet", f"RQ2 M_{s} {per_country}", "Fig. 5's figure: per country.")
        for s in PAPER_SYMBOL["rq2"].values()
    ]
    specs.append(
        TableSpec("rq2.country.SP", "triplet", f"RQ2 SP {per_country}", "SP = M_lb / M_cr per country (Eq. 4).")
    )
    specs += [
        TableSpec(f"rq3.M_{s}", "triplet", f"RQ3 M_{s} {per_language}", "Table 3's figure (Fig. 7 per country).")
        for s in PAPER_SYMBOL["rq3"].values()
    ]
    specs += [
        TableSpec(f"rq3.country.M_{s}", "triplet", f"RQ3 M_{s} {per_country}", "Fig. 7's figure: per country.")
        for s in PAPER_SYMBOL["rq3"].values()
    ]
    specs.append(
        TableSpec(
            "retrieval",
            "retrieval",
            "Retrieval over the whole pool (GlobalRG §3.2, RAVENEA §3.1)",
            "precision@k and diversity@k as GlobalRG's; *_en over English queries only (GlobalRG's Table 3 "
            "row); mrr and ndcg@5 as trec_eval's; ravenea.* as RAVENEA's gdeval.py scores them.",
            headline=True,
        )
    )
    specs += [
        TableSpec(f"retrieval.{m}", "retrieval", f"Retrieval {m} {per_language}", "Over the whole pool, per language.")
        for m in RETRIEVAL_BY_LANGUAGE
    ]
    return specs


class _WinRates(Strict):
    group: str
    rates: dict[str, Estimate]
    sp: Estimate | None = None


class _Report(Strict):
    overall: _WinRates
    by_language: list[_WinRates] = Field(default_factory=list)
    by_country: list[_WinRates] = Field(default_factory=list)
    n_resamples: int | None = None
    seed: int | None = None


class _RetrievalGroup(Strict):
    metrics: dict[str, Estimate]


class _Retrieval(Strict):
    overall: _RetrievalGroup
    by_language: dict[str, _RetrievalGroup] = Field(default_factory=dict)


class _XcmSections(Strict):
    rq2: _Report | None = None
    rq3: _Report | None = None
    retrieval: _Retrieval | None = None


def _breakdowns(read: _XcmSections) -> dict[str, dict[str, Cell]]:
    out: dict[str, dict[str, Cell]] = {}
    for task, report in (("rq2", read.rq2), ("rq3", read.rq3)):
        if report is None:
            continue
        # per language always (the overall alone when none); per country where metrics.json has it
        breakdowns = [(task, report.by_language)] + ([(f"{task}.country", report.by_country)] * bool(report.by_country))
        for prefix, by in breakdowns:
            groups = [(OVERALL, report.overall), *((g.group, g) for g in by)]
            for category, symbol in PAPER_SYMBOL[task].items():
                out[f"{prefix}.M_{symbol}"] = {name: cell(g.rates.get(category)) for name, g in groups}
            if task == "rq2":
                out[f"{prefix}.SP"] = {name: cell(g.sp) for name, g in groups}
        if task == "rq3":
            out["rq3"] = {f"M_{s}": cell(report.overall.rates.get(c)) for c, s in PAPER_SYMBOL["rq3"].items()}
    if read.retrieval is not None:
        pool = [(OVERALL, read.retrieval.overall), *read.retrieval.by_language.items()]
        for metric in RETRIEVAL_BY_LANGUAGE:
            out[f"retrieval.{metric}"] = {name: cell(g.metrics.get(metric)) for name, g in pool}
    return out


def read_breakdowns(folder: Path, path: Path, metrics: dict[str, Any]) -> Breakdowns:
    return _breakdowns(sections(path, _XcmSections, metrics))


def read_outcomes(folder: Path) -> Outcomes | None:
    """Per benchmark row (by its index): whether the correct image won the triplet, the query's share of M_cr
    (Eq. 3, ties to the first candidate as the authors' code breaks them)."""
    if not os.path.lexists(folder / PER_QUERY):
        return None  # a result without its per-query table: nothing to pair (a link is refused by read_table)
    rows = read_table(folder / PER_QUERY, {"query_index": "integer", "winner": "string"})
    return {str(r["query_index"]): r["winner"] == "correct" for r in rows}


def intervals(metrics: dict[str, Any]) -> str:
    """How a result's intervals were drawn: the headline's bootstrap over queries (3XCM §3.2.2 reports points
    only; the interval is ours), its resample count and seed as metrics.json records them."""
    settings = metrics.get("settings")
    resamples = settings.get("bootstrap_resamples") if isinstance(settings, dict) else None
    seed = settings.get("seed") if isinstance(settings, dict) else None
    if not isinstance(resamples, int) or isinstance(resamples, bool) or resamples <= 0:
        return "no intervals (run with --bootstrap-resamples > 0)"
    return f"95% percentile bootstrap over the queries, {resamples} resamples, seed {seed}"


LEADERBOARD = LeaderboardSpec(_tables(), read_breakdowns, {"triplet": read_outcomes}, intervals)
