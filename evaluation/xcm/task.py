"""A model on a 3XCM release: embeddings in, the paper's per-query scores, win rates, tests and drift out (3XCM
paper §3.2.2, §3.2.3, App. P and Q). The metric arithmetic is `evaluation.xcm.metrics`'s; this module gathers the
vectors the release needs, once each, and skips what the release or the embeddings cannot support, saying why."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

import numpy as np
import pyarrow as pa
from pydantic import JsonValue

from data.publish.reader import Release
from data.schemas import RQ2_SLOTS
from evaluation.models.embed import Progress as Progress
from evaluation.models.embed import image_vectors, text_vectors
from evaluation.models.encoders import TextImageEncoder
from evaluation.xcm import metrics as m
from evaluation.xcm.figures import delta_sim_png, sp_per_language_png, stacked_win_rates_png


class Rq2Headline(TypedDict):
    """M_cr, M_lb, M_ti and SP over all queries (`PAPER_SYMBOL["rq2"]`'s order), with their intervals."""

    M_cr: float | None
    M_lb: float | None
    M_ti: float | None
    SP: float | None
    ci95: dict[str, list[float | None]]


class XcmMetrics(Rq2Headline):
    """metrics.json's 3XCM numbers, in its order: the headline, RQ2's report, RQ3's, the App. P.2 tests and Δsim
    where computed, what was skipped, and the ties where any decided a winner."""

    n_queries: int
    rq2: dict[str, JsonValue]  # m.WinRateReport, as JSON
    rq3: NotRequired[dict[str, JsonValue]]
    preference_tests: NotRequired[list[dict[str, JsonValue]]]  # m.PreferenceTest each
    delta_sim: NotRequired[list[dict[str, JsonValue]]]  # m.drift_means' rows
    skipped: NotRequired[list[str]]  # always there, set after the RQ3 keys
    ties: NotRequired[dict[str, float]]  # per task the queries whose winner a tie decided, and the tolerance


@dataclass
class XcmEvaluation:
    per_query: pa.Table  # RQ2, `evaluation.xcm.metrics.RQ2_PER_QUERY`
    tables: dict[str, pa.Table]  # further result tables by file stem
    metrics: dict[str, Any]
    figures: dict[str, bytes]  # PNG by file name
    skipped: list[str] = field(default_factory=list)  # what was not computed, and why
    warnings: list[str] = field(default_factory=list)  # what makes the numbers not what they seem (ties)


def _candidate_ids(table: pa.Table, prefixes: Sequence[str]) -> list[str]:
    ids: list[str] = []
    for prefix in prefixes:
        ids += [str(v) for v in table.column(f"{prefix}image_id").to_pylist()]
    return ids


def needed_image_ids(benchmark: pa.Table, benchmark_cd: pa.Table | None, query: m.QuerySource) -> list[str]:
    """Every image a score reads, once, in first-use order."""
    ids = _candidate_ids(benchmark, [prefix for _, prefix in RQ2_SLOTS])
    if benchmark_cd is not None:
        ids += _candidate_ids(benchmark_cd, [f"{c}_candidate_" for c in m.RQ3_CATEGORIES])
    if query == "image":
        ids += [str(v) for v in benchmark.column("query_image_id").to_pylist()]
        if benchmark_cd is not None:
            ids += [str(v) for v in benchmark_cd.column("query_image_id").to_pylist()]
    return list(dict.fromkeys(ids))


def evaluate_3xcm(
    release: Release,
    encoder: TextImageEncoder,
    *,
    query: m.QuerySource = "text",
    n_resamples: int = 1000,
    seed: int = 0,
    progress: Progress | None = None,
) -> XcmEvaluation:
    """RQ2 always; RQ3, its App. P.2 tests and Δsim when the release has sextets and the encoder has their texts."""
    benchmark = release.table("benchmark")
    if benchmark.num_rows == 0:
        raise ValueError(f"{release.path}: the benchmark table has no rows")
    benchmark_cd = release.table("benchmark_cd") if release.has("benchmark_cd") else None
    if benchmark_cd is not None and benchmark_cd.num_rows == 0:
        benchmark_cd = None
    skipped: list[str] = [] if benchmark_cd is not None else ["RQ3: the release has no benchmark_cd rows"]

    images = image_vectors(release, needed_image_ids(benchmark, benchmark_cd, query), encoder, progress)
    rq2_texts = text_vectors([str(t) for t in benchmark.column("query_text").to_pylist()], encoder)
    per_query = m.rq2_scores(benchmark, images, rq2_texts, query=query)
    rq2 = m.win_rates(per_query, "rq2", n_resamples=n_resamples, seed=seed)
    tables: dict[str, pa.Table] = {"win_rates": m.win_rates_table(rq2)}
    figures = {
        "sp_per_language.png": sp_per_language_png(rq2),
        "win_rates_rq2.png": stacked_win_rates_png(rq2, "RQ2: M_k per query language (Eq. 3)"),
    }
    headline = _headline(rq2)
    metrics: XcmMetrics = {
        "M_cr": headline["M_cr"],
        "M_lb": headline["M_lb"],
        "M_ti": headline["M_ti"],
        "SP": headline["SP"],
        "ci95": headline["ci95"],
        "n_queries": per_query.num_rows,
        "rq2": rq2.model_dump(mode="json"),
    }

    if benchmark_cd is not None:
        rq3_texts = _texts_or_none(encoder, [str(t) for t in benchmark_cd.column("query_text").to_pylist()])
        if rq3_texts is None:
            skipped.append("RQ3: the encoder has no vectors for the descriptor queries q_{C+CD}")
        else:
            per_query_rq3 = m.rq3_scores(benchmark_cd, images, rq3_texts, query=query)
            rq3 = m.win_rates(per_query_rq3, "rq3", n_resamples=n_resamples, seed=seed)
            tests = m.failure_mode_tests(per_query_rq3)
            tables["per_query_rq3"] = per_query_rq3
            tables["win_rates"] = pa.concat_tables([tables["win_rates"], m.win_rates_table(rq3)])
            tables["preference_tests"] = m.preference_tests_table(tests)
            figures["win_rates_rq3.png"] = stacked_win_rates_png(rq3, "RQ3: M_k per query language (Table 3)")
            metrics["rq3"] = rq3.model_dump(mode="json")
            metrics["preference_tests"] = [t.model_dump(mode="json") for t in tests]
            drift = _drift(release, benchmark_cd, images, encoder, skipped)
            if drift is not None:
                means = m.drift_means(drift)
                tables["similarity_drift"] = drift
                tables["drift_means"] = m.drift_means_table(means)
                figures["delta_sim.png"] = delta_sim_png(means)
                metrics["delta_sim"] = [d.model_dump(mode="json") for d in means]
    metrics["skipped"] = skipped
    scored = {"rq2": (per_query, m.RQ2_CATEGORIES)}
    if "per_query_rq3" in tables:
        scored["rq3"] = (tables["per_query_rq3"], m.RQ3_CATEGORIES)
    ties = {task: _ties(table, categories) for task, (table, categories) in scored.items()}
    warnings = []
    if any(ties.values()):  # only then: a result without ties reads exactly as before
        metrics["ties"] = {**ties, "tolerance": m.TIE_TOLERANCE}
        numbers = {"rq2": "M_cr, M_lb, M_ti and SP", "rq3": "the RQ3 M_k and the App. P tests"}
        for task, count in ties.items():
            n = scored[task][0].num_rows
            if count * 2 > n:
                warnings.append(
                    f"Ties decided {count} of {n} {task.upper()} winners: their top scores were equal within "
                    f"{m.TIE_TOLERANCE:g}, so the slot order (correct first) chose them, not the model; "
                    f"{numbers[task]} are not measured. Check the vectors (one vector for every image ties "
                    "everywhere)."
                )
    return XcmEvaluation(per_query, tables, dict(metrics), figures, skipped, warnings)


def _ties(per_query: pa.Table, categories: Sequence[str]) -> int:
    """Queries whose winner a tie decided (`evaluation.xcm.metrics.tied_winners`)."""
    if per_query.num_rows == 0:
        return 0
    scores = np.column_stack([per_query.column(f"score_{c}").to_numpy() for c in categories])
    return int(m.tied_winners(scores).sum())


def _headline(report: m.WinRateReport) -> Rq2Headline:
    """M_cr, M_lb, M_ti and SP over all queries, at the top level (the interface scripts read)."""
    overall = report.overall
    cr, lb, ti, sp = overall.rate("cr"), overall.rate("lb"), overall.rate("ti"), overall.sp
    return {
        "M_cr": cr.value,
        "M_lb": lb.value,
        "M_ti": ti.value,
        "SP": sp.value if sp is not None else None,
        "ci95": {
            "M_cr": [cr.ci_low, cr.ci_high],
            "M_lb": [lb.ci_low, lb.ci_high],
            "M_ti": [ti.ci_low, ti.ci_high],
            "SP": [sp.ci_low, sp.ci_high] if sp is not None else [None, None],
        },
    }


def _texts_or_none(encoder: TextImageEncoder, texts: Sequence[str]) -> m.Vectors | None:
    try:
        return text_vectors(texts, encoder)
    except KeyError:  # precomputed vectors that cover RQ2 only
        return None


def _drift(
    release: Release,
    benchmark_cd: pa.Table,
    images: m.Vectors,
    encoder: TextImageEncoder,
    skipped: list[str],
) -> pa.Table | None:
    if not release.has("image_metadata"):
        skipped.append("Δsim: the release has no image_metadata (the plain queries q_C come from concept_in_native)")
        return None
    metadata = release.table(
        "image_metadata", ["image_id", "concept_in_native", "language_code", "country", "concept_id"]
    )
    plain = m.plain_query_texts(benchmark_cd, metadata)
    descriptor = [str(t) for t in benchmark_cd.column("query_text").to_pylist()]
    both = _texts_or_none(encoder, [*descriptor, *plain.to_pylist()])
    if both is None:
        skipped.append("Δsim: the encoder has no vectors for the plain queries q_C")
        return None
    return m.similarity_drift(benchmark_cd, plain, images, both)
