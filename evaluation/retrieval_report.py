"""The retrieval part's means with bootstrap intervals, its figure and its card section (GlobalRG §3.2, RAVENEA
§3.1): the per-query table (`retrieval_metrics.PER_QUERY`) in, JSON-ready estimates, tables, a PNG and Markdown out.

Intervals are percentile bootstraps over a group's queries, drawn with the 3XCM evaluation's helpers: its seeded
per-group generator (`metrics_3xcm._group_rng`, so a group's interval does not depend on the other groups) and its
percentile rule (`metrics_3xcm._percentile_interval`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt  # data.figures, imported here too, makes it draw with Agg
import numpy as np
import pyarrow as pa

from data import reference
from data.figures import figure_png
from data.publish.card import markdown_table
from evaluation import metrics_3xcm as m
from evaluation import retrieval_metrics as rm

CONFIDENCE = 0.95
TITLE = "## Retrieval across universals (GlobalRG §3.2, RAVENEA §3.1)\n"
#: One mean: {"value", "ci_low", "ci_high"}, each a number or None.
Estimate = dict[str, float | None]
#: A group's means by `retrieval_metrics.aggregate_name`.
Estimates = dict[str, Estimate]


@dataclass(frozen=True)
class Summary:
    n: int
    overall: Estimates
    by_language: dict[str, tuple[int, Estimates]]  # query language -> (queries, means); English first
    by_concept: dict[int, tuple[str, int, Estimates]]  # concept id -> (concept, queries, means)


def group_means(
    per_query: pa.Table, group_by: str, group: str, rows: np.ndarray, n_resamples: int, seed: int
) -> Estimates:
    """Each metric's mean over the group's queries (`rm.aggregate_name`: MRR for the reciprocal rank), with a
    `CONFIDENCE` percentile-bootstrap interval from `n_resamples` resamples of those queries (0: none). Resampling
    n queries with replacement draws how often each is taken from Multinomial(n, 1/n), so the resampled means are
    that count matrix times the metric matrix, over n."""
    values = np.column_stack([per_query.column(name).to_numpy()[rows] for name in rm.METRICS])
    n = len(rows)
    draws = None
    if n_resamples > 0 and n > 0:
        rng = m._group_rng(seed, "retrieval", group_by, group)
        draws = rng.multinomial(n, np.full(n, 1.0 / n), size=n_resamples) @ values / n
    out: Estimates = {}
    for j, name in enumerate(rm.METRICS):
        low, high = m._percentile_interval(draws[:, j], CONFIDENCE) if draws is not None else (None, None)
        out[rm.aggregate_name(name)] = {
            "value": float(values[:, j].mean()) if n else None,
            "ci_low": low,
            "ci_high": high,
        }
    return out


def _grouped(per_query: pa.Table, column: str) -> list[tuple[str, np.ndarray]]:
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


def _long_rows(group_by: str, group: str, concept: str | None, n: int, means: Estimates) -> list[dict[str, Any]]:
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


def summary_json(summary: Summary) -> dict[str, Any]:
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


def _cell(estimate: Estimate) -> str:
    value, low, high = estimate["value"], estimate["ci_low"], estimate["ci_high"]
    if value is None:
        return "–"
    if low is None or high is None:
        return f"{value:.3f}"
    return f"{value:.3f} [{low:.3f}, {high:.3f}]"


#: The card's columns: (header, metric).
CARD_COLUMNS: tuple[tuple[str, str], ...] = (
    ("P@5", "precision@5"),
    ("div@5 country", "diversity@5_country"),
    ("div@5 region", "diversity@5_region"),
    ("div@5 country, pool (ours)", "diversity@5_country_pool"),
    ("div@5 region, pool (ours)", "diversity@5_region_pool"),
    ("MRR", "mrr"),
    ("nDCG@5", "ndcg@5"),
)


def card_section(summary: Summary, settings: dict[str, Any]) -> list[str]:
    """The section: what was retrieved, the per-language table, which diversity is the paper's and which ours,
    and the countries whose region is unknown, if any."""
    groups = [("all", summary.n, summary.overall), *((g, n, e) for g, (n, e) in summary.by_language.items())]
    rows = [
        {"query language": g, "queries": n, **{header: _cell(e[name]) for header, name in CARD_COLUMNS}}
        for g, n, e in groups
    ]
    out = [
        TITLE,
        "Every concept is a text query, in English and in each native language of the release, over all "
        f"{settings['pool_images']} images of `image_metadata` ({settings['pool_countries']} countries, "
        f"{settings['pool_regions']} regions), not only an RQ2 triplet's three. Relevant: the image shows the "
        "concept (its own, a tag, or a byte or pixel copy, the assembly's rule); for nDCG it counts 2 when it also "
        "comes from a country of the query's language. Means over queries, with "
        f"{int(CONFIDENCE * 100)}% bootstrap intervals ({settings['n_resamples']} resamples of the queries).\n",
        markdown_table(rows),
        "diversity@5 by country and by region is the paper's (GlobalRG Eq. 1): the entropy of the top 5's "
        "cultures over log(m), m the number of cultures among them, and 0 when m = 1. The pool columns are ours, "
        "not the paper's: the same entropy over the log of the number of countries (regions) in the pool, so at "
        "most log(5) over that log for 5 images.\n",
    ]
    regions = settings["regions"]
    if regions["n_unknown_region_countries"]:
        out.append(
            f"{regions['n_unknown_region_countries']} of the pool's countries are outside the reference data; "
            "their region is `unknown`, one region for all of them: "
            f"{', '.join(regions['unknown_region_countries'])}.\n"
        )
    return out
