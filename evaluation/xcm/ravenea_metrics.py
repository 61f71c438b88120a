"""RAVENEA's own scoring (RAVENEA §3.1 and Table 2: MRR, P@1/3/5, nDCG@1/3/5) as its authors' code computes it:
`src/gdeval.py` of github.com/yfyuan01/RAVENEA at commit b7b3c290b3ad2c9caf17f28fefebfd9b912170ec, called by
`retrieval_eval` at the end of `src/inference.py`. Written from the rules below, not copied; a test runs their file
on a crafted case when it is at hand (tests/evaluation/xcm/test_ravenea_metrics.py).

The rules, with the function of gdeval.py each follows:

- The ranked list (inference.py, `sorted(zip(valid_candidate_ids, scores), key=..., reverse=True)`): candidates by
  score, highest first; Python's sort is stable, so a tie keeps the candidates' order. Ours: every image of the pool
  by cosine, an exact tie going to the image earlier in `image_metadata` (`retrieval_metrics.rank_images`): the same
  rule with the pool's order as the candidates' order.
- The top grade (`precision_at_k`'s `max_relevance`, `mean_reciprocal_rank`'s `max_value`): the highest grade among
  the query's judged items. Our pool is judged whole: 2 when an image of the concept comes from a country of the
  query's language, else 1 when an image shows the concept, else 0 (no positive item).
- P@k (`precision_at_k`): the items of the top grade among the first k ranked, over the number of items ranked
  there (`len(top_k_preds)`, at most k); 0 when the top grade is <= 0, and that 0 is in the mean.
- MRR (`mean_reciprocal_rank`): 1 / the 1-based rank of the first item of the top grade (0 when the list has none);
  a query whose top grade is <= 0 is left out of the mean (`count` grows only when `max_value > 0`).
- nDCG@k (`ndcg`): DCG = sum over the first k of (2^g - 1) / log2(i + 1), i the 1-based rank; the ideal is the
  same ranked list's grades sorted highest first (`gts = sorted(relevance_list, reverse=True)[:k]`), which, every
  image being ranked, is the pool's; 0 when the ideal DCG is 0; every query in the mean. `ndcg` first adds 3 to
  every grade ("Convert negative relevance to 0": RAVENEA's labels go negative). Ours are 0, 1 and 2, never
  negative; +3 would give a grade 0 a gain of 2^3 - 1 = 7 (against 31 for a grade 2), and a query with nothing
  relevant in the pool would score nDCG 1 instead of 0. We take 2^g - 1 on our grades as they are.
- k = 1, 3 and 5 (`retrieval_eval`'s `for k in [1, 3, 5]`).

Pure numpy; the per-query columns are `ravenea_<metric>` (`ravenea_reciprocal_rank` for MRR's term, null where the
query is left out), their means `ravenea.<metric>` (`ravenea.mrr`), the headline's flattened names.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike, NDArray

#: RAVENEA's cut-offs (gdeval.py `retrieval_eval`, Table 2).
K_VALUES: tuple[int, ...] = (1, 3, 5)
#: Per-query columns start with PREFIX; their means (and headline keys, flattened) with MEAN_PREFIX.
PREFIX, MEAN_PREFIX = "ravenea_", "ravenea."
#: The per-query column of MRR's term: null for a query with no positive item, which MRR leaves out.
RECIPROCAL_RANK = f"{PREFIX}reciprocal_rank"


def metric_names() -> list[str]:
    """The per-query columns, in Table 2's order: MRR's term, P@1, P@3, P@5, nDCG@1, nDCG@3, nDCG@5."""
    return [
        RECIPROCAL_RANK,
        *(f"{PREFIX}precision@{k}" for k in K_VALUES),
        *(f"{PREFIX}ndcg@{k}" for k in K_VALUES),
    ]


def top_grade(n_relevant: int, n_relevant_native: int) -> int:
    """The query's highest grade in the pool: 2, 1, or 0 (no positive item)."""
    return 2 if n_relevant_native > 0 else 1 if n_relevant > 0 else 0


def precision_at_k(grades: ArrayLike, k: int, top: int) -> float:
    """gdeval.py `precision_at_k`: images of grade `top` among the first k ranked, over how many were ranked there
    (at most k); 0 when `top` <= 0. `grades` are the ranked images' grades, best first."""
    if k < 1:
        raise ValueError("k must be >= 1")
    head = np.asarray(grades)[:k]
    if top <= 0 or len(head) == 0:  # nothing ranked: gdeval would divide by zero; our pool is never empty
        return 0.0
    return float(np.count_nonzero(head == top)) / len(head)


def gain(grades: ArrayLike) -> NDArray[np.float64]:
    """gdeval.py `ndcg`'s gain, 2^g - 1, on our grades as they are (no +3: see the module's docstring)."""
    return np.exp2(np.asarray(grades, dtype=np.float64)) - 1.0


#: A DCG gain: grades in, gains out (`gain` here; trec_eval's linear gain in `retrieval_metrics`).
Gain = Callable[[ArrayLike], NDArray[np.float64]]


def dcg(grades: ArrayLike, k: int, gain_of: Gain = gain) -> float:
    """The DCG of the first k grades: sum of gain(g) / log2(i + 1), i the 1-based rank; by default RAVENEA's
    exponential gain, 2^g - 1."""
    top = gain_of(np.asarray(grades)[:k])
    return float((top / np.log2(np.arange(2, len(top) + 2))).sum())


def ndcg_at_k(grades: ArrayLike, k: int, pool_grades: ArrayLike, gain_of: Gain = gain) -> float:
    """gdeval.py `ndcg`: DCG@k of the ranked grades over the DCG@k of every ranked grade sorted highest first (the
    pool's, `pool_grades`, in any order); 0 when that ideal is 0. One DCG for both readings: `retrieval_metrics`
    passes trec_eval's linear gain."""
    ideal = dcg(np.sort(np.asarray(pool_grades))[::-1], k, gain_of)
    return dcg(grades, k, gain_of) / ideal if ideal > 0 else 0.0


def reciprocal_rank(first_top_rank: int, top: int) -> float:
    """gdeval.py `mean_reciprocal_rank`'s term: 1 / the 1-based rank of the first image of grade `top`, 0 when none
    was ranked (`first_top_rank` 0); NaN, left out of the mean, when `top` <= 0 (no positive item)."""
    if top <= 0:
        return float("nan")
    return 1.0 / first_top_rank if first_top_rank > 0 else 0.0
