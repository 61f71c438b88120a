"""Per-query ranking metrics of the retrieval across universals (GlobalRG §3.2) and trec_eval's ranking metrics, as
pure numpy functions; the blockwise ranking of a whole image pool (`rank_images`); the pyarrow schemas of the
retrieval part's tables. RAVENEA's own scoring, as its authors' gdeval.py computes it, is `ravenea_metrics`.

A query's ranking is a list of image positions, best first; its relevance grades are one integer per image of the
pool: 2 = shows the concept and comes from a country of the query's language, 1 = shows the concept, 0 = neither.

- precision@k (GlobalRG §3.2, "the ratio of the top k retrieved images that correctly answer the query"): images of
  grade >= 1 among the first k, over k. It equals trec_eval's P@k (which also divides by k when fewer than k
  images were ranked), not RAVENEA's (gdeval.py counts only the query's highest grade: `ravenea_metrics`).
- diversity@k (GlobalRG §3.2, Eq. 1): -1/log(m) * sum_i p_i log p_i over the cultures (countries, or regions) of the
  top k, p_i the share of culture i there, m "the total number of cultures in the top k". m = 1 (every image from
  one culture) has log m = 0: the top k is as little diverse as it can be, so it scores 0.
- Pool-normalised entropy (ours, not the paper's): the same entropy over log(M), M the number of cultures in the
  whole pool. Eq. 1's log m rescales each top k to its own cultures, so 5 images from 2 countries (3 + 2) score
  0.97; over log M they score how much of the pool's spread the top k reaches, at most log(min(k, M)) / log M.
- Reciprocal rank (trec_eval's `recip_rank`, MRR's term): 1 / rank of the first image of grade >= 1; 0 when none.
- nDCG@k (trec_eval's `ndcg_cut`, and so `ir_measures`' nDCG@k): DCG@k = sum_{i<=k} grade_i / log2(i + 1), over
  the DCG@k of the grades sorted from the highest (over the whole pool, not only the ranked images); 0 when the pool
  has no relevant image. The gain is the grade itself (linear); RAVENEA's gdeval.py takes 2^grade - 1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from numpy.typing import ArrayLike

from evaluation.xcm import ravenea_metrics as rv

#: The cut-offs of GlobalRG's and trec_eval's @k metrics: GlobalRG discusses diversity@5 (§3.4, Table 3); 5 and 10
#: are the issue's choice. RAVENEA's own scoring has its Table 2's 1, 3 and 5 (`ravenea_metrics.K_VALUES`).
K_VALUES: tuple[int, ...] = (5, 10)
#: Ranked images kept per query: the largest k, and one more to tell whether a tie decided the k-th place.
DEPTH = max(*K_VALUES, *rv.K_VALUES) + 1
#: Score-block budget, in float64 elements (64 MiB), so a 100k-image pool is never scored at once.
BLOCK_ELEMENTS = 1 << 23
#: Grades of the graded relevance.
NOT_RELEVANT, RELEVANT, RELEVANT_NATIVE = 0, 1, 2
#: Culture units of diversity@k (GlobalRG §3.2: "with respect to both the country and the region").
UNITS: tuple[str, ...] = ("country", "region")


def precision_at_k(grades: ArrayLike, k: int, min_grade: int = RELEVANT) -> float:
    """Share of the first k ranked images with a grade >= `min_grade`, over k (trec_eval's P@k)."""
    if k < 1:
        raise ValueError("k must be >= 1")
    top = np.asarray(grades)[:k]
    return float(np.count_nonzero(top >= min_grade)) / k


def entropy(labels: Sequence[str]) -> tuple[float, int]:
    """(Shannon entropy in nats of the labels' shares, number of distinct labels)."""
    if len(labels) == 0:
        return 0.0, 0
    _, counts = np.unique(np.asarray(labels, dtype=object).astype(str), return_counts=True)
    p = counts / counts.sum()
    return float(-(p * np.log(p)).sum()), len(counts)


def diversity_at_k(labels: Sequence[str], k: int) -> float:
    """GlobalRG Eq. 1 on the cultures of the first k ranked images: entropy over log(m), m the number of cultures
    among them; 0 when m <= 1 (one culture, or nothing ranked)."""
    h, m = entropy(labels[:k])
    return h / np.log(m) if m > 1 else 0.0


def pool_diversity_at_k(labels: Sequence[str], k: int, pool_cultures: int) -> float:
    """Ours: the entropy of Eq. 1 over log(M), M = `pool_cultures`, the cultures of the whole pool; 0 when M <= 1."""
    h, _ = entropy(labels[:k])
    return h / np.log(pool_cultures) if pool_cultures > 1 else 0.0


def reciprocal_rank(first_relevant_rank: int | None) -> float:
    """1 / the 1-based rank of the first relevant image; 0 when the ranking has none."""
    return 1.0 / first_relevant_rank if first_relevant_rank else 0.0


def linear_gain(grades: ArrayLike) -> npt.NDArray[np.float64]:
    """trec_eval's `ndcg_cut` gain: the grade itself."""
    return np.asarray(grades, dtype=np.float64)


def dcg(grades: ArrayLike, k: int) -> float:
    return rv.dcg(grades, k, linear_gain)


def ndcg_at_k(grades: ArrayLike, k: int, pool_grades: ArrayLike) -> float:
    """DCG@k of the ranking's grades over the ideal DCG@k of every grade in the pool; 0 when the ideal is 0 (RAVENEA's
    DCG with trec_eval's linear gain)."""
    return rv.ndcg_at_k(grades, k, pool_grades, linear_gain)


def metric_names(k_values: Sequence[int] = K_VALUES) -> list[str]:
    """The per-query metric columns, in table order: per k, precision (grade >= 1), precision of the native
    (grade 2, ours), the paper's and the pool-normalised diversity per unit, nDCG; then the reciprocal rank; then
    RAVENEA's own scoring (`ravenea_metrics.metric_names`)."""
    names: list[str] = []
    for k in k_values:
        names += [f"precision@{k}", f"precision@{k}_native"]
        for unit in UNITS:
            names += [f"diversity@{k}_{unit}", f"diversity@{k}_{unit}_pool"]
        names.append(f"ndcg@{k}")
    return [*names, "reciprocal_rank", *rv.metric_names()]


def aggregate_name(metric: str) -> str:
    """The name of a per-query metric's mean over queries: `reciprocal_rank` -> `mrr`, `ravenea_<m>` ->
    `ravenea.<m>` (the headline's flattened name), the others keep theirs."""
    prefix = rv.MEAN_PREFIX if metric.startswith(rv.PREFIX) else ""
    base = metric.removeprefix(rv.PREFIX)
    return prefix + ("mrr" if base == "reciprocal_rank" else base)


METRICS: tuple[str, ...] = tuple(metric_names())
#: Per-query columns that are null where the metric leaves the query out of its mean (RAVENEA's MRR: no positive
#: item); their means are over the other queries, and say how many (`n`).
LEAVES_OUT: frozenset[str] = frozenset({rv.RECIPROCAL_RANK})

#: One row per query (concept x query language).
PER_QUERY = pa.schema(
    [
        pa.field("concept_id", pa.int32(), nullable=False),
        pa.field("concept", pa.string(), nullable=False),
        pa.field("query_language", pa.string(), nullable=False),
        pa.field("query_text", pa.string(), nullable=False),
        pa.field("n_relevant", pa.int64(), nullable=False),  # images of the pool showing the concept (grade >= 1)
        pa.field("n_relevant_native", pa.int64(), nullable=False),  # of them, from the query language (grade 2)
        pa.field("first_relevant_rank", pa.int64()),  # 1-based; null when the pool shows the concept nowhere
        pa.field("top_grade", pa.int8(), nullable=False),  # the query's highest grade in the pool (RAVENEA's max)
        pa.field("first_top_grade_rank", pa.int64()),  # 1-based rank of its first image; null when top_grade is 0
        *(pa.field(name, pa.float64(), nullable=name in LEAVES_OUT) for name in METRICS),
    ]
)
#: The top 10 of every query, one row per (query, rank).
TOP_K = pa.schema(
    [
        pa.field("concept_id", pa.int32(), nullable=False),
        pa.field("query_language", pa.string(), nullable=False),
        pa.field("rank", pa.int32(), nullable=False),  # 1-based
        pa.field("image_id", pa.string(), nullable=False),
        pa.field("score", pa.float64(), nullable=False),  # cosine similarity
        pa.field("image_concept_id", pa.int32(), nullable=False),
        pa.field("country", pa.string(), nullable=False),
        pa.field("region", pa.string(), nullable=False),
        pa.field("relevance", pa.int8(), nullable=False),  # 0, 1, 2
    ]
)
#: Means over a group's queries with their bootstrap interval, long form: by query language, or by concept (whose
#: `group` is the concept id and `concept` its name), or overall (`group` "all").
GROUP_METRICS = pa.schema(
    [
        pa.field("group_by", pa.string(), nullable=False),  # overall | query_language | concept
        pa.field("group", pa.string(), nullable=False),
        pa.field("concept", pa.string()),  # the concept's name for group_by = concept
        pa.field("n", pa.int64(), nullable=False),  # queries the mean is over (RAVENEA's MRR: those with a positive)
        pa.field("metric", pa.string(), nullable=False),  # `aggregate_name` of a per-query column
        pa.field("value", pa.float64()),
        pa.field("ci_low", pa.float64()),
        pa.field("ci_high", pa.float64()),
    ]
)


# --- ranking -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ranking:
    top: npt.NDArray[np.int64]  # int64 (queries, depth): image positions, best first; -1 past the pool's end
    scores: npt.NDArray[np.float64]  # float64 (queries, depth): their cosines; -inf past the pool's end
    first_relevant: npt.NDArray[np.int64]  # int64 (queries,): 1-based rank of the first relevant image; 0 when none
    # bool (queries,): an image not showing the concept scores within the tolerance of the best relevant one, so
    # the tie rule, not the model, placed the first relevant image (and so the reciprocal rank)
    first_relevant_tied: npt.NDArray[np.bool_]
    # The same two for `rank_images`' `targets` (RAVENEA's MRR: the images of the query's top grade); None without
    first_target: npt.NDArray[np.int64] | None = None
    first_target_tied: npt.NDArray[np.bool_] | None = None


@dataclass(frozen=True)
class _Sets:
    """The images whose first `rank_images` ranks, per query: those showing its concept (`shows[concept[i]]`) and,
    with `target_group`, its targets: those of them whose `image_group` is the query's target group (all of them
    where that is -1). The targets are derived from the relevant images block by block, never stored per query."""

    shows: npt.NDArray[np.bool_]  # bool (concepts, images)
    concept: npt.NDArray[np.integer]  # (queries,): row of `shows`
    image_group: npt.NDArray[np.integer] | None  # int (images,)
    target_group: npt.NDArray[np.integer] | None  # int (queries,)

    @staticmethod
    def _targets(
        relevant: npt.NDArray[np.bool_], groups: npt.NDArray[np.integer], target_group: npt.NDArray[np.integer]
    ) -> npt.NDArray[np.bool_]:
        group = target_group[:, None]
        targets: npt.NDArray[np.bool_] = relevant & ((group < 0) | (groups == group))
        return targets

    def block(
        self, index: npt.NDArray[np.integer], queries: npt.NDArray[np.integer] | slice = slice(None)
    ) -> list[npt.NDArray[np.bool_]]:
        """Per set, (queries, len(index)) bool: which images at `index` are in each query's set."""
        relevant = self.shows[:, index][self.concept[queries]]
        if self.target_group is None or self.image_group is None:
            return [relevant]
        return [relevant, self._targets(relevant, self.image_group[index][None, :], self.target_group[queries])]

    def at(self, positions: npt.NDArray[np.int64]) -> list[npt.NDArray[np.bool_]]:
        """Per set, (queries, depth) bool: whether each kept image (position -1: none) is in its query's set."""
        inside = np.maximum(positions, 0)
        relevant = self.shows[self.concept[:, None], inside] & (positions >= 0)
        if self.target_group is None or self.image_group is None:
            return [relevant]
        return [relevant, self._targets(relevant, self.image_group[inside], self.target_group)]


def _merge_top(
    scores: npt.NDArray[np.floating],
    index: npt.NDArray[np.integer],
    best: npt.NDArray[np.float64],
    best_index: npt.NDArray[np.int64],
    depth: int,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """The first `depth` of (running best + a block's scores) per row, ordered by score, then by image position."""
    both = np.concatenate([best, scores], axis=1)
    positions = np.concatenate([best_index, np.broadcast_to(index, scores.shape)], axis=1)
    # Only the candidates at or above each row's depth-th largest score can enter; lexsort orders them exactly.
    kth = min(depth, both.shape[1]) - 1
    threshold = -np.partition(-both, kth, axis=1)[:, kth]
    rows, cols = np.nonzero(both >= threshold[:, None])
    values, at = both[rows, cols], positions[rows, cols]
    order = np.lexsort((at, -values, rows))
    rows, values, at = rows[order], values[order], at[order]
    place = np.arange(len(rows)) - np.searchsorted(rows, rows)  # position within its row
    keep = place < depth
    new_best = np.full((both.shape[0], depth), -np.inf)
    new_index = np.full((both.shape[0], depth), -1, dtype=np.int64)
    new_best[rows[keep], place[keep]] = values[keep]
    new_index[rows[keep], place[keep]] = at[keep]
    return new_best, new_index


def _first_in_top(
    kept: npt.NDArray[np.bool_],
    score: npt.NDArray[np.float64],
    position: npt.NDArray[np.int64],
    best: npt.NDArray[np.float64],
    best_index: npt.NDArray[np.int64],
    tolerance: float,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_], npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """For one set of images per query, from the kept top (`best`, `best_index`: its scores and positions; `kept`:
    which of them are in the set) and the set's best image (`score`, `position`; -inf where the set is empty): the
    best image's 1-based rank if it is in the top (else 0), whether an image outside the set ties it there, whether
    it lies below the top, and whether the band within `tolerance` of it reaches the top's last image (so more ties
    may lie below, unseen)."""
    first = np.zeros(len(score), dtype=np.int64)
    hit = best_index == position[:, None]
    in_top = hit.any(axis=1)
    first[in_top] = hit[in_top].argmax(axis=1) + 1
    found = np.isfinite(score)
    with np.errstate(invalid="ignore"):  # -inf - -inf past the pool's end: NaN, outside the band
        band = np.abs(best - score[:, None]) <= tolerance
    tied = found & (band & ~kept).any(axis=1)
    unseen = found & ~tied & in_top & band[:, -1] & (best_index[:, -1] >= 0)
    return first, tied, ~in_top & found, unseen


def rank_images(
    queries: npt.NDArray[np.floating],
    images: npt.NDArray[np.floating],
    shows: npt.NDArray[np.bool_],
    query_concept: npt.NDArray[np.integer],
    *,
    depth: int = DEPTH,
    block_size: int | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    tolerance: float = 0.0,
    image_group: npt.NDArray[np.integer] | None = None,
    target_group: npt.NDArray[np.integer] | None = None,
) -> Ranking:
    """Each query's top `depth` images of the whole pool and the rank of its first relevant image.

    `queries` (q, d) and `images` (n, d) are unit rows; `shows` (c, n) says which images show concept c, and
    `query_concept` (q,) is each query's row of it. The order is by cosine, highest first, an exact tie going to
    the image earlier in the pool (lower position); the same rule ranks the first relevant image:
    rank = 1 + the images scoring strictly higher than the best-scoring relevant image + the images scoring the
    same and lying before it. Two passes over the blocks: the first finds the top and the best relevant image, the
    second, only when a query's first relevant image is not in its top, counts what outranks it (the same matrix
    products again, so each score compared is the one that ranked).

    With `image_group` (n,) and `target_group` (q,), both int, a second set per query, its targets, is ranked the
    same way in the same two passes (`first_target`, `first_target_tied`): the relevant images whose group is the
    query's target group, or all of them where that is -1. RAVENEA's MRR needs the first image of the query's top
    grade, which may lie below the kept top: with the language of the image's country as its group, the query's
    language for a query whose top grade is 2, and -1 for top grade 1.

    `first_relevant_tied` marks the queries where an image not showing the concept scores within `tolerance` of
    the best relevant image: the tie rule placed it, not the model. The kept top answers that for most queries;
    the second pass, for those whose first relevant image lies below it or whose band of ties runs past it."""
    n_queries, n_images = queries.shape[0], images.shape[0]
    if queries.shape[1] != images.shape[1]:
        raise ValueError(f"query vectors have {queries.shape[1]} dimensions, image vectors {images.shape[1]}")
    if (image_group is None) != (target_group is None):
        raise ValueError("image_group and target_group go together")
    sets = _Sets(shows, query_concept, image_group, target_group)
    n_sets = 1 if target_group is None else 2
    block = block_size or max(1, BLOCK_ELEMENTS // max(1, n_queries))
    starts = list(range(0, n_images, block))
    best: npt.NDArray[np.float64]
    best_index: npt.NDArray[np.int64]
    best, best_index = np.full((n_queries, 0), -np.inf), np.zeros((n_queries, 0), dtype=np.int64)
    set_score = [np.full(n_queries, -np.inf) for _ in range(n_sets)]  # per set, its best image's score, position
    set_index = [np.full(n_queries, n_images, dtype=np.int64) for _ in range(n_sets)]

    def scored(start: int) -> tuple[npt.NDArray[np.floating], npt.NDArray[np.integer]]:
        index = np.arange(start, min(start + block, n_images))
        return queries @ images[index].T, index

    for done, start in enumerate(starts, 1):
        scores, index = scored(start)
        best, best_index = _merge_top(scores, index, best, best_index, depth)
        for inside, score, position in zip(sets.block(index), set_score, set_index, strict=True):
            masked = np.where(inside, scores, -np.inf)
            block_best = masked.max(axis=1)
            better = block_best > score  # an equal score in a later block lies after: the earlier one stays
            score[better] = block_best[better]
            position[better] = index[masked.argmax(axis=1)[better]]  # argmax: the first maximum
        if progress is not None:
            progress("retrieve", done, 2 * len(starts))
    if best.shape[1] < depth:  # a pool smaller than the depth
        pad = depth - best.shape[1]
        best = np.pad(best, ((0, 0), (0, pad)), constant_values=-np.inf)
        best_index = np.pad(best_index, ((0, 0), (0, pad)), constant_values=-1)

    # Ties with each set's best image among the kept top: an image outside the set inside the band decides.
    placed = [
        _first_in_top(kept, score, position, best, best_index, tolerance)
        for kept, score, position in zip(sets.at(best_index), set_score, set_index, strict=True)
    ]
    firsts, tieds = [p[0] for p in placed], [p[1] for p in placed]
    # Below the kept top the band is unseen: scan the pool for those queries too (only with ties at its end).
    below = [outside | (unseen & (n_images > depth)) for _, _, outside, unseen in placed]
    scan = np.flatnonzero(np.logical_or.reduce(below))
    if len(scan):
        ahead = np.zeros((n_sets, len(scan)), dtype=np.int64)
        near = np.zeros((n_sets, len(scan)), dtype=bool)
        for done, start in enumerate(starts, len(starts) + 1):
            scores, index = scored(start)
            scores = scores[scan]
            for j, inside in enumerate(sets.block(index, scan)):
                s, i = set_score[j][scan, None], set_index[j][scan, None]
                ahead[j] += ((scores > s) | ((scores == s) & (index < i))).sum(axis=1)
                near[j] |= ((np.abs(scores - s) <= tolerance) & ~inside).any(axis=1)
            if progress is not None:
                progress("retrieve", done, 2 * len(starts))
        for j, (_, _, outside, _) in enumerate(placed):
            firsts[j][outside] = ahead[j][outside[scan]] + 1
            tieds[j][scan] |= near[j]  # what the whole pool shows: true wherever it is found
    if n_sets == 1:
        return Ranking(best_index, best, firsts[0], tieds[0])
    return Ranking(best_index, best, firsts[0], tieds[0], firsts[1], tieds[1])
