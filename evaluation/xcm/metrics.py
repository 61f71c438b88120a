"""The 3XCM metrics over a release's tables and a model's embeddings (3XCM paper §3.2.2, §3.2.3, App. P and Q).

Pure functions: a release's RQ2 table (`benchmark`), its RQ3 table (`benchmark_cd`) and the caller's embeddings
(image_id -> vector, query text -> vector) in; pyarrow tables with explicit schemas and pydantic models out. No
model runs here.

- Scores are cosine similarities. Every vector is divided by its norm clamped at 1e-6 first, as the authors'
  `torch.nn.CosineSimilarity(dim=1, eps=1e-6)` does, so the score is a row-wise dot product. We compute in float64.
  The authors' cosine runs in their embeddings' own dtype (`evaluate_test_case`, `benchmark_evaluator.py`
  l.112-122, whose per-query `winner` is taken on those scores), but their aggregates cast the scores to float32
  whatever that dtype is: `s.to(torch.float32)` in `summarize_scores_with_metadata` (l.215), which their saved
  counts come from, and `.to(torch.float32)` in `summarize_scores` (l.179). So their counts rest on float32 scores
  even for float64 embeddings; that can only matter for a near-tie closer than float32 resolution, which the cast
  may make an exact tie (then their earlier slot wins, where our float64 scores keep the larger).
- The winner of a query is the first maximum in slot order, as in the authors' `SelfPreferenceBiasEvaluator`
  (`torch.argmax` over `[score_a, score_b, score_c]`, and numpy `argmax` in `summarize_scores_with_metadata`; both
  return the first maximal index): an exact tie goes to the earlier slot, correct before language-biased before
  irrelevant. RQ3 keeps the same rule over its six slots (the authors published no RQ3 evaluator).
- Ties in Eq. 3, three readings. The paper's, read literally: M_k = (1/N) sum_i 1[S_k,i = max(S_cr,i, S_lb,i,
  S_ti,i)] credits every candidate equal to the maximum, so an exact tie counts a win for each tied candidate (the
  M_k then sum to more than 1); the paper says nothing more of ties. The authors' code credits one: the first
  maximum (`evaluate_test_case`, l.122: `['a', 'b', 'c'][torch.argmax(score).item()]`; `summarize_scores`, l.182;
  `summarize_scores_with_metadata`, l.224). Ours follows their code (`first_argmax`): one winner per query, the
  earlier slot on a tie, so the M_k of a group sum to 1.
- A tie decides a winner when another candidate scores within `TIE_TOLERANCE` of the maximum (`tied_winners`):
  float32 embeddings cannot order such scores, so the slot order, not the model, chose. The winner rule is not
  changed by it; the evaluation counts such queries and says so when they decide most winners (degenerate vectors:
  one vector for every image gives M_cr = 1 and SP = 0 from ties alone).
- A zero (or non-finite) vector has no direction: `degenerate_rows` finds them, and the evaluation refuses them.
- M_k is micro-averaged: wins of k over the queries of the group (Eq. 3), as the authors' counts divided by their
  total; SP = M_lb / M_cr (Eq. 4), undefined (None) when M_cr = 0.
- Confidence intervals are percentile bootstraps over queries. Every statistic here is a function of the category
  counts, and resampling N queries with replacement draws those counts from Multinomial(N, observed shares), so
  the resamples are drawn as multinomial counts: exactly the index bootstrap's distribution, in O(resamples).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field
from scipy import stats

from data.schemas import RQ2_SLOTS, RQ3_SLOTS
from evaluation.intervals import group_rng as _group_rng
from evaluation.intervals import percentile_interval as _percentile_interval
from evaluation.models.vectors import TIE_TOLERANCE as TIE_TOLERANCE
from evaluation.models.vectors import Vectors as Vectors
from evaluation.models.vectors import VectorsLike as VectorsLike
from evaluation.models.vectors import as_vectors as as_vectors
from evaluation.models.vectors import first_argmax as first_argmax
from evaluation.models.vectors import tied_winners as tied_winners

#: Slot order = tie order. RQ2: (i) correct, (ii) language-biased, (iii) totally irrelevant (§3.2.2).
RQ2_CATEGORIES: tuple[str, ...] = tuple(name for name, _ in RQ2_SLOTS)
#: RQ3: (i) correct ... (vi) totally irrelevant (§3.2.3, Table 3's column order).
RQ3_CATEGORIES: tuple[str, ...] = tuple(RQ3_SLOTS)
#: The paper's subscripts of M_k (Eq. 3, Table 2 and Table 3).
PAPER_SYMBOL: dict[str, dict[str, str]] = {
    "rq2": {"correct": "cr", "language_biased": "lb", "irrelevant": "ti"},
    "rq3": {
        "correct": "cr",
        "object_relevant_language_biased": "orlb",
        "object_relevant": "or",
        "cultural_descriptor_relevant": "cdr",
        "language_biased": "lb",
        "irrelevant": "ti",
    },
}
#: App. P.2's two test pairs, (A, B): diff = rate_A - rate_B, as Tables 15-17 write it.
FAILURE_MODE_TESTS: dict[str, tuple[str, str]] = {
    # Query Language Association Bias Test: Object Relevant (Blue) vs Object-Relevant Language-biased (Purple).
    "ql_association": ("object_relevant", "object_relevant_language_biased"),
    # Cultural Descriptor Relevance (Yellow) vs Language-biased (Pink).
    "cd_vs_ql": ("cultural_descriptor_relevant", "language_biased"),
}

Task = Literal["rq2", "rq3"]
GroupBy = Literal["overall", "query_language", "query_country"]
GROUPINGS: tuple[GroupBy, ...] = ("overall", "query_language", "query_country")
QuerySource = Literal["text", "image"]  # the authors' "text-to-image" and "image-to-image" experiments
ALL = "all"  # the group name of the overall group


def _score_fields(categories: Sequence[str]) -> list[pa.Field]:
    return [pa.field(f"score_{c}", pa.float64(), nullable=False) for c in categories]


QUERY_GROUPS = ("query_concept", "query_country", "query_language")


def _per_query_schema(categories: Sequence[str], *extra: str) -> pa.Schema:
    """Per-query scores: the cosine of the query with each candidate, the winning category, the query's groups."""
    return pa.schema(
        [
            pa.field("query_index", pa.int32(), nullable=False),
            pa.field("query_image_id", pa.string(), nullable=False),
            *_score_fields(categories),
            *(pa.field(name, pa.string(), nullable=False) for name in ("winner", *QUERY_GROUPS, *extra)),
        ]
    )


#: Per-query RQ2 scores over the three candidates.
RQ2_PER_QUERY = _per_query_schema(RQ2_CATEGORIES)
#: Per-query RQ3 scores over the six candidates.
RQ3_PER_QUERY = _per_query_schema(RQ3_CATEGORIES, "descriptor_country")
#: Per-query similarity drift (Eq. 5) of each RQ3 candidate, from q_C to q_{C+CD}.
DRIFT_PER_QUERY = pa.schema(
    [
        pa.field("query_index", pa.int32(), nullable=False),
        pa.field("query_image_id", pa.string(), nullable=False),
        pa.field("query_country", pa.string(), nullable=False),
        pa.field("query_language", pa.string(), nullable=False),
        pa.field("descriptor_country", pa.string(), nullable=False),
        pa.field("plain_text", pa.string(), nullable=False),
        pa.field("descriptor_text", pa.string(), nullable=False),
        *[pa.field(f"drift_{c}", pa.float64(), nullable=False) for c in RQ3_CATEGORIES],
    ]
)
#: Win rates in long form: one row per (grouping, group, metric). `metric` is a category (M_k) or "sp".
WIN_RATES = pa.schema(
    [
        pa.field("task", pa.string(), nullable=False),
        pa.field("group_by", pa.string(), nullable=False),
        pa.field("group", pa.string(), nullable=False),
        pa.field("n", pa.int64(), nullable=False),
        pa.field("metric", pa.string(), nullable=False),
        pa.field("symbol", pa.string(), nullable=False),
        pa.field("wins", pa.int64()),  # null for sp
        pa.field("value", pa.float64()),
        pa.field("ci_low", pa.float64()),
        pa.field("ci_high", pa.float64()),
    ]
)
#: App. P.2 tests, one row per (test, grouping, group): Tables 15 (overall), 16 and 17 (per query country).
PREFERENCE_TESTS = pa.schema(
    [
        pa.field("test", pa.string(), nullable=False),
        pa.field("group_by", pa.string(), nullable=False),
        pa.field("group", pa.string(), nullable=False),
        pa.field("n", pa.int64(), nullable=False),
        pa.field("category_a", pa.string(), nullable=False),
        pa.field("category_b", pa.string(), nullable=False),
        pa.field("wins_a", pa.int64(), nullable=False),
        pa.field("wins_b", pa.int64(), nullable=False),
        pa.field("rate_a", pa.float64(), nullable=False),
        pa.field("rate_b", pa.float64(), nullable=False),
        pa.field("diff", pa.float64(), nullable=False),
        pa.field("statistic", pa.float64()),
        pa.field("dof", pa.int32(), nullable=False),
        pa.field("p_value", pa.float64()),
        pa.field("significant", pa.bool_(), nullable=False),
    ]
)
#: Mean drift per (grouping, group, candidate category): Table 18 is the `correct` rows per query country, x100.
DRIFT_MEANS = pa.schema(
    [
        pa.field("group_by", pa.string(), nullable=False),
        pa.field("group", pa.string(), nullable=False),
        pa.field("n", pa.int64(), nullable=False),
        pa.field("category", pa.string(), nullable=False),
        pa.field("mean_drift", pa.float64(), nullable=False),
    ]
)


# --- embeddings ----------------------------------------------------------------------------------------------


def _cosine(queries: NDArray[np.float64], candidates: NDArray[np.float64]) -> NDArray[np.float64]:
    if queries.shape[1] != candidates.shape[1]:
        raise ValueError(f"query vectors have {queries.shape[1]} dimensions, image vectors {candidates.shape[1]}")
    cosines: NDArray[np.float64] = np.einsum("ij,ij->i", queries, candidates)
    return cosines


# --- per-query scores ----------------------------------------------------------------------------------------


def _require(table: pa.Table, columns: Sequence[str], name: str) -> None:
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise ValueError(f"{name} lacks the column(s) {missing}")


def _strings(table: pa.Table, column: str) -> list[str]:
    values: list[str] = table.column(column).to_pylist()
    return values


def _candidate_scores(
    table: pa.Table,
    prefixes: Sequence[str],
    images: VectorsLike,
    texts: VectorsLike | None,
    query: QuerySource,
    text_column: str,
) -> NDArray[np.float64]:
    image_vectors = as_vectors(images)
    if query == "text":
        if texts is None:
            raise ValueError("text queries need the text embeddings")
        q = as_vectors(texts).take(_strings(table, text_column), "query text")
    else:  # the authors' image-to-image experiment: the query image's own embedding
        q = image_vectors.take(_strings(table, "query_image_id"), "image")
    columns = [_cosine(q, image_vectors.take(_strings(table, f"{p}image_id"), "image")) for p in prefixes]
    return np.column_stack(columns) if columns else np.zeros((table.num_rows, 0))


def _per_query_table(
    table: pa.Table,
    categories: Sequence[str],
    scores: NDArray[np.float64],
    schema: pa.Schema,
    extra: Sequence[str] = (),
) -> pa.Table:
    winner = np.asarray(categories, dtype=object)[first_argmax(scores)] if len(scores) else np.array([], object)
    columns: dict[str, pa.Array] = {
        "query_index": table.column("query_index").cast(pa.int32()),
        "query_image_id": table.column("query_image_id"),
    }
    for position, category in enumerate(categories):
        columns[f"score_{category}"] = pa.array(scores[:, position], pa.float64())
    columns["winner"] = pa.array(winner.tolist(), pa.string())
    for name in ("query_concept", "query_country", "query_language", *extra):
        columns[name] = table.column(name)
    return pa.table(columns, schema=schema)


def rq2_scores(
    benchmark: pa.Table,
    images: VectorsLike,
    texts: VectorsLike | None = None,
    *,
    query: QuerySource = "text",
    text_column: str = "query_text",
) -> pa.Table:
    """RQ2 (§3.2.2): S_cr, S_lb, S_ti of every triplet and its winner (`RQ2_PER_QUERY`).

    `benchmark` is a release's `benchmark` table: the candidates are looked up by their `*_image_id`, the query by
    its `query_text` (the concept in the query country's language; the authors embed the same string, the image
    row's `concept_in_native`, and index it by `query_index`), or, with `query="image"`, by `query_image_id`."""
    prefixes = [prefix for _, prefix in RQ2_SLOTS]
    needed = ["query_index", "query_image_id", "query_concept", "query_country", "query_language"]
    _require(benchmark, [*needed, *(f"{p}image_id" for p in prefixes), text_column], "the RQ2 table")
    scores = _candidate_scores(benchmark, prefixes, images, texts, query, text_column)
    return _per_query_table(benchmark, RQ2_CATEGORIES, scores, RQ2_PER_QUERY)


def rq3_scores(
    benchmark_cd: pa.Table,
    images: VectorsLike,
    texts: VectorsLike | None = None,
    *,
    query: QuerySource = "text",
    text_column: str = "query_text",
) -> pa.Table:
    """RQ3 (§3.2.3): the six scores of every sextet and its winner (`RQ3_PER_QUERY`). `query_text` is the
    descriptor query q_{C+CD} ("{concept} of {Y}" in the query's language)."""
    prefixes = [f"{c}_candidate_" for c in RQ3_CATEGORIES]
    needed = ["query_index", "query_image_id", "query_concept", "query_country", "query_language"]
    _require(
        benchmark_cd,
        [*needed, "descriptor_country", *(f"{p}image_id" for p in prefixes), text_column],
        "the RQ3 table",
    )
    scores = _candidate_scores(benchmark_cd, prefixes, images, texts, query, text_column)
    return _per_query_table(benchmark_cd, RQ3_CATEGORIES, scores, RQ3_PER_QUERY, ("descriptor_country",))


# --- win rates with bootstrap intervals ----------------------------------------------------------------------


class Estimate(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    value: float | None = Field(description="The estimate on the group's queries; None where undefined.")
    ci_low: float | None = Field(default=None, description="Lower percentile-bootstrap bound; None if not drawn.")
    ci_high: float | None = Field(default=None, description="Upper bound; None if not drawn or unbounded.")


class WinRates(BaseModel):
    """M_k of one group of queries (Eq. 3), and for RQ2 the SP score (Eq. 4)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task: Task
    group_by: GroupBy
    group: str = Field(description=f"The query language code or query country; {ALL!r} for the overall group.")
    n: int = Field(description="Queries in the group (N of Eq. 3).")
    wins: dict[str, int] = Field(description="Queries won by each category (slot name).")
    rates: dict[str, Estimate] = Field(description="M_k by category (slot name), a share in [0, 1].")
    sp: Estimate | None = Field(default=None, description="RQ2 only: SP = M_lb / M_cr, None when M_cr = 0.")

    def rate(self, symbol: str) -> Estimate:
        """M_k by the paper's subscript: 'cr', 'lb', 'ti' (RQ2) or 'cr', 'orlb', 'or', 'cdr', 'lb', 'ti' (RQ3)."""
        by_symbol = {s: c for c, s in PAPER_SYMBOL[self.task].items()}
        return self.rates[by_symbol[symbol]]


class WinRateReport(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    task: Task
    n_resamples: int
    confidence: float
    seed: int
    overall: WinRates
    by_language: list[WinRates]
    by_country: list[WinRates]

    def groups(self) -> list[WinRates]:
        return [self.overall, *self.by_language, *self.by_country]


def _groups(table: pa.Table, group_by: GroupBy) -> list[tuple[str, NDArray[np.integer]]]:
    """(group name, row positions) in sorted group order."""
    if group_by == "overall":
        return [(ALL, np.arange(table.num_rows))]
    values = np.asarray(table.column(group_by).to_pylist(), dtype=object)
    if len(values) == 0:
        return []
    names, inverse = np.unique(values.astype(str), return_inverse=True)
    return [(str(name), np.flatnonzero(inverse == i)) for i, name in enumerate(names)]


def _sp(lb: NDArray[np.number], cr: NDArray[np.number]) -> NDArray[np.float64]:
    """Eq. 4 on counts (N cancels); +inf where M_cr = 0 (an unbounded bootstrap bound is reported as None)."""
    lb, cr = np.asarray(lb, dtype=np.float64), np.asarray(cr, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(cr > 0, lb / np.where(cr > 0, cr, 1.0), np.inf)


def _win_rates(
    task: Task,
    group_by: GroupBy,
    group: str,
    winners: NDArray[np.integer],
    categories: Sequence[str],
    n_resamples: int,
    confidence: float,
    seed: int,
) -> WinRates:
    n = len(winners)
    counts = np.bincount(winners, minlength=len(categories)).astype(np.int64)
    draws = None
    if n_resamples > 0 and n > 0:
        # Resampling the n queries with replacement = drawing the category counts from Multinomial(n, counts/n).
        draws = _group_rng(seed, task, group_by, group).multinomial(n, counts / n, size=n_resamples)
    rates = {}
    for k, category in enumerate(categories):
        # Eq. 3: M_k = (1/N) sum_i 1[S_k,i = max(...)], the winner taken by the first-maximum rule.
        value = counts[k] / n if n else None
        low, high = _percentile_interval(draws[:, k] / n, confidence) if draws is not None else (None, None)
        rates[category] = Estimate(value=value, ci_low=low, ci_high=high)
    sp = None
    if task == "rq2":
        cr, lb = categories.index("correct"), categories.index("language_biased")
        point = float(_sp(counts[lb], counts[cr])) if n else np.inf
        low, high = (
            _percentile_interval(_sp(draws[:, lb], draws[:, cr]), confidence) if draws is not None else (None, None)
        )
        sp = Estimate(value=point if np.isfinite(point) else None, ci_low=low, ci_high=high)
    return WinRates(
        task=task,
        group_by=group_by,
        group=group,
        n=n,
        wins={c: int(counts[k]) for k, c in enumerate(categories)},
        rates=rates,
        sp=sp,
    )


def win_rates(
    per_query: pa.Table, task: Task, *, n_resamples: int = 1000, confidence: float = 0.95, seed: int = 0
) -> WinRateReport:
    """M_k (and SP for RQ2) overall, per query language and per query country (Tables 2, 3, 13, 14), each with a
    `confidence` percentile-bootstrap interval from `n_resamples` resamples of the group's queries (0: none)."""
    if n_resamples < 0:
        raise ValueError("n_resamples must be >= 0")
    if not 0.0 < confidence < 1.0:
        raise ValueError("confidence must be in (0, 1)")
    categories = RQ2_CATEGORIES if task == "rq2" else RQ3_CATEGORIES
    _require(per_query, ["winner", "query_language", "query_country"], "the per-query table")
    position = {c: i for i, c in enumerate(categories)}
    try:
        codes = np.fromiter((position[w] for w in per_query.column("winner").to_pylist()), np.int64, per_query.num_rows)
    except KeyError as exc:
        raise ValueError(f"winner {exc} is not a {task} category {categories}") from None

    def grouped(group_by: GroupBy) -> list[WinRates]:
        return [
            _win_rates(task, group_by, name, codes[rows], categories, n_resamples, confidence, seed)
            for name, rows in _groups(per_query, group_by)
        ]

    return WinRateReport(
        task=task,
        n_resamples=n_resamples,
        confidence=confidence,
        seed=seed,
        overall=grouped("overall")[0],
        by_language=grouped("query_language"),
        by_country=grouped("query_country"),
    )


def win_rates_table(report: WinRateReport) -> pa.Table:
    """The report in long form (`WIN_RATES`)."""
    rows = []
    for g in report.groups():
        base = {"task": g.task, "group_by": g.group_by, "group": g.group, "n": g.n}
        for category, estimate in g.rates.items():
            rows.append(
                base
                | {"metric": category, "symbol": PAPER_SYMBOL[g.task][category], "wins": g.wins[category]}
                | estimate.model_dump()
            )
        if g.sp is not None:
            rows.append(base | {"metric": "sp", "symbol": "SP", "wins": None} | g.sp.model_dump())
    return pa.Table.from_pylist(rows, schema=WIN_RATES)


# --- App. P: chi-squared tests of the two failure modes -------------------------------------------------------


class PreferenceTest(BaseModel):
    """One App. P.2 test in one group: does the model pick category A as often as category B?"""

    model_config = ConfigDict(frozen=True, extra="forbid")

    test: str = Field(description="'ql_association' (Blue vs Purple) or 'cd_vs_ql' (Yellow vs Pink).")
    group_by: GroupBy
    group: str
    n: int = Field(description="Queries in the group.")
    category_a: str
    category_b: str
    wins_a: int
    wins_b: int
    rate_a: float = Field(description="wins_a / n: the win rate Table 15 reports.")
    rate_b: float
    diff: float = Field(description="rate_a - rate_b (Tables 15-17's Diff).")
    statistic: float | None = Field(description="Chi-squared statistic; None when neither category won.")
    dof: int = 1
    p_value: float | None
    significant: bool = Field(description="p_value < alpha.")


def preference_chi_squared(wins_a: int, wins_b: int) -> tuple[float, float] | None:
    """App. P.1's goodness-of-fit test of H0: P(A) = P(B), as (statistic, p-value); None when O_A + O_B = 0.

    The observed cells are (O_A, O_B, O_rest), the expected (E, E, O_rest) with E = (O_A + O_B) / 2: the wins of
    the other categories are kept at their observed count, so their cell adds (O - E)^2 / E = 0 and the test has 1
    degree of freedom. That is scipy's default test on (O_A, O_B) alone (expected = their mean, dof = 2 - 1)."""
    if wins_a < 0 or wins_b < 0:
        raise ValueError("counts must be >= 0")
    if wins_a + wins_b == 0:
        return None
    result = stats.chisquare([wins_a, wins_b])
    return float(result.statistic), float(result.pvalue)


def failure_mode_tests(
    per_query: pa.Table, *, group_by: Sequence[GroupBy] = GROUPINGS, alpha: float = 0.05
) -> list[PreferenceTest]:
    """App. P.2's two tests over RQ3 per-query winners (`rq3_scores`), for each group of each grouping: Table 15
    is `overall`, Tables 16 and 17 are `query_country` (one column per query language culture)."""
    _require(per_query, ["winner", *(g for g in group_by if g != "overall")], "the RQ3 per-query table")
    winners = np.asarray(per_query.column("winner").to_pylist(), dtype=object)
    unknown = set(winners.tolist()) - set(RQ3_CATEGORIES)
    if unknown:
        raise ValueError(f"not RQ3 categories: {sorted(unknown)}")
    out = []
    for grouping in group_by:
        for name, rows in _groups(per_query, grouping):
            n = len(rows)
            for test, (a, b) in FAILURE_MODE_TESTS.items():
                wins_a, wins_b = int((winners[rows] == a).sum()), int((winners[rows] == b).sum())
                result = preference_chi_squared(wins_a, wins_b)
                statistic, p_value = result if result is not None else (None, None)
                rate_a, rate_b = (wins_a / n, wins_b / n) if n else (0.0, 0.0)
                out.append(
                    PreferenceTest(
                        test=test,
                        group_by=grouping,
                        group=name,
                        n=n,
                        category_a=a,
                        category_b=b,
                        wins_a=wins_a,
                        wins_b=wins_b,
                        rate_a=rate_a,
                        rate_b=rate_b,
                        diff=rate_a - rate_b,
                        statistic=statistic,
                        p_value=p_value,
                        significant=p_value is not None and p_value < alpha,
                    )
                )
    return out


def preference_tests_table(tests: Sequence[PreferenceTest]) -> pa.Table:
    return pa.Table.from_pylist([t.model_dump() for t in tests], schema=PREFERENCE_TESTS)


# --- Eq. 5: similarity drift ----------------------------------------------------------------------------------


def plain_query_texts(benchmark_cd: pa.Table, image_metadata: pa.Table) -> pa.Array:
    """q_C of each RQ3 row: the concept alone, in the query's language.

    A release stores only q_{C+CD} in `benchmark_cd.query_text`. q_C is the query image's `concept_in_native` in
    `image_metadata` (the build writes it from the same translation as the RQ2 `query_text`: curation/catalog.py and
    curation/assemble.py `QueryTexts.rq2`), looked up by `query_image_id`; a row whose image is missing, or whose
    language differs from the image's `language_code`, is an error. A country of several languages has a query per
    language for each image: a row in another of its country's languages takes the concept as an image of that
    country, concept and language has it (`nav-<code>` images: docs/reference-packs.md)."""
    _require(benchmark_cd, ["query_image_id", "query_language"], "the RQ3 table")
    _require(image_metadata, ["image_id", "concept_in_native"], "image_metadata")
    ids = _strings(image_metadata, "image_id")
    native = dict(zip(ids, _strings(image_metadata, "concept_in_native"), strict=True))
    language = (
        dict(zip(ids, _strings(image_metadata, "language_code"), strict=True))
        if "language_code" in image_metadata.column_names
        else None
    )
    spoken = _spoken_texts(image_metadata, ids) if language is not None else {}
    texts = []
    for image_id, code in zip(
        _strings(benchmark_cd, "query_image_id"), _strings(benchmark_cd, "query_language"), strict=True
    ):
        if image_id not in native:
            raise KeyError(f"query image {image_id!r} is not in image_metadata")
        if language is not None and language[image_id] != code:
            text = spoken.get((image_id, code))
            if text is None:
                raise ValueError(f"query image {image_id!r} is in {language[image_id]!r}, its RQ3 row in {code!r}")
            texts.append(text)
            continue
        texts.append(native[image_id])
    return pa.array(texts, pa.string())


def _spoken_texts(image_metadata: pa.Table, ids: list[str]) -> dict[tuple[str, str], str]:
    """(image id, language) -> the image's concept in that language, for each other language its country's images
    are in (a country of one language has none)."""
    if not {"country", "concept_id"} <= set(image_metadata.column_names):
        return {}
    countries = _strings(image_metadata, "country")
    concepts = image_metadata.column("concept_id").to_pylist()
    codes = _strings(image_metadata, "language_code")
    natives = _strings(image_metadata, "concept_in_native")
    text: dict[tuple[str, object, str], str] = {}
    languages: dict[str, set[str]] = {}
    for country, concept, code, native in zip(countries, concepts, codes, natives, strict=True):
        text.setdefault((country, concept, code), native)
        languages.setdefault(country, set()).add(code)
    if all(len(found) == 1 for found in languages.values()):
        return {}
    out: dict[tuple[str, str], str] = {}
    for image_id, country, concept, own in zip(ids, countries, concepts, codes, strict=True):
        for code in languages[country] - {own}:
            if (country, concept, code) in text:
                out[(image_id, code)] = text[(country, concept, code)]
    return out


def similarity_drift(
    benchmark_cd: pa.Table,
    plain_texts: Sequence[str] | pa.Array,
    images: VectorsLike,
    texts: VectorsLike,
    *,
    descriptor_text_column: str = "query_text",
) -> pa.Table:
    """Eq. 5 for each RQ3 row and each of its six candidates: Δsim(I) = S(q_{C+CD}, I) - S(q_C, I), with q_{C+CD}
    the row's `descriptor_text_column` and q_C the aligned `plain_texts` (`plain_query_texts`)."""
    prefixes = [f"{c}_candidate_" for c in RQ3_CATEGORIES]
    needed = ["query_index", "query_image_id", "query_country", "query_language", "descriptor_country"]
    _require(benchmark_cd, [*needed, *(f"{p}image_id" for p in prefixes), descriptor_text_column], "the RQ3 table")
    plain = plain_texts.to_pylist() if isinstance(plain_texts, pa.Array | pa.ChunkedArray) else list(plain_texts)
    if len(plain) != benchmark_cd.num_rows:
        raise ValueError(f"{len(plain)} plain texts for {benchmark_cd.num_rows} RQ3 rows")
    image_vectors, text_vectors = as_vectors(images), as_vectors(texts)
    descriptor = _strings(benchmark_cd, descriptor_text_column)
    q_cd = text_vectors.take(descriptor, "query text")
    q_c = text_vectors.take(plain, "query text")
    columns: dict[str, pa.Array] = {
        "query_index": benchmark_cd.column("query_index").cast(pa.int32()),
        **{name: benchmark_cd.column(name) for name in needed[1:]},
        "plain_text": pa.array(plain, pa.string()),
        "descriptor_text": pa.array(descriptor, pa.string()),
    }
    for category, prefix in zip(RQ3_CATEGORIES, prefixes, strict=True):
        candidate = image_vectors.take(_strings(benchmark_cd, f"{prefix}image_id"), "image")
        columns[f"drift_{category}"] = pa.array(_cosine(q_cd, candidate) - _cosine(q_c, candidate), pa.float64())
    return pa.table(columns, schema=DRIFT_PER_QUERY)


class DriftMeans(BaseModel):
    """Mean Δsim per candidate category over one group's RQ3 rows (App. Q, Table 18 without its x100)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    group_by: GroupBy
    group: str
    n: int
    mean_drift: dict[str, float]


def drift_means(drift: pa.Table, *, group_by: Sequence[GroupBy] = GROUPINGS) -> list[DriftMeans]:
    """Mean of Eq. 5 per category, for each group of each grouping (Table 18: `correct`, per query country)."""
    _require(drift, [f"drift_{c}" for c in RQ3_CATEGORIES], "the drift table")
    values = np.column_stack([drift.column(f"drift_{c}").to_numpy() for c in RQ3_CATEGORIES])
    out = []
    for grouping in group_by:
        for name, rows in _groups(drift, grouping):
            if len(rows) == 0:
                continue
            means = values[rows].mean(axis=0)
            out.append(
                DriftMeans(
                    group_by=grouping,
                    group=name,
                    n=len(rows),
                    mean_drift={c: float(means[k]) for k, c in enumerate(RQ3_CATEGORIES)},
                )
            )
    return out


def drift_means_table(means: Sequence[DriftMeans]) -> pa.Table:
    rows = [
        {"group_by": m.group_by, "group": m.group, "n": m.n, "category": c, "mean_drift": v}
        for m in means
        for c, v in m.mean_drift.items()
    ]
    return pa.Table.from_pylist(rows, schema=DRIFT_MEANS)
