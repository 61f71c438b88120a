"""RAVENEA's own scoring (its authors' src/gdeval.py, yfyuan01/RAVENEA b7b3c29) and GlobalRG's English row.

Hand-worked cases from gdeval.py's rules (the expected values are the arithmetic in the comments): ties, a query
with no positive item, a query whose top grade is 1, fewer images than k; the first image of the top grade below
the kept top, against brute force; the new keys through `evaluate_pool` and through the CLI into metrics.json, the
card and `compare`. With RAVENEA_GDEVAL pointing at a copy of their gdeval.py, their own `retrieval_eval` scores
the same rankings, and both must agree to 1e-12."""

from __future__ import annotations

import importlib.util
import json
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from data.reference import default_pack
from evaluation import registry
from evaluation.results.folder import compare, headline_names
from evaluation.results.parts import ResultPart
from evaluation.xcm import ravenea_metrics as rv
from evaluation.xcm import retrieval_metrics as rm
from evaluation.xcm.metrics import TIE_TOLERANCE
from evaluation.xcm.retrieval import Pool, Query, build_queries, evaluate_pool, pool_from_table
from flows.cli import app

RAVENEA_KEYS = ["mrr", "precision@1", "precision@3", "precision@5", "ndcg@1", "ndcg@3", "ndcg@5"]
ENGLISH_KEYS = [
    f"{m}@{k}{u}_en"
    for k in (5, 10)
    for m, u in (("precision", ""), ("diversity", "_country"), ("diversity", "_region"))
]


def log2(x: float) -> float:
    return math.log2(x)


# -- the functions, by hand -----------------------------------------------------------------------------------------


def test_precision_counts_only_the_top_grade_over_the_images_ranked() -> None:
    grades = [1, 2, 0, 2, 1]
    assert rv.precision_at_k(grades, 1, 2) == 0.0  # the first is grade 1, not the top grade 2
    assert rv.precision_at_k(grades, 3, 2) == pytest.approx(1 / 3)  # [1, 2, 0]: one 2 of 3
    assert rv.precision_at_k(grades, 5, 2) == pytest.approx(2 / 5)  # two 2s of 5
    assert rv.precision_at_k(grades, 5, 1) == pytest.approx(2 / 5)  # top grade 1 counts the 1s only: 2 of 5
    assert rv.precision_at_k([2, 0], 5, 2) == pytest.approx(1 / 2)  # 2 ranked: over 2, not 5 (len(top_k_preds))
    assert rv.precision_at_k([0, 0, 0], 3, 0) == 0.0  # no positive item: 0
    with pytest.raises(ValueError):
        rv.precision_at_k(grades, 0, 2)


def test_ndcg_has_exponential_gain_and_the_ideal_of_the_whole_ranked_list() -> None:
    # Ranked [1, 2, 0], pool [2, 1, 0]: gains 2^g - 1 = [1, 3, 0] against the ideal [3, 1, 0].
    assert rv.ndcg_at_k([1, 2, 0], 1, [2, 1, 0]) == pytest.approx(1 / 3)
    # DCG@3 = 1/log2(2) + 3/log2(3) + 0; ideal = 3/log2(2) + 1/log2(3) + 0
    assert rv.ndcg_at_k([1, 2, 0], 3, [0, 1, 2]) == pytest.approx((1 + 3 / log2(3)) / (3 + 1 / log2(3)))
    # A grade-2 image below the top 2 still sets the ideal: ranked [1, 0 | 2], ideal [3, 1].
    assert rv.ndcg_at_k([1, 0, 2], 2, [1, 0, 2]) == pytest.approx(1 / (3 + 1 / log2(3)))
    assert rv.ndcg_at_k([0, 0], 5, [0, 0]) == 0.0  # no positive: ideal 0 -> 0 (with gdeval's +3 it would be 1)
    assert list(rv.gain([0, 1, 2])) == [0.0, 1.0, 3.0]


def test_reciprocal_rank_leaves_out_a_query_with_no_positive_item() -> None:
    assert rv.reciprocal_rank(3, 2) == pytest.approx(1 / 3)
    assert rv.reciprocal_rank(0, 1) == 0.0  # a positive the list never reached: 0, in the mean
    assert math.isnan(rv.reciprocal_rank(0, 0))  # left out of the mean
    assert rv.top_grade(5, 2) == 2 and rv.top_grade(5, 0) == 1 and rv.top_grade(0, 0) == 0
    assert [rm.aggregate_name(n) for n in rv.metric_names()] == [f"ravenea.{k}" for k in RAVENEA_KEYS]


# -- through evaluate_pool, by hand -------------------------------------------------------------------------------


def _pool(images: Sequence[tuple[int, str]]) -> Pool:
    """Images as (concept id, country); concept 0 is "train", 1 "food"."""
    names = {0: "train", 1: "food"}
    rows = [
        {
            "index_in_dataset": i,
            "image_id": f"img-{i}",
            "concept_id": c,
            "concept": names[c],
            "concept_in_native": names[c],
            "country": country,
        }
        for i, (c, country) in enumerate(images)
    ]
    return pool_from_table(pa.Table.from_pylist(rows), default_pack())


def _at(angles: Sequence[float]) -> np.ndarray:
    """Unit vectors at these angles from the query [1, 0]: cosine = cos(angle), exactly 1 at angle 0."""
    a = np.asarray(angles, dtype=np.float64)
    return np.column_stack([np.cos(a), np.sin(a)])


#: Pool order; the query [1, 0] ranks the three at angle 0 first (an exact tie, kept in pool order), then the rest.
TIED_POOL = [(1, "UK"), (0, "UK"), (0, "Japan"), (1, "Japan"), (0, "Japan"), (1, "UK")]
TIED_ANGLES = [0.0, 0.0, 0.0, 0.5, 1.0, 1.2]


def test_ties_no_positive_and_top_grade_one_through_evaluate_pool() -> None:
    pool = _pool(TIED_POOL)
    queries = [
        Query(0, "train", "ja", "train"),  # two Japanese train images: top grade 2
        Query(7, "wedding", "en", "wedding"),  # no image shows it: no positive item
        Query(0, "train", "es", "tren"),  # no Spanish image: top grade 1
    ]
    part = evaluate_pool(pool, queries, np.tile([1.0, 0.0], (3, 1)), _at(TIED_ANGLES), n_resamples=0, seed=0)
    rows = part.per_query.to_pylist()
    ja, none, es = rows

    # ja: ranked images 0, 1, 2 (the tie, in pool order, as inference.py's stable sort), 3, 4, 5: grades
    # [0, 1, 2, 0, 2, 0]. Top grade 2.
    assert ja["top_grade"] == 2 and ja["first_top_grade_rank"] == 3 and ja["first_relevant_rank"] == 2
    assert ja["ravenea_precision@1"] == 0.0  # [0]
    assert ja["ravenea_precision@3"] == pytest.approx(1 / 3)  # [0, 1, 2]: one 2
    assert ja["ravenea_precision@5"] == pytest.approx(2 / 5)  # [0, 1, 2, 0, 2]: two 2s
    assert ja["precision@5"] == pytest.approx(3 / 5)  # GlobalRG's, for contrast: grade >= 1
    assert ja["ravenea_reciprocal_rank"] == pytest.approx(1 / 3)  # the first 2 at rank 3
    assert ja["reciprocal_rank"] == pytest.approx(1 / 2)  # trec_eval's: the first grade >= 1 at rank 2
    # Gains [0, 1, 3, 0, 3]; the pool's grades sorted, [2, 2, 1, 0, 0, 0], gain [3, 3, 1, 0, 0].
    ideal3 = 3 + 3 / log2(3) + 1 / log2(4)
    assert ja["ravenea_ndcg@1"] == 0.0
    assert ja["ravenea_ndcg@3"] == pytest.approx((1 / log2(3) + 3 / log2(4)) / ideal3)
    assert ja["ravenea_ndcg@5"] == pytest.approx((1 / log2(3) + 3 / log2(4) + 3 / log2(6)) / ideal3)

    # No positive: P@k and nDCG@k 0, in the mean; MRR's term null, out of it.
    assert none["top_grade"] == 0 and none["first_top_grade_rank"] is None
    assert none["ravenea_reciprocal_rank"] is None and none["reciprocal_rank"] == 0.0
    assert all(none[f"ravenea_{m}@{k}"] == 0.0 for m in ("precision", "ndcg") for k in (1, 3, 5))

    # es: the same order, every train image grade 1: [0, 1, 1, 0, 1, 0]. Top grade 1.
    assert es["top_grade"] == 1 and es["first_top_grade_rank"] == 2
    assert es["ravenea_precision@1"] == 0.0
    assert es["ravenea_precision@3"] == pytest.approx(2 / 3)
    assert es["ravenea_precision@5"] == pytest.approx(3 / 5)
    assert es["ravenea_reciprocal_rank"] == pytest.approx(1 / 2)
    ideal = 1 + 1 / log2(3) + 1 / log2(4)  # gains [1, 1, 1, 0, 0, 0]
    assert es["ravenea_ndcg@3"] == pytest.approx((1 / log2(3) + 1 / log2(4)) / ideal)
    assert es["ravenea_ndcg@5"] == pytest.approx((1 / log2(3) + 1 / log2(4) + 1 / log2(6)) / ideal)

    # Means: RAVENEA's MRR over the 2 queries with a positive item; trec_eval's over all 3.
    ravenea = part.headline["ravenea"]
    assert isinstance(ravenea, dict) and list(ravenea) == RAVENEA_KEYS
    assert ravenea["mrr"] == pytest.approx((1 / 3 + 1 / 2) / 2)
    assert part.headline["mrr"] == pytest.approx((1 / 2 + 0 + 1 / 2) / 3)
    assert ravenea["precision@5"] == pytest.approx((2 / 5 + 0 + 3 / 5) / 3)
    overall = part.metrics["overall"]["metrics"]
    assert overall["ravenea.mrr"]["n"] == 2 and "n" not in overall["mrr"]
    by_language = part.tables["by_language"].to_pylist()
    (en_mrr,) = [r for r in by_language if r["group"] == "en" and r["metric"] == "ravenea.mrr"]
    assert en_mrr["n"] == 0 and en_mrr["value"] is None  # the English query has no positive: no mean
    # The tie at the top placed the first image of the top grade, for ja (image 2 ties images 0 and 1, of grades 0
    # and 1) and for es (image 1 ties image 0, of grade 0): RAVENEA's MRR rests on a tie for both.
    assert part.metrics["ties"]["ravenea"]["ravenea.mrr"] == 2
    assert "ravenea.mrr" not in part.metrics["ties"]["metrics"]


def test_fewer_images_than_k() -> None:
    pool = _pool([(0, "UK"), (1, "UK")])
    part = evaluate_pool(
        pool, [Query(0, "train", "en", "train")], np.array([[1.0, 0.0]]), _at([0.0, 1.0]), n_resamples=0, seed=0
    )
    (row,) = part.per_query.to_pylist()  # ranked grades [2, 0]
    assert row["ravenea_precision@1"] == 1.0
    assert row["ravenea_precision@3"] == pytest.approx(1 / 2)  # 1 of the 2 ranked, not of 3
    assert row["ravenea_precision@5"] == pytest.approx(1 / 2)
    assert row["precision@5"] == pytest.approx(1 / 5)  # GlobalRG's (trec_eval's) divides by k
    assert row["ravenea_ndcg@5"] == 1.0 and row["ravenea_reciprocal_rank"] == 1.0
    # A pool within k decides RAVENEA's P@k too, and the warning says so.
    assert any("RAVENEA's P@k at k = 3 and 5" in w for w in part.warnings), part.warnings


def test_the_english_row_leads_the_headline() -> None:
    pool = _pool([(c, k) for c in (0, 1) for k in ("USA", "UK", "Japan", "Spain", "Kenya") for _ in range(3)])
    queries, _, _ = build_queries(pool)
    rng = np.random.default_rng(5)
    q, x = rng.normal(size=(len(queries), 6)), rng.normal(size=(len(pool.image_ids), 6))
    q, x = q / np.linalg.norm(q, axis=1, keepdims=True), x / np.linalg.norm(x, axis=1, keepdims=True)
    part = evaluate_pool(pool, queries, q, x, n_resamples=50, seed=1)
    assert tuple(part.headline) == registry.get("3xcm").task("retrieval").headline
    assert list(part.headline)[:6] == ENGLISH_KEYS
    rows = [r for r in part.per_query.to_pylist() if r["query_language"] == "en"]
    assert len(rows) == 2
    english = part.metrics["by_language"]["en"]["metrics"]
    for key in ENGLISH_KEYS:
        name = key.removesuffix("_en")
        assert part.headline[key] == pytest.approx(np.mean([r[name] for r in rows]))
        assert part.ci95[key] == [english[name]["ci_low"], english[name]["ci_high"]]
    assert set(part.ci95) == set(_flat(part))
    card = "".join(part.card)
    english_table = card.split("GlobalRG's Table 3.**", 1)[1].split("**Every query language.**", 1)[0]
    assert "Fractions from 0 to 1" in english_table and "| en | 2 |" in english_table
    assert "| all |" not in english_table  # the row comparable with Table 3 is English alone
    assert "RAVENEA's own scoring" in card and "MRR (trec_eval)" in card

    # With no English query, the English keys are there, and empty.
    ja = [i for i, query in enumerate(queries) if query.language == "ja"]
    alone = evaluate_pool(pool, [queries[i] for i in ja], q[ja], x, n_resamples=50, seed=1)
    assert all(alone.headline[k] is None and alone.ci95[k] == [None, None] for k in ENGLISH_KEYS)
    assert "No English query was scored." in "".join(alone.card)


def _flat(part: ResultPart) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in part.headline.items():
        out |= {f"{name}.{k}": v for k, v in value.items()} if isinstance(value, dict) else {name: value}
    return out


# -- the first image of the top grade, against brute force -------------------------------------------------------


def test_the_first_image_of_the_top_grade_is_ranked_exactly_below_the_kept_top() -> None:
    """`first_target` and `first_target_tied` against a full ranking: copies make ties, a depth of 3 and blocks of
    5 images put most first targets below the kept top, for the second pass; `first_relevant` is unchanged."""
    rng = np.random.default_rng(3)
    n_queries, n_concepts, n_groups, depth = 40, 3, 4, 3
    half = rng.normal(size=(25, 5))
    images = np.concatenate([half, half])  # image j + 25 is a copy of image j
    images /= np.linalg.norm(images, axis=1, keepdims=True)
    queries = rng.normal(size=(n_queries, 5))
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    shows = np.zeros((n_concepts, len(images)), dtype=bool)
    shows[rng.integers(0, n_concepts, size=len(images)), np.arange(len(images))] = True
    concept = rng.integers(0, n_concepts, size=n_queries)
    group = rng.integers(0, n_groups, size=len(images))
    target = rng.integers(-1, n_groups + 1, size=n_queries)  # -1: any relevant image; n_groups: a group with none
    common = {"depth": depth, "block_size": 5, "tolerance": TIE_TOLERANCE}
    ranking = rm.rank_images(queries, images, shows, concept, image_group=group, target_group=target, **common)
    plain = rm.rank_images(queries, images, shows, concept, **common)
    assert (ranking.first_relevant == plain.first_relevant).all() and plain.first_target is None
    assert (ranking.first_relevant_tied == plain.first_relevant_tied).all() and (ranking.top == plain.top).all()
    scores = queries @ images.T
    expected, tied = [], []
    for i in range(n_queries):
        order = np.lexsort((np.arange(len(images)), -scores[i]))
        inside = shows[concept[i]] & ((target[i] < 0) | (group == target[i]))
        hits = np.flatnonzero(inside[order])
        expected.append(int(hits[0]) + 1 if len(hits) else 0)
        best = scores[i, inside].max() if len(hits) else -np.inf
        tied.append(bool((~inside & (np.abs(scores[i] - best) <= TIE_TOLERANCE)).any()))
    assert ranking.first_target is not None and ranking.first_target_tied is not None
    assert ranking.first_target.tolist() == expected
    assert ranking.first_target_tied.tolist() == tied
    assert sum(e > depth for e in expected) > 5 and 0 in expected and any(tied)  # below the top, none, and ties


# -- end to end: metrics.json, the card, compare ----------------------------------------------------------------


def _independent_scores(top_k: list[dict[str, Any]], row: dict[str, Any], k: int) -> tuple[float, float]:
    """(P@k, nDCG@k) of RAVENEA's rules, recomputed here from the written top 10 and the pool's counts."""
    grades = [r["relevance"] for r in sorted(top_k, key=lambda r: r["rank"])][:k]
    best = 2 if row["n_relevant_native"] else 1 if row["n_relevant"] else 0
    precision = sum(g == best for g in grades) / len(grades) if best else 0.0
    ideal = sorted([2] * row["n_relevant_native"] + [1] * (row["n_relevant"] - row["n_relevant_native"]))[::-1][:k]

    def dcg(gs: Sequence[int]) -> float:
        return sum((2**g - 1) / log2(i + 2) for i, g in enumerate(gs))

    return precision, (dcg(grades) / dcg(ideal) if dcg(ideal) else 0.0)


def test_the_new_keys_reach_metrics_json_the_card_and_compare(small_releases: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "retrieval"
    args = ["evaluate", "3xcm", small_releases["3xcm"], "--task", "retrieval", "--demo-model"]
    result = CliRunner().invoke(app, [str(a) for a in [*args, "--bootstrap-resamples", "50", "--out", out]])
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics) >= {*ENGLISH_KEYS, "precision@5", "mrr", "ndcg@5", "ravenea"}
    assert list(metrics["ravenea"]) == RAVENEA_KEYS
    names = headline_names("3xcm", metrics)
    assert names[:6] == ENGLISH_KEYS and names[-7:] == [f"ravenea.{k}" for k in RAVENEA_KEYS]
    assert set(names) <= set(metrics["ci95"])
    assert metrics["precision@5_en"] == metrics["retrieval"]["by_language"]["en"]["metrics"]["precision@5"]["value"]

    per_query = pq.read_table(out / "retrieval" / "per_query.parquet")
    assert per_query.schema == rm.PER_QUERY
    top_k = pq.read_table(out / "retrieval" / "top_k.parquet").to_pylist()
    rows = per_query.to_pylist()
    for k in rv.K_VALUES:
        mine = [
            _independent_scores(
                [t for t in top_k if (t["concept_id"], t["query_language"]) == (r["concept_id"], r["query_language"])],
                r,
                k,
            )
            for r in rows
        ]
        assert metrics["ravenea"][f"precision@{k}"] == pytest.approx(np.mean([p for p, _ in mine]), abs=1e-12)
        assert metrics["ravenea"][f"ndcg@{k}"] == pytest.approx(np.mean([n for _, n in mine]), abs=1e-12)
    positive = [r for r in rows if r["top_grade"] > 0]
    assert metrics["ravenea"]["mrr"] == pytest.approx(np.mean([1 / r["first_top_grade_rank"] for r in positive]))
    settings = metrics["retrieval"]["settings"]
    assert "gdeval.py" in settings["ravenea"]["reading"] and "Table 3" in settings["english"]

    card = (out / "README.md").read_text()
    for name in [*ENGLISH_KEYS, "ravenea.mrr", "ravenea.ndcg@5"]:
        assert f"| {name} |" in card, name
    assert card.index("GlobalRG's Table 3.**") < card.index("**Every query language.**") < card.index("**RAVENEA")

    table, _, markdown = compare([out, out])
    shown = set(table["metric"].to_pylist())
    assert {*ENGLISH_KEYS, *(f"ravenea.{k}" for k in RAVENEA_KEYS)} <= shown
    assert "ravenea.mrr" in markdown


# -- against the authors' gdeval.py -------------------------------------------------------------------------------


def _gdeval() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ravenea_gdeval", os.environ["RAVENEA_GDEVAL"])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _random(n_queries: int, n_images: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    q, x = rng.normal(size=(n_queries, 8)), rng.normal(size=(n_images, 8))
    return q / np.linalg.norm(q, axis=1, keepdims=True), x / np.linalg.norm(x, axis=1, keepdims=True)


def _tied(n_queries: int, n_images: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Images on 4 axes, queries between two: every score is exactly 0 or 1/sqrt(2), so ties decide most places."""
    images = np.eye(8)[rng.integers(0, 4, size=n_images)]
    queries = np.zeros((n_queries, 8))
    for i in range(n_queries):
        queries[i, rng.choice(4, size=2, replace=False)] = 1.0
    return queries / np.linalg.norm(queries, axis=1, keepdims=True), images


#: Kenya has no train image: its train query's top grade is 1; the small pool has fewer images than k = 5.
GRID = [
    (c, k) for c in (0, 1) for k in ("USA", "UK", "Japan", "Spain", "Kenya") for _ in range(3) if (c, k) != (0, "Kenya")
]
SMALL = [(0, "USA"), (1, "Japan"), (0, "Japan"), (1, "Kenya")]


@pytest.mark.skipif(not os.environ.get("RAVENEA_GDEVAL"), reason="RAVENEA_GDEVAL: a copy of the authors' gdeval.py")
@pytest.mark.parametrize("images", [GRID, SMALL], ids=["grid", "4-images"])
@pytest.mark.parametrize("vectors", [_random, _tied], ids=["distinct", "tied"])
def test_the_authors_gdeval_scores_our_rankings_alike(
    vectors: Callable[[int, int, np.random.Generator], tuple[np.ndarray, np.ndarray]],
    images: list[tuple[int, str]],
    tmp_path: Path,
) -> None:
    """Their `retrieval_eval` on a ground truth and a TREC run written from our ranking: P@k and MRR on our grades
    as they are; nDCG on our grades minus 3, which their +3 gives back. A query for concept 7, shown by no image,
    has no positive item."""
    gdeval = _gdeval()
    pool = _pool(images)
    queries, _, _ = build_queries(pool)
    queries.append(Query(7, "wedding", "en", "wedding"))
    q, x = vectors(len(queries), len(pool.image_ids), np.random.default_rng(11))
    part = evaluate_pool(pool, queries, q, x, n_resamples=0, seed=0)

    scores = q @ x.T
    n = len(pool.image_ids)
    qrels: dict[str, list[int]] = {}
    runs: list[str] = []
    top_k = part.tables["top_k"].to_pylist()
    for i, query in enumerate(queries):
        qid = f"{query.concept_id}-{query.language}"
        shown = pool.catalog.shows(np.arange(n), np.full(n, query.concept_id))
        qrels[qid] = [int(g) for g in shown.astype(np.int64) * (1 + (pool.languages == query.language))]
        # inference.py's ranking: sorted by score, descending, stable on the candidates' (the pool's) order.
        ranked = sorted(zip(pool.image_ids, scores[i].tolist(), strict=True), key=lambda d: d[1], reverse=True)
        mine = [
            r["image_id"] for r in top_k if (r["concept_id"], r["query_language"]) == (query.concept_id, query.language)
        ]
        assert [d for d, _ in ranked[:10]] == mine  # the same ranking as ours
        runs += [f"{qid} Q0 {doc} {rank} {score!r} ours" for rank, (doc, score) in enumerate(ranked)]
    run_file = tmp_path / "ours.run"
    run_file.write_text("\n".join(runs) + "\n")

    def ground_truth(name: str, shift: int) -> str:
        path = tmp_path / name
        lines = [
            json.dumps(
                {"file_name": qid, "enwiki_ids": pool.image_ids, "culture_relevance": [g + shift for g in grades]}
            )
            for qid, grades in qrels.items()
        ]
        path.write_text("\n".join(lines) + "\n")
        return str(path)

    as_is = gdeval.retrieval_eval(ground_truth("gt.jsonl", 0), str(run_file))
    shifted = gdeval.retrieval_eval(ground_truth("gt-minus-3.jsonl", -3), str(run_file))
    ravenea = part.headline["ravenea"]
    assert isinstance(ravenea, dict)
    assert ravenea["mrr"] == pytest.approx(as_is["MRR"], abs=1e-12)
    for k in rv.K_VALUES:
        assert ravenea[f"precision@{k}"] == pytest.approx(as_is[f"P@{k}"], abs=1e-12), k
        assert ravenea[f"ndcg@{k}"] == pytest.approx(shifted[f"nDCG@{k}"], abs=1e-12), k
    tops = {r["top_grade"] for r in part.per_query.to_pylist()}
    assert tops == {0, 1, 2}  # the case is the one it claims to be: every top grade
