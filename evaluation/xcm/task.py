"""A model on a 3XCM release: embeddings in, the paper's per-query scores, win rates, tests and drift out (3XCM
paper §3.2.2, §3.2.3, App. P and Q). The metric arithmetic is `evaluation.xcm.metrics`'s; this module gathers the
vectors the release needs, once each, and skips what the release or the embeddings cannot support, saying why."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from data.publish.reader import Release
from data.schemas import RQ2_SLOTS
from evaluation.models.encoders import ImageRef, TextImageEncoder
from evaluation.models.vectors import refuse_degenerate
from evaluation.xcm import metrics as m
from evaluation.xcm.figures import delta_sim_png, sp_per_language_png, stacked_win_rates_png

#: (stage, done, total), as the build's progress callbacks.
Progress = Callable[[str, int, int], None]


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


def image_vectors(
    release: Release,
    image_ids: Sequence[str],
    encoder: TextImageEncoder,
    progress: Progress | None = None,
    config: str = "image_metadata",
    id_column: str = "image_id",
) -> m.Vectors:
    """The encoder's vectors of `image_ids` (the `id_column` of the release's image table `config`); the bytes are
    read from the release only if the encoder asks. MixCuBe's audit reads its quintets' images through it too."""
    # Precomputed vectors are looked up by id: reading (and hashing) every image's bytes would be wasted I/O.
    if encoder.needs_image_bytes and release.has(config) and "image" in release.columns(config):
        store = release.images(config, id_column)
        missing = [i for i in image_ids if i not in store.locations]
        if missing:
            raise KeyError(f"{len(missing)} benchmark image(s) are not in {config}, e.g. {missing[:3]}")
        # Table order: each Parquet row group is read once.
        where = store.locations
        order = sorted(image_ids, key=lambda i: (str(where[i].file), where[i].row_group, where[i].row))
        refs = [ImageRef(i, store.sha256[i], _loader(store, i)) for i in order]
    else:  # precomputed vectors, or a release without image bytes (the reassembled authors' benchmark)
        refs = [ImageRef(i, "", _no_bytes(release, i)) for i in image_ids]
    done = 0

    def advance(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress("embed images", done, len(refs))

    matrix = encoder.image_vectors(refs, advance)
    keys = [r.image_id for r in refs]
    _refuse_degenerate(encoder, keys, matrix, "image")
    return m.Vectors.from_arrays(keys, matrix)


def _refuse_degenerate(encoder: TextImageEncoder, keys: Sequence[str], matrix: Any, what: str) -> None:
    refuse_degenerate("3XCM evaluation", encoder.identity.model_id, list(keys), matrix, what)


def _loader(store: Any, image_id: str) -> Callable[[], bytes]:
    return lambda: store.load(image_id)


def _no_bytes(release: Release, image_id: str) -> Callable[[], bytes]:
    def load() -> bytes:
        raise ValueError(
            f"{release.path} carries no image bytes (no image_metadata images); evaluate it with "
            "--model-backend embeddings, or a release that has its images"
        )

    return load


def text_vectors(texts: Sequence[str], encoder: TextImageEncoder) -> m.Vectors:
    unique = list(dict.fromkeys(texts))
    matrix = encoder.text_vectors(unique)
    _refuse_degenerate(encoder, unique, matrix, "text")
    return m.Vectors.from_arrays(unique, matrix)


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
    metrics: dict[str, Any] = {**_headline(rq2), "n_queries": per_query.num_rows, "rq2": rq2.model_dump(mode="json")}

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
    return XcmEvaluation(per_query, tables, metrics, figures, skipped, warnings)


def _ties(per_query: pa.Table, categories: Sequence[str]) -> int:
    """Queries whose winner a tie decided (`evaluation.xcm.metrics.tied_winners`)."""
    if per_query.num_rows == 0:
        return 0
    scores = np.column_stack([per_query.column(f"score_{c}").to_numpy() for c in categories])
    return int(m.tied_winners(scores).sum())


def _headline(report: m.WinRateReport) -> dict[str, Any]:
    """M_cr, M_lb, M_ti and SP over all queries, at the top level (the interface scripts read)."""
    overall = report.overall
    out: dict[str, Any] = {f"M_{m.PAPER_SYMBOL['rq2'][c]}": overall.rates[c].value for c in m.RQ2_CATEGORIES}
    out["SP"] = overall.sp.value if overall.sp is not None else None
    out["ci95"] = {
        **{
            f"M_{m.PAPER_SYMBOL['rq2'][c]}": [overall.rates[c].ci_low, overall.rates[c].ci_high]
            for c in m.RQ2_CATEGORIES
        },
        "SP": [overall.sp.ci_low, overall.sp.ci_high] if overall.sp is not None else [None, None],
    }
    return out


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
