"""Retrieval across universals on a 3XCM release (GlobalRG §3.2), scored with trec_eval's MRR and nDCG@k and with
RAVENEA's own scoring too (RAVENEA §3.1, as its authors' gdeval.py computes it: `ravenea_metrics`): every concept is
a text query, in English and in each native language of the release, over the whole pool of the release's
`image_metadata` images (not the three candidates of an RQ2 triplet).

- Relevance is the assembly's rule: an image shows a concept when it is its concept, carries it as a tag, or is a
  byte or pixel copy of an image of it (`curation.rules.Catalog.shows`). Graded: 2 when it also comes from a country
  of the query's language (its `language_code`; English: the English-speaking countries), 1 otherwise, 0 when it
  does not show the concept.
- Scores are cosines (`evaluation.xcm.metrics.Vectors`, as the 3XCM evaluation), in float64. The pool is scored in
  blocks of images; only the top `DEPTH` of each query are kept (`retrieval_metrics.rank_images`).
- Means over queries carry percentile-bootstrap intervals from resampled queries (`retrieval_report`).
- The headline: first GlobalRG's precision@k and diversity@k over the English queries only (`<metric>_en`), the
  row comparable with its Table 3, whose queries are English; then the means over every query language; then
  RAVENEA's scoring (`ravenea`: {"mrr", "precision@1", ...}, flattened to `ravenea.mrr` by the card and `compare`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NotRequired, TypedDict

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from curation.rules import Catalog, pack_catalog
from data.publish.reader import Release
from data.reference import ENGLISH, UNKNOWN_REGION, ReferencePack
from evaluation.models.embed import Progress, image_vectors, text_vectors
from evaluation.models.encoders import TextImageEncoder
from evaluation.results.parts import Headline, ResultPart
from evaluation.xcm import metrics as m
from evaluation.xcm import ravenea_metrics as rv
from evaluation.xcm import retrieval_metrics as rm
from evaluation.xcm import retrieval_report as report

#: Images of the top k written to the `top_k` table per query.
TOP_K_ROWS = max(rm.K_VALUES)
#: GlobalRG's Table 3 metrics, whose means over the English queries lead the headline as `<metric>_en`.
ENGLISH_HEADLINE: tuple[str, ...] = tuple(
    f"{metric}@{k}{unit}"
    for k in rm.K_VALUES
    for metric, unit in (("precision", ""), ("diversity", "_country"), ("diversity", "_region"))
)
#: The means over every query language in the headline.
ALL_HEADLINE: tuple[str, ...] = ("precision@5", "diversity@5_country", "diversity@5_region", "mrr", "ndcg@5")
#: `ravenea`'s keys in the headline: RAVENEA's Table 2, MRR first.
RAVENEA_HEADLINE: tuple[str, ...] = tuple(rm.aggregate_name(n).removeprefix(rv.MEAN_PREFIX) for n in rv.metric_names())
HEADLINE: tuple[str, ...] = (*(f"{name}_en" for name in ENGLISH_HEADLINE), *ALL_HEADLINE, "ravenea")
#: The cut-offs the top's ties are counted at: ours and RAVENEA's.
TIE_K: tuple[int, ...] = tuple(sorted({*rm.K_VALUES, *rv.K_VALUES}))
_POOL_COLUMNS = ("index_in_dataset", "image_id", "concept_id", "concept", "concept_in_native", "country")
_OPTIONAL_COLUMNS = ("language_code", "language_group", "tags", "sha256", "pixel_sha256")


# --- records ---------------------------------------------------------------------------------------------------
class QueryRow(TypedDict):
    """The first columns of a `rm.PER_QUERY` row: a query and its pool's counts (its metrics, `rm.METRICS`, follow)."""

    concept_id: int
    concept: str
    query_language: str
    query_text: str
    n_relevant: int
    n_relevant_native: int
    first_relevant_rank: int | None
    top_grade: int
    first_top_grade_rank: int | None


class TopRow(TypedDict):
    """One `rm.TOP_K` row: an image of a query's top k."""

    concept_id: int
    query_language: str
    rank: int
    image_id: str
    score: float
    image_concept_id: int
    country: str
    region: str
    relevance: int


class SplitCounts(TypedDict):
    """Per-metric counts by the name of the metric's mean, RAVENEA's apart (only where one is not 0)."""

    metrics: dict[str, int]
    ravenea: NotRequired[dict[str, int]]


class RetrievalTies(SplitCounts):
    tolerance: float
    queries: int


class PoolCovers(TypedDict):
    """What the pool itself decides: the cut-offs k it fits inside, and its one country or region, if so."""

    pool_images: int
    k_at_least_pool: list[int]
    one_country: str | None
    one_region: str | None


class PoolDecides(PoolCovers, SplitCounts):
    queries: int


class RetrievalMetrics(TypedDict):
    """metrics.json["retrieval"], in its order."""

    settings: report.RetrievalSettings
    overall: report.GroupSummary
    by_language: dict[str, report.GroupSummary]
    by_concept: list[report.ConceptSummary]
    boundary_ties: dict[str, int]
    skipped: list[str]
    warnings: list[str]
    ties: NotRequired[RetrievalTies]
    pool_decides: NotRequired[PoolDecides]


# --- the pool and the queries ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pool:
    table: pa.Table  # image_metadata's columns the retrieval reads, in pool order
    catalog: Catalog
    image_ids: list[str]
    countries: npt.NDArray[np.object_]  # object (str), per image
    regions: npt.NDArray[np.object_]  # object (str), per image
    languages: npt.NDArray[np.object_]  # object (str): the image's country's language code
    unknown_region: list[str]  # countries outside the reference pack
    pack: ReferencePack  # the release's own: regions, languages and translations


def load_pool(release: Release) -> Pool:
    """image_metadata as the pool, in `index_in_dataset` order (the assembly's row order)."""
    if not release.has("image_metadata"):
        raise ValueError(f"{release.path}: retrieval across universals needs the release's image_metadata table")
    present = set(release.columns("image_metadata"))
    missing = [c for c in _POOL_COLUMNS if c not in present]
    if missing:
        raise ValueError(f"{release.path}: image_metadata lacks the column(s) {missing} retrieval reads")
    columns = [*_POOL_COLUMNS, *(c for c in _OPTIONAL_COLUMNS if c in present)]
    table = release.table("image_metadata", columns)
    if table.num_rows == 0:
        raise ValueError(f"{release.path}: image_metadata has no images to retrieve")
    table = table.sort_by("index_in_dataset")
    return pool_from_table(table, release.pack())


def pool_from_table(table: pa.Table, pack: ReferencePack) -> Pool:
    """The pool of an image table with the CATALOG columns (`language_code` from the reference pack where absent,
    `language_group` from it, `tags` the image's own concept): rows renumbered 0..n-1 in their order. Regions are
    the pack's (the default pack's are GlobalRG's Table 1)."""
    countries = [str(c) for c in table.column("country").to_pylist()]
    if "language_code" not in table.column_names:
        known = pack.country_by_name()
        codes = [known[c].language_code if c in known else "unknown" for c in countries]
        table = table.append_column("language_code", pa.array(codes, pa.string()))
    if "language_group" not in table.column_names:
        table = table.append_column("language_group", table.column("language_code"))
    if "tags" not in table.column_names:
        table = table.append_column("tags", pa.array([[c] for c in table.column("concept_id").to_pylist()]))
    table = table.set_column(
        table.column_names.index("index_in_dataset"), "index_in_dataset", pa.array(range(table.num_rows), pa.int32())
    )
    regions = [pack.region_of(c) for c in countries]
    unknown = sorted({c for c, r in zip(countries, regions, strict=True) if r == UNKNOWN_REGION})
    return Pool(
        table=table,
        catalog=pack_catalog(table, pack),
        image_ids=[str(i) for i in table.column("image_id").to_pylist()],
        countries=np.array(countries, dtype=object),
        regions=np.array(regions, dtype=object),
        languages=np.array([str(c) for c in table.column("language_code").to_pylist()], dtype=object),
        unknown_region=unknown,
        pack=pack,
    )


@dataclass(frozen=True)
class Query:
    concept_id: int
    concept: str
    language: str
    text: str


def build_queries(pool: Pool) -> tuple[list[Query], int, list[tuple[str, str]]]:
    """One query per concept of the pool and query language: English (the concept's name) and each native language
    of the pool's countries. A native query is the concept's `concept_in_native` in that language, the text the
    build wrote (3XCM's RQ2 query text and Δsim's q_C use the same column); for a concept with no image in that
    language's countries, the pack's translation. Returns the queries, how many took the pack's translation, and
    the (concept, language) pairs with no text at all."""
    table = pool.table
    names: dict[int, str] = {}
    native: dict[tuple[int, str], Counter[str]] = {}
    for concept_id, concept, native_text, language in zip(
        table.column("concept_id").to_pylist(),
        table.column("concept").to_pylist(),
        table.column("concept_in_native").to_pylist(),
        pool.languages,
        strict=True,
    ):
        names.setdefault(int(concept_id), str(concept))
        native.setdefault((int(concept_id), str(language)), Counter())[str(native_text)] += 1
    languages = [ENGLISH, *sorted(set(pool.languages) - {ENGLISH})]
    queries: list[Query] = []
    shipped, missing = 0, []
    for concept_id in sorted(names):
        for language in languages:
            text: str | None
            if language == ENGLISH:
                text = names[concept_id]
            elif (concept_id, language) in native:
                # One translation per (concept, language) in a build; were there two, the most used, then the first.
                counts = native[(concept_id, language)]
                text = min(counts, key=lambda t: (-counts[t], t))
            else:
                text = _pack_translation(pool.pack, concept_id, language)
                shipped += text is not None
            if text is None:
                missing.append((names[concept_id], language))
            else:
                queries.append(Query(concept_id, names[concept_id], language, text))
    return queries, shipped, missing


def _pack_translation(pack: ReferencePack, concept_id: int, language: str) -> str | None:
    known = pack.languages.get(language)
    entry = known.concepts.get(concept_id) if known is not None and language != ENGLISH else None
    return entry.text if entry is not None else None


# --- per-query metrics -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scored:
    per_query: pa.Table  # rm.PER_QUERY
    top_k: pa.Table  # rm.TOP_K
    boundary_ties: dict[int, int]  # k -> queries whose k-th and (k+1)-th scores tie (within TIE_TOLERANCE)
    tied: dict[str, int]  # per-query metric -> queries whose value a tie (within TIE_TOLERANCE) decided
    fixed: dict[str, int]  # per-query metric -> queries whose value every ranking of the pool gives


def _cut_metrics(k: int) -> list[str]:
    """The @k metrics that depend only on which images entered the top k: precision and diversity."""
    names = [f"precision@{k}", f"precision@{k}_native"]
    return names + [f"diversity@{k}_{unit}{pool}" for unit in rm.UNITS for pool in ("", "_pool")]


def _fixed_by_pool(
    pool_size: int, n_relevant: int, n_native: int, top: int, countries: int, regions: int
) -> dict[str, bool]:
    """Per metric, whether every ranking of the pool gives a query the same value, so the pool, not the model,
    decides it: a pool no larger than k puts every image in every top k; one country (region) leaves diversity 0;
    a concept shown by every image of the pool (or by none) leaves nothing to rank; for RAVENEA's scoring, every
    image (or none) of the query's top grade `top`."""
    relevance_alike = n_relevant in (0, pool_size)
    grades_alike = n_relevant == 0 or n_native == pool_size or (n_relevant == pool_size and n_native == 0)
    n_top = n_native if top == rm.RELEVANT_NATIVE else n_relevant if top == rm.RELEVANT else 0
    out: dict[str, bool] = {}
    for k in rm.K_VALUES:
        whole = pool_size <= k
        out[f"precision@{k}"] = whole or relevance_alike
        out[f"precision@{k}_native"] = whole or n_native in (0, pool_size)
        for unit, cultures in (("country", countries), ("region", regions)):
            out[f"diversity@{k}_{unit}"] = out[f"diversity@{k}_{unit}_pool"] = whole or cultures <= 1
        out[f"ndcg@{k}"] = grades_alike
    out["reciprocal_rank"] = relevance_alike
    for k in rv.K_VALUES:
        out[f"{rv.PREFIX}precision@{k}"] = pool_size <= k or n_top in (0, pool_size)
        out[f"{rv.PREFIX}ndcg@{k}"] = grades_alike
    out[rv.RECIPROCAL_RANK] = 0 < n_top == pool_size  # a query with no positive item has no value: left out
    return out


def _tied(
    scores: npt.NDArray[np.float64], grades: npt.NDArray[np.int64], first_tied: bool, first_top_tied: bool
) -> dict[str, bool]:
    """Per metric, whether a tie within TIE_TOLERANCE decided a query's value: at the k-th place, every @k metric
    (which image entered the top k); inside the top k, nDCG@k where the tied images differ in grade; at the first
    relevant image, the reciprocal rank; at the first image of the top grade, RAVENEA's. `scores` are the kept
    top's (-inf past the pool's end), `grades` the grades of its first images."""
    with np.errstate(invalid="ignore"):  # -inf - -inf past the pool's end: NaN, never a tie
        close = scores[:-1] - scores[1:] <= m.TIE_TOLERANCE  # place i and i + 1 tie

    def at(k: int) -> tuple[bool, bool]:  # (a tie at the k-th place, a tie between grades inside the top k)
        n = max(min(k, len(grades)), 1)
        return bool(k < len(scores) and close[k - 1]), bool((close[: n - 1] & (grades[: n - 1] != grades[1:n])).any())

    out: dict[str, bool] = {}
    for k in rm.K_VALUES:
        boundary, inside = at(k)
        out.update(dict.fromkeys(_cut_metrics(k), boundary))
        out[f"ndcg@{k}"] = boundary or inside
    out["reciprocal_rank"] = first_tied
    for k in rv.K_VALUES:
        boundary, inside = at(k)
        out[f"{rv.PREFIX}precision@{k}"] = boundary
        out[f"{rv.PREFIX}ndcg@{k}"] = boundary or inside
    out[rv.RECIPROCAL_RANK] = first_top_tied
    return out


def score_queries(
    pool: Pool, queries: Sequence[Query], ranking: rm.Ranking, shows: npt.NDArray[np.bool_], row: npt.NDArray[np.int64]
) -> Scored:
    """Every query's metrics (`rm.METRICS`) from its ranking; `shows[row[i]]` is query i's concept's row. RAVENEA's
    MRR reads `ranking.first_target` (the first image of the query's top grade: `top_grade_targets`)."""
    pool_countries = len(set(pool.countries))
    pool_regions = len(set(pool.regions))
    codes, language_index = np.unique(pool.languages.astype(str), return_inverse=True)
    # Images showing each concept, per language of their country: the ideal rankings of nDCG.
    shown_by_language = np.stack([np.bincount(language_index[r], minlength=len(codes)) for r in shows])
    deepest = max(*rm.K_VALUES, *rv.K_VALUES)
    n_queries = len(queries)
    first_top = ranking.first_target if ranking.first_target is not None else np.zeros(n_queries, dtype=np.int64)
    first_top_tied = (
        ranking.first_target_tied if ranking.first_target_tied is not None else np.zeros(n_queries, dtype=bool)
    )
    rows: list[dict[str, object]] = []  # a QueryRow, then its metrics by name (read by pyarrow only)
    top_rows: list[TopRow] = []
    ties = dict.fromkeys(TIE_K, 0)
    tied = dict.fromkeys(rm.METRICS, 0)
    fixed = dict.fromkeys(rm.METRICS, 0)
    for i, query in enumerate(queries):
        c = row[i]
        top = ranking.top[i, :TOP_K_ROWS]
        top = top[top >= 0]
        native = pool.languages[top] == query.language
        grades = shows[c, top].astype(np.int64) * (1 + native)
        countries, regions = list(pool.countries[top]), list(pool.regions[top])
        n_native = int(shown_by_language[c, codes == query.language].sum())
        n_relevant = int(shown_by_language[c].sum())
        first = int(ranking.first_relevant[i])
        best_grade = rv.top_grade(n_relevant, n_native)
        # The pool's grades, highest first, as deep as any k: the ideal rankings of both nDCGs.
        ideal = [rm.RELEVANT_NATIVE] * min(n_native, deepest) + [rm.RELEVANT] * min(n_relevant - n_native, deepest)
        values: dict[str, float | None] = {}
        for k in rm.K_VALUES:
            values[f"precision@{k}"] = rm.precision_at_k(grades, k)
            values[f"precision@{k}_native"] = rm.precision_at_k(grades, k, rm.RELEVANT_NATIVE)
            for unit, labels, total in (("country", countries, pool_countries), ("region", regions, pool_regions)):
                values[f"diversity@{k}_{unit}"] = rm.diversity_at_k(labels, k)
                values[f"diversity@{k}_{unit}_pool"] = rm.pool_diversity_at_k(labels, k, total)
            values[f"ndcg@{k}"] = rm.ndcg_at_k(grades, k, ideal)
        values["reciprocal_rank"] = rm.reciprocal_rank(first)
        values[rv.RECIPROCAL_RANK] = rv.reciprocal_rank(int(first_top[i]), best_grade) if best_grade > 0 else None
        for k in rv.K_VALUES:
            values[f"{rv.PREFIX}precision@{k}"] = rv.precision_at_k(grades, k, best_grade)
            values[f"{rv.PREFIX}ndcg@{k}"] = rv.ndcg_at_k(grades, k, ideal)
        scores = ranking.scores[i]
        for k in TIE_K:
            if k < len(scores) and np.isfinite(scores[k]) and scores[k - 1] - scores[k] <= m.TIE_TOLERANCE:
                ties[k] += 1
        decided = (
            _tied(scores, grades, bool(ranking.first_relevant_tied[i]), bool(first_top_tied[i])),
            _fixed_by_pool(len(pool.image_ids), n_relevant, n_native, best_grade, pool_countries, pool_regions),
        )
        for counts, flags in zip((tied, fixed), decided, strict=True):
            for name, flag in flags.items():
                counts[name] += flag
        described: QueryRow = {
            "concept_id": query.concept_id,
            "concept": query.concept,
            "query_language": query.language,
            "query_text": query.text,
            "n_relevant": n_relevant,
            "n_relevant_native": n_native,
            "first_relevant_rank": first or None,
            "top_grade": best_grade,
            "first_top_grade_rank": int(first_top[i]) or None,
        }
        rows.append({**described, **values})
        for rank, (image, grade) in enumerate(zip(top, grades, strict=True), 1):
            top_rows.append(
                {
                    "concept_id": query.concept_id,
                    "query_language": query.language,
                    "rank": rank,
                    "image_id": pool.image_ids[image],
                    "score": float(ranking.scores[i, rank - 1]),
                    "image_concept_id": int(pool.catalog.concept[image]),
                    "country": countries[rank - 1],
                    "region": regions[rank - 1],
                    "relevance": int(grade),
                }
            )
    return Scored(
        pa.Table.from_pylist(rows, schema=rm.PER_QUERY),
        pa.Table.from_pylist(top_rows, schema=rm.TOP_K),
        ties,
        tied,
        fixed,
    )


def top_grade_targets(
    pool: Pool, queries: Sequence[Query], shows: npt.NDArray[np.bool_], row: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """`rm.rank_images`' `image_group` and `target_group` for RAVENEA's MRR, whose target is the first image of the
    query's top grade (`rv.top_grade`): each image's group is the language of its country; a query's target group
    is its language where an image of its concept comes from a country of it (top grade 2), else -1, every image
    showing the concept (top grade 1; with none, top grade 0, there is nothing to find)."""
    codes, image_group = np.unique(pool.languages.astype(str), return_inverse=True)
    code_of = {str(code): j for j, code in enumerate(codes)}
    # Images showing each concept, per language of their country (as `score_queries` counts them).
    shown_by_language = np.stack([np.bincount(image_group[r], minlength=len(codes)) for r in shows])
    target_group = np.full(len(queries), -1, dtype=np.int64)
    for i, query in enumerate(queries):
        j = code_of.get(query.language)
        if j is not None and shown_by_language[row[i], j] > 0:
            target_group[i] = j
    return image_group.astype(np.int64), target_group


# --- the part --------------------------------------------------------------------------------------------------


def shows_matrix(catalog: Catalog, concept_ids: Sequence[int]) -> npt.NDArray[np.bool_]:
    """(concepts, images) bool: which images show each concept, by the assembly's rule (`Catalog.shows`)."""
    images = np.arange(len(catalog), dtype=np.int64)
    return np.stack([catalog.shows(images, np.full(len(images), c, dtype=np.int64)) for c in concept_ids])


def _query_vectors(
    queries: list[Query], encoder: TextImageEncoder, skipped: list[str]
) -> tuple[list[Query], npt.NDArray[np.float64]]:
    """The queries' unit vectors; a language whose texts the encoder has no vectors for (precomputed embeddings
    that cover other texts) is skipped, saying so."""
    kept: list[Query] = []
    matrices: list[npt.NDArray[np.float64]] = []
    for language in dict.fromkeys(q.language for q in queries):
        group = [q for q in queries if q.language == language]
        try:
            vectors = text_vectors([q.text for q in group], encoder)
        except KeyError:
            skipped.append(f"retrieval: the {language!r} queries (the encoder has no vectors for their texts)")
            continue
        kept += group
        matrices.append(vectors.take([q.text for q in group], "query text"))
    if not kept:
        raise ValueError("retrieval across universals: the encoder has no vector for any query text")
    return kept, np.concatenate(matrices)


def evaluate_retrieval(
    release: Release,
    encoder: TextImageEncoder,
    *,
    n_resamples: int,
    seed: int,
    progress: Progress | None = None,
) -> ResultPart:
    """Retrieval across universals over the release's whole image pool (GlobalRG §3.2, RAVENEA §3.1): one query per
    concept and query language (`build_queries`), ranked over every image of `image_metadata`, scored and averaged
    (`evaluate_pool`). ValueError, naming the release, when it has no image_metadata; the encoder's own errors
    (degenerate vectors, an image it has no vector for) as the 3XCM evaluation raises them."""
    if n_resamples < 0:
        raise ValueError("n_resamples must be >= 0")
    pool = load_pool(release)
    skipped: list[str] = []
    queries, shipped, missing = build_queries(pool)
    if missing:
        skipped.append(
            f"retrieval: {len(missing)} (concept, language) queries with no text (no image of the concept in that "
            f"language's countries, and no shipped translation), e.g. {missing[:3]}"
        )
    queries, query_matrix = _query_vectors(queries, encoder, skipped)
    vectors = image_vectors(release, pool.image_ids, encoder, progress)
    images = vectors.matrix if list(vectors.keys) == pool.image_ids else vectors.take(pool.image_ids, "image")
    part = evaluate_pool(pool, queries, query_matrix, images, n_resamples=n_resamples, seed=seed, progress=progress)
    part.metrics["settings"]["queries_with_shipped_translation"] = shipped
    part.skipped[:0] = skipped
    return part


def evaluate_pool(
    pool: Pool,
    queries: Sequence[Query],
    query_matrix: npt.NDArray[np.float64],
    images: npt.NDArray[np.float64],
    *,
    n_resamples: int,
    seed: int,
    progress: Progress | None = None,
) -> ResultPart:
    """The part from the queries' and the pool's unit vectors (rows aligned with `queries` and the pool's images):
    the ranking, the per-query metrics, their means with intervals, the figure and the card section."""
    concept_ids = sorted({q.concept_id for q in queries})
    shows = shows_matrix(pool.catalog, concept_ids)
    row = np.array([concept_ids.index(q.concept_id) for q in queries], dtype=np.int64)
    image_group, target_group = top_grade_targets(pool, queries, shows, row)
    ranking = rm.rank_images(
        query_matrix,
        images,
        shows,
        row,
        progress=progress,
        tolerance=m.TIE_TOLERANCE,
        image_group=image_group,
        target_group=target_group,
    )
    scored = score_queries(pool, queries, ranking, shows, row)
    per_query = scored.per_query
    summary = report.summarise(per_query, n_resamples, seed)
    tables = {**report.group_tables(summary), "top_k": scored.top_k}
    covered = _pool_covers(pool)
    warnings = [*_tie_warnings(scored, len(queries)), *_pool_warnings(scored, len(queries), covered)]
    settings = _settings(pool, len(queries), n_resamples, seed)
    means = report.summary_json(summary)
    metrics: RetrievalMetrics = {
        "settings": settings,
        "overall": means["overall"],
        "by_language": means["by_language"],
        "by_concept": means["by_concept"],
        "boundary_ties": {f"@{k}": count for k, count in scored.boundary_ties.items()},
        "skipped": [],
        "warnings": warnings,
    }
    # Only where something was decided without the model: a result without it reads exactly as before. RAVENEA's
    # scoring is counted apart (`ravenea`), beside the metrics each count has always named.
    if any(scored.tied.values()):
        metrics["ties"] = {"tolerance": m.TIE_TOLERANCE, "queries": len(queries), **_split_counts(scored.tied)}
    if any(scored.fixed.values()):
        metrics["pool_decides"] = {"queries": len(queries), **covered, **_split_counts(scored.fixed)}
    headline, ci95 = _headline(summary)
    return ResultPart(
        per_query=per_query,
        tables=tables,
        metrics=dict(metrics),
        headline=headline,
        ci95=ci95,
        figures={"precision_diversity.png": report.precision_diversity_png(summary)},
        card=report.card_section(summary, settings),
        skipped=metrics["skipped"],  # the same list: what evaluate_retrieval adds shows in both
        warnings=warnings,
    )


def _headline(summary: report.Summary) -> tuple[dict[str, Headline], dict[str, list[float | None]]]:
    """The headline (in `HEADLINE`'s order) and its intervals by flattened name: GlobalRG's metrics over the
    English queries (None without any), the means over every query, RAVENEA's scoring as one object."""
    english = summary.by_language.get(ENGLISH, (0, {}))[1]
    blank: report.Estimate = {"value": None, "ci_low": None, "ci_high": None}
    estimates: dict[str, report.Estimate] = {f"{name}_en": english.get(name, blank) for name in ENGLISH_HEADLINE}
    estimates |= {name: summary.overall[name] for name in ALL_HEADLINE}
    ravenea = {name: summary.overall[f"{rv.MEAN_PREFIX}{name}"] for name in RAVENEA_HEADLINE}
    headline: dict[str, Headline] = {name: e["value"] for name, e in estimates.items()}
    headline["ravenea"] = {name: e["value"] for name, e in ravenea.items()}
    estimates |= {f"{rv.MEAN_PREFIX}{name}": e for name, e in ravenea.items()}
    return headline, {name: [e["ci_low"], e["ci_high"]] for name, e in estimates.items()}


def _counts(per_metric: dict[str, int]) -> dict[str, int]:
    """The non-zero counts, by the name of the metric's mean (`mrr` for the reciprocal rank)."""
    return {rm.aggregate_name(name): count for name, count in per_metric.items() if count}


def _split_counts(per_metric: dict[str, int]) -> SplitCounts:
    """{"metrics": the counts of GlobalRG's, ours and trec_eval's metrics, "ravenea": RAVENEA's (`ravenea.mrr`),
    only where one is not 0}."""
    ravenea = _counts({name: count for name, count in per_metric.items() if name.startswith(rv.PREFIX)})
    out: SplitCounts = {
        "metrics": _counts({name: count for name, count in per_metric.items() if not name.startswith(rv.PREFIX)})
    }
    if ravenea:
        out["ravenea"] = ravenea
    return out


def _most(count: int, n: int) -> bool:
    """More than half the queries, the 3XCM evaluation's threshold for ties that decide winners."""
    return count * 2 > n


def _tie_warnings(scored: Scored, n: int) -> list[str]:
    """One warning naming each metric that ties decided for most queries, with how many."""
    parts = []
    for k in rm.K_VALUES:
        if _most(scored.boundary_ties[k], n):
            parts.append(f"precision@{k} and diversity@{k} ({scored.boundary_ties[k]})")
        if _most(scored.tied[f"ndcg@{k}"], n):
            parts.append(f"nDCG@{k} ({scored.tied[f'ndcg@{k}']})")
    if _most(scored.tied["reciprocal_rank"], n):
        parts.append(f"MRR ({scored.tied['reciprocal_rank']})")
    ravenea = [
        f"{rm.aggregate_name(name)} {count}"
        for name, count in scored.tied.items()
        if name.startswith(rv.PREFIX) and _most(count, n)
    ]
    if ravenea:
        parts.append(f"RAVENEA's scoring ({'; '.join(ravenea)})")
    if not parts:
        return []
    return [
        f"Retrieval: ties within {m.TIE_TOLERANCE:g} decided, for more than half of the {n} queries, "
        f"{_listed(parts)}: the pool's order, not the model, chose which of the tied images entered a top k, came "
        "first within it, or came first among those showing the concept; these are not measured. Check the vectors "
        "(one vector for every image ties everywhere)."
    ]


def _listed(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _pool_covers(pool: Pool) -> PoolCovers:
    """What the pool itself decides: the cut-offs k it fits inside, and its one country or region, if so."""
    countries, regions = sorted(set(pool.countries)), sorted(set(pool.regions))
    return {
        "pool_images": len(pool.image_ids),
        "k_at_least_pool": [k for k in rm.K_VALUES if len(pool.image_ids) <= k],
        "one_country": countries[0] if len(countries) == 1 else None,
        "one_region": regions[0] if len(regions) == 1 else None,
    }


def _pool_warnings(scored: Scored, n: int, covered: PoolCovers) -> list[str]:
    """Warnings for the metrics a degenerate pool decides whatever the model ranks: a pool no larger than k, one
    country or region (diversity 0), and the other metrics every ranking gives the same value for most queries."""
    out = []
    explained: set[str] = set()
    small = covered["k_at_least_pool"]
    if small:
        at = " and ".join(str(k) for k in small)
        # RAVENEA's k are smaller than ours: a pool within one of them is within k = 5 too.
        small_ravenea = [k for k in rv.K_VALUES if covered["pool_images"] <= k]
        also = f" (and RAVENEA's P@k at k = {' and '.join(str(k) for k in small_ravenea)})" if small_ravenea else ""
        out.append(
            f"Retrieval: the pool holds only {covered['pool_images']} image(s), no more than k = {at}: every image "
            f"is in every top k, so precision@k and diversity@k at k = {at}{also} are the pool's, not the model's; "
            "they are not measured."
        )
        explained |= {name for k in small for name in _cut_metrics(k)}
        explained |= {f"{rv.PREFIX}precision@{k}" for k in small_ravenea}
    one = {"country": covered["one_country"], "region": covered["one_region"]}
    single = [(unit, name) for unit in rm.UNITS if (name := one[unit]) is not None]
    if single:
        which = " and ".join(f"one {unit} ({name})" for unit, name in single)
        units = " and ".join(f"by {unit}" for unit, _ in single)
        out.append(
            f"Retrieval: every image of the pool comes from {which}: diversity@k {units} is 0 whatever the model "
            "ranks (GlobalRG Eq. 1 needs two cultures); it is not measured."
        )
        explained |= {f"diversity@{k}_{unit}{p}" for k in rm.K_VALUES for unit, _ in single for p in ("", "_pool")}
    rest = [
        f"{rm.aggregate_name(name)} ({count} of {n} queries)"
        for name, count in scored.fixed.items()
        if name not in explained and _most(count, n)
    ]
    if rest:
        out.append(
            f"Retrieval: every ranking of this pool gives the same {_listed(rest)}: the pool's images all have "
            "the same relevance to the query (all or none show its concept, or for RAVENEA's scoring are of its top "
            "grade, as in a one-image pool), so the pool, not the model, decides them; they are not measured."
        )
    return out


def _settings(pool: Pool, n_queries: int, n_resamples: int, seed: int) -> report.RetrievalSettings:
    return {
        "k": list(rm.K_VALUES),
        "ravenea_k": list(rv.K_VALUES),
        "pool_images": len(pool.image_ids),
        "pool_countries": len(set(pool.countries)),
        "pool_regions": len(set(pool.regions)),
        "n_queries": n_queries,
        "queries_with_shipped_translation": 0,
        "n_resamples": n_resamples,
        "seed": seed,
        "confidence": report.CONFIDENCE,
        "relevance": "2: shows the concept (its own, a tag, a byte or pixel copy: curation.rules.Catalog.shows) "
        "and comes from a country of the query's language; 1: shows it; 0: does not",
        "diversity": {
            "paper": "diversity@k_<unit>: GlobalRG Eq. 1, entropy / log(m), m = cultures in the top k; m = 1 -> 0",
            "pool": "diversity@k_<unit>_pool (ours): entropy / log(M), M = cultures in the pool; M = 1 -> 0",
        },
        "precision": "precision@k: grade >= 1 over k (GlobalRG §3.2's precision; equal to trec_eval's P@k); "
        "precision@k_native (ours): grade 2 over k",
        "english": "<metric>_en: the mean over the English queries only, the row comparable with GlobalRG's "
        "Table 3 (GlobalRG queries in English); fractions, where Table 3 gives percentages",
        "trec_eval": "mrr: trec_eval's recip_rank, 1 / rank of the first image of grade >= 1, 0 when none, every "
        "query in the mean; ndcg@k: trec_eval's ndcg_cut, gain = grade (linear), ideal = the pool's grades sorted",
        "ravenea": {
            "reading": "RAVENEA's own scoring, as its authors' src/gdeval.py computes it (yfyuan01/RAVENEA "
            "b7b3c290b3ad2c9caf17f28fefebfd9b912170ec, called by src/inference.py); k = 1, 3, 5 (retrieval_eval)",
            "top_grade": "the query's highest grade in the pool (max_relevance): 2, else 1, else 0 (no positive)",
            "precision": "ravenea.precision@k (precision_at_k): images of the top grade among the first k, over the "
            "images ranked there (at most k); 0 when the top grade is 0, in the mean",
            "mrr": "ravenea.mrr (mean_reciprocal_rank): 1 / rank of the first image of the top grade, over the "
            "queries whose top grade is > 0 only (its n)",
            "ndcg": "ravenea.ndcg@k (ndcg): gain 2^grade - 1, ideal = the same ranked list's grades sorted (every "
            "image is ranked: the pool's); 0 when the ideal is 0. gdeval.py adds 3 to every grade, as RAVENEA's "
            "labels go negative; ours (0, 1, 2) do not, and +3 would give grade 0 a gain of 7 (a query with nothing "
            "relevant would score 1), so it is not added",
        },
        "ranking": "cosine, highest first; an exact tie goes to the image earlier in image_metadata (RAVENEA's "
        "inference.py: a stable sort, a tie keeping the candidates' order); MRR's rank = 1 + the images scoring "
        "above the best relevant one (of the top grade, for RAVENEA's) + those tying it and lying before it",
        "regions": {
            "reading": "the release's reference pack, countries.csv `region`: GlobalRG's unit of region diversity "
            "(§3.2); the default pack's regions are GlobalRG's Table 1",
            "pack": pool.pack.info.name,
            "by_country": {c: pool.pack.region_of(c) for c in sorted(set(pool.countries))},
            "unknown_region_countries": pool.unknown_region,
            "n_unknown_region_countries": len(pool.unknown_region),
        },
    }
