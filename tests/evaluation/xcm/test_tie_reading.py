"""Eq. 3's ties as the tool reads them (issue 59 item 7): the paper's formula, read literally, credits every
candidate equal to the maximum; the authors' code (`torch.argmax` in `SelfPreferenceBiasEvaluator`) credits the
first; we follow their code. These tests pin the behaviour the docs state: one winner per query, the earlier slot on
an exact tie, so a group's M_k sum to 1."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from data.schemas import RQ2_SLOTS
from evaluation.xcm import metrics as m


def _benchmark(n: int) -> pa.Table:
    """n RQ2 triplets over three images: c (the correct candidate), b (language-biased), t (irrelevant)."""
    columns = {
        "query_index": pa.array(range(n), pa.int32()),
        "query_image_id": [f"q{i}" for i in range(n)],
        "query_concept": ["bowl"] * n,
        "query_country": ["japan"] * n,
        "query_language": ["ja"] * n,
        "query_text": ["茶碗"] * n,
    }
    for (_, prefix), image in zip(RQ2_SLOTS, ("c", "b", "t"), strict=True):
        columns[f"{prefix}image_id"] = [image] * n
    return pa.table(columns)


def test_an_exact_tie_credits_the_first_candidate_only() -> None:
    """The correct and the language-biased candidate have the same vector, so they tie exactly for every query: the
    literal Eq. 3 would credit both (M_cr = M_lb = 1, a sum of 2); the authors' code and ours credit the correct
    one (the earlier slot), and the M_k sum to 1."""
    query = np.array([1.0, 0.0, 0.0])
    images = {"c": np.array([1.0, 1.0, 0.0]), "b": np.array([1.0, 1.0, 0.0]), "t": np.array([0.0, 0.0, 1.0])}
    per_query = m.rq2_scores(_benchmark(5), images, {"茶碗": query})
    assert per_query["score_correct"].to_pylist() == per_query["score_language_biased"].to_pylist()
    assert set(per_query["winner"].to_pylist()) == {"correct"}
    overall = m.win_rates(per_query, "rq2", n_resamples=0).overall
    rates = {k: v.value for k, v in overall.rates.items()}
    assert rates["correct"] == 1.0 and rates["language_biased"] == 0.0
    assert sum(v for v in rates.values() if v is not None) == pytest.approx(1.0)
    # the tie is reported beside the winner, which it does not change
    scores = np.column_stack([per_query[f"score_{k}"].to_numpy() for k in m.RQ2_CATEGORIES])
    assert m.tied_winners(scores).all()


def test_the_tie_goes_to_the_earlier_slot_whichever_slots_tie() -> None:
    scores = np.array([[0.2, 0.7, 0.7], [0.7, 0.2, 0.7], [0.7, 0.7, 0.7], [0.1, 0.2, 0.3]])
    assert m.first_argmax(scores).tolist() == [1, 0, 0, 2]
    assert m.tied_winners(scores).tolist() == [True, True, True, False]
