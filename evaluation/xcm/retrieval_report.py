"""The retrieval part's means with bootstrap intervals, its figure and its card section (GlobalRG §3.2, trec_eval's
readings, RAVENEA's own scoring): the per-query table (`retrieval_metrics.PER_QUERY`) in, JSON-ready estimates,
tables, a PNG and Markdown out.

Intervals are percentile bootstraps over a group's queries, drawn with the 3XCM evaluation's helpers: its seeded
per-group generator (`evaluation.intervals.group_rng`, so a group's interval does not depend on the other groups)
and its percentile rule (`evaluation.intervals.percentile_interval`). A metric that leaves queries out (RAVENEA's
MRR, null for a query with no positive item: `retrieval_metrics.LEAVES_OUT`) is averaged over the others, in the
estimate and in each resample, and says how many (`n`); a resample that draws none of them is left out of its interval.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NotRequired, TypedDict

import matplotlib.pyplot as plt  # data.figures, imported here too, makes it draw with Agg
import numpy as np
import numpy.typing as npt
import pyarrow as pa

from data import reference
from data.figures import figure_png
from data.publish.card import markdown_table
from evaluation.intervals import group_rng, percentile_interval
from evaluation.xcm import metrics as m
from evaluation.xcm import ravenea_metrics as rv
from evaluation.xcm import retrieval_metrics as rm

CONFIDENCE = 0.95
TITLE = "## Retrieval across universals (GlobalRG §3.2, RAVENEA §3.1)\n"


class Estimate(TypedDict):
    """One mean, each a number or None; and "n", the queries it is over, for a metric that leaves queries out
    (`rm.LEAVES_OUT`)."""

    value: float | None
    ci_low: float | None
    ci_high: float | None
    n: NotRequired[int]


#: A group's means by `retrieval_metrics.aggregate_name`.
Estimates = dict[str, Estimate]


class GroupMetricRow(TypedDict):
    """One `rm.GROUP_METRICS` row: a group's mean of one metric."""

    group_by: str
    group: str
    concept: str | None
    n: int
    metric: str
    value: float | None
    ci_low: float | None
    ci_high: float | None


class GroupSummary(TypedDict):
    n: int
    metrics: Estimates


class ConceptSummary(TypedDict):
    concept_id: int
    concept: str
    n: int
    metrics: Estimates


class SummaryJson(TypedDict):
    """The part's means in metrics.json (`summary_json`)."""

    overall: GroupSummary
    by_language: dict[str, GroupSummary]
    by_concept: list[ConceptSummary]


class RegionSettings(TypedDict):
    reading: str
    pack: str
    by_country: dict[str, str]
    unknown_region_countries: list[str]
    n_unknown_region_countries: int


class RetrievalSettings(TypedDict):
    """metrics.json["retrieval"]["settings"]: what was retrieved, how, and which reading each metric is."""

    k: list[int]
    ravenea_k: list[int]
    pool_images: int
    pool_countries: int
    pool_regions: int
    n_queries: int
    queries_with_shipped_translation: int
    n_resamples: int
    seed: int
    confidence: float
    relevance: str
    diversity: dict[str, str]
    precision: str
    english: str
    trec_eval: str
    ravenea: dict[str, str]
    ranking: str
    regions: RegionSettings


@dataclass(frozen=True)
class Summary:
    n: int
    overall: Estimates
    by_language: dict[str, tuple[int, Estimates]]  # query language -> (queries, means); English first
    by_concept: dict[int, tuple[str, int, Estimates]]  # concept id -> (concept, queries, means)


def group_means(
    per_query: pa.Table, group_by: str, group: str, rows: npt.NDArray[np.integer], n_resamples: int, seed: int
) -> Estimates:
    """Each metric's mean over the group's queries (`rm.aggregate_name`: MRR for the reciprocal rank), with a
    `CONFIDENCE` percentile-bootstrap interval from `n_resamples` resamples of those queries (0: none). Resampling
    n queries with replacement draws how often each is taken from Multinomial(n, 1/n), so the resampled means are
    that count matrix times the metric matrix, over the count of the queries drawn that have a value (n, but for a
    metric that leaves queries out)."""
    values = np.column_stack(
        [per_query.column(name).to_numpy(zero_copy_only=False)[rows].astype(np.float64) for name in rm.METRICS]
    )  # a null (a query left out) reads NaN
    present = ~np.isnan(values)
    n = len(rows)
    draws = None
    if n_resamples > 0 and n > 0:
        rng = group_rng(seed, "retrieval", group_by, group)
        counts = rng.multinomial(n, np.full(n, 1.0 / n), size=n_resamples)
        with np.errstate(invalid="ignore"):  # 0 / 0: a resample with none of a metric's queries, left out below
            draws = (counts @ np.where(present, values, 0.0)) / (counts @ present.astype(np.float64))
    out: Estimates = {}
    for j, name in enumerate(rm.METRICS):
        low, high = None, None
        if draws is not None and np.isfinite(draws[:, j]).any():
            low, high = percentile_interval(draws[np.isfinite(draws[:, j]), j], CONFIDENCE)
        kept = values[present[:, j], j]
        out[rm.aggregate_name(name)] = {
            "value": float(kept.mean()) if len(kept) else None,
            "ci_low": low,
            "ci_high": high,
        }
        if name in rm.LEAVES_OUT:
            out[rm.aggregate_name(name)]["n"] = len(kept)
    return out


def _grouped(per_query: pa.Table, column: str) -> list[tuple[str, npt.NDArray[np.intp]]]:
    """(group, row positions), English first, then by language code or numerically by concept id."""
    values = np.array([str(v) for v in per_query.column(column).to_pylist()], dtype=object)
    keys = sorted(set(values), key=lambda v: (v != reference.ENGLISH, int(v) if v.isdigit() else 0, v))
    return [(key, np.flatnonzero(values == key)) for key in keys]


def summarise(per_query: pa.Table, n_resamples: int, seed: int) -> Summary:
    """The means overall, per query language and per concept."""
    names = dict(zip(per_query.column("concept_id").to_pylist(), per_query.column("concept").to_pylist(), strict=True))
    return Summary(
        n=per_query.num_rows,
        overall=group_means(per_query, "overall", m.ALL, np.arange(per_query.num_rows), n_resamples, seed),
        by_language={
            language: (len(rows), group_means(per_query, "query_language", language, rows, n_resamples, seed))
            for language, rows in _grouped(per_query, "query_language")
        },
        by_concept={
            int(cid): (str(names[int(cid)]), len(rows), group_means(per_query, "concept", cid, rows, n_resamples, seed))
            for cid, rows in _grouped(per_query, "concept_id")
        },
    )


def _long_rows(group_by: str, group: str, concept: str | None, n: int, means: Estimates) -> list[GroupMetricRow]:
    return [
        {"group_by": group_by, "group": group, "concept": concept, "n": n, "metric": name, **estimate}
        for name, estimate in means.items()
    ]


def group_tables(summary: Summary) -> dict[str, pa.Table]:
    """`by_language` and `by_concept`, in long form (`rm.GROUP_METRICS`)."""
    language = [r for g, (n, e) in summary.by_language.items() for r in _long_rows("query_language", g, None, n, e)]
    concept = [
        r for cid, (name, n, e) in summary.by_concept.items() for r in _long_rows("concept", str(cid), name, n, e)
    ]
    return {
        "by_language": pa.Table.from_pylist(language, schema=rm.GROUP_METRICS),
        "by_concept": pa.Table.from_pylist(concept, schema=rm.GROUP_METRICS),
    }


def summary_json(summary: Summary) -> SummaryJson:
    return {
        "overall": {"n": summary.n, "metrics": summary.overall},
        "by_language": {g: {"n": n, "metrics": e} for g, (n, e) in summary.by_language.items()},
        "by_concept": [
            {"concept_id": cid, "concept": name, "n": n, "metrics": e}
            for cid, (name, n, e) in summary.by_concept.items()
        ],
    }


# --- figure and card -------------------------------------------------------------------------------------------


def _bounds(estimate: Estimate) -> tuple[float, float, float]:
    """(value, distance down to the lower bound, up to the upper); a missing bound draws no bar."""
    value = estimate["value"] or 0.0
    low, high = estimate["ci_low"], estimate["ci_high"]
    return value, value - (value if low is None else low), (value if high is None else high) - value


def precision_diversity_png(summary: Summary) -> bytes:
    """precision@5 against diversity@5 by country (GlobalRG Eq. 1) per query language, with their bootstrap
    intervals; all queries as a black star."""
    figure, axes = plt.subplots(figsize=(5.2, 4.2))
    for language, (_, estimates) in summary.by_language.items():
        x, x_low, x_high = _bounds(estimates["diversity@5_country"])
        y, y_low, y_high = _bounds(estimates["precision@5"])
        axes.errorbar(x, y, xerr=[[x_low], [x_high]], yerr=[[y_low], [y_high]], fmt="o", capsize=2, alpha=0.8)
        axes.annotate(language, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    x = summary.overall["diversity@5_country"]["value"] or 0.0
    y = summary.overall["precision@5"]["value"] or 0.0
    axes.plot([x], [y], marker="*", color="black", markersize=12, linestyle="none", label="all queries")
    axes.set_xlim(-0.05, 1.05)
    axes.set_ylim(-0.05, 1.05)
    axes.set_xlabel("diversity@5, country (GlobalRG Eq. 1)")
    axes.set_ylabel("precision@5")
    axes.legend(fontsize=8, loc="lower left")
    axes.set_title(f"Retrieval across universals per query language ({int(CONFIDENCE * 100)}% CI)", fontsize=10)
    return figure_png(figure)


def cell(estimate: Estimate) -> str:
    """A mean as the cards and the README print it: `0.194 [0.144, 0.250]`, the value alone without its interval."""
    value, low, high = estimate["value"], estimate["ci_low"], estimate["ci_high"]
    if value is None:
        return "–"
    if low is None or high is None:
        return f"{value:.3f}"
    return f"{value:.3f} [{low:.3f}, {high:.3f}]"


#: The card's columns, (header, metric) per table. First the row comparable with GlobalRG's Table 3 (English queries).
ENGLISH_COLUMNS: tuple[tuple[str, str], ...] = tuple(
    (f"{short}@{k}{label}", f"{metric}@{k}{unit}")
    for k in rm.K_VALUES
    for short, label, metric, unit in (
        ("P", "", "precision", ""),
        ("div", " country", "diversity", "_country"),
        ("div", " region", "diversity", "_region"),
    )
)
#: Every query language: GlobalRG's precision and diversity, ours, and trec_eval's MRR and nDCG.
CARD_COLUMNS: tuple[tuple[str, str], ...] = (
    ("P@5", "precision@5"),
    ("div@5 country", "diversity@5_country"),
    ("div@5 region", "diversity@5_region"),
    ("div@5 country, pool (ours)", "diversity@5_country_pool"),
    ("div@5 region, pool (ours)", "diversity@5_region_pool"),
    ("MRR (trec_eval)", "mrr"),
    ("nDCG@5 (trec_eval)", "ndcg@5"),
)
#: RAVENEA's own scoring, in its Table 2's order.
RAVENEA_COLUMNS: tuple[tuple[str, str], ...] = tuple(
    (header, rm.aggregate_name(name))
    for header, name in zip(
        ["MRR", *(f"P@{k}" for k in rv.K_VALUES), *(f"nDCG@{k}" for k in rv.K_VALUES)], rv.metric_names(), strict=True
    )
)
RAVENEA_MRR = rm.aggregate_name(rv.RECIPROCAL_RANK)


def _rows(groups: list[tuple[str, int, Estimates]], columns: tuple[tuple[str, str], ...]) -> list[dict[str, str | int]]:
    return [
        {"query language": g, "queries": n, **{header: cell(e[name]) for header, name in columns}} for g, n, e in groups
    ]


def card_section(summary: Summary, settings: RetrievalSettings) -> list[str]:
    """The section: what was retrieved; the English row, comparable with GlobalRG's Table 3; every query language
    with GlobalRG's, our and trec_eval's metrics; RAVENEA's own scoring; which reading is whose; and the countries
    whose region is unknown, if any."""
    groups = [("all", summary.n, summary.overall), *((g, n, e) for g, (n, e) in summary.by_language.items())]
    english = [(g, n, e) for g, n, e in groups if g == reference.ENGLISH]
    ravenea: list[dict[str, str | int | None]] = [
        {
            "query language": g,
            "queries": n,
            "with a positive": e[RAVENEA_MRR].get("n"),  # the queries RAVENEA's MRR is over
            **{header: cell(e[name]) for header, name in RAVENEA_COLUMNS},
        }
        for g, n, e in groups
    ]
    out = [
        TITLE,
        "Every concept is a text query, in English and in each native language of the release, over all "
        f"{settings['pool_images']} images of `image_metadata` ({settings['pool_countries']} countries, "
        f"{settings['pool_regions']} regions), not only an RQ2 triplet's three. Relevant: the image shows the "
        "concept (its own, a tag, or a byte or pixel copy, the assembly's rule); for nDCG and RAVENEA's scoring it "
        "counts 2 when it also comes from a country of the query's language. Means over queries, with "
        f"{int(CONFIDENCE * 100)}% bootstrap intervals ({settings['n_resamples']} resamples of the queries).\n",
        "**English queries: the row comparable with GlobalRG's Table 3.** GlobalRG queries in English only (its "
        "queries are the universal concepts' English words, §3.2), so its Table 3 compares with this row, not with "
        "the mean over every query language below. precision@k is §3.2's (images showing the concept among the top "
        "k, over k); diversity@k is its Eq. 1, by country and by region. **Fractions from 0 to 1**, where GlobalRG's "
        "Table 3 gives percentages (multiply by 100).\n",
        markdown_table(_rows(english, ENGLISH_COLUMNS)) if english else "No English query was scored.\n",
        "**Every query language.** P@k is GlobalRG's precision (it equals trec_eval's P@k). MRR and nDCG@5 here are "
        "trec_eval's readings (`recip_rank`: the first image of grade 1 or 2, 0 when there is none; `ndcg_cut`: the "
        "grade as gain), not RAVENEA's own scoring, which follows.\n",
        markdown_table(_rows(groups, CARD_COLUMNS)),
        "diversity@5 by country and by region is the paper's (GlobalRG Eq. 1): the entropy of the top 5's "
        "cultures over log(m), m the number of cultures among them, and 0 when m = 1. The pool columns are ours, "
        "not the paper's: the same entropy over the log of the number of countries (regions) in the pool, so at "
        "most log(5) over that log for 5 images.\n",
        "**RAVENEA's own scoring** (§3.1, Table 2), as its authors' `src/gdeval.py` computes it. A query's top "
        "grade is the highest in the pool (2, else 1, else 0). P@k counts only images of the top grade among the "
        "first k, over the images ranked there (at most k); MRR is 1 / the rank of the first image of the top "
        "grade, averaged over the queries that have a positive item only (`with a positive`); nDCG@k takes "
        "2^grade − 1 as gain and the ideal from the same ranked list. gdeval.py adds 3 to every grade because "
        "RAVENEA's labels go negative; ours (0, 1, 2) do not, and +3 would give an irrelevant image a gain of 7, "
        "so the gain is taken on our grades as they are.\n",
        markdown_table(ravenea),
    ]
    regions = settings["regions"]
    if regions["n_unknown_region_countries"]:
        out.append(
            f"{regions['n_unknown_region_countries']} of the pool's countries are outside the reference data; "
            "their region is `unknown`, one region for all of them: "
            f"{', '.join(regions['unknown_region_countries'])}.\n"
        )
    return out
