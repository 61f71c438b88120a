"""Retrieval across universals (GlobalRG §3.2) with trec_eval's MRR and nDCG@k: the metrics against ir_measures
(trec_eval) on the same runs, diversity@k on hand-worked cases, graded relevance from the assembly's
`Catalog.shows`, countries outside the reference data, and a run on the small 3XCM release. RAVENEA's own scoring
(its authors' gdeval.py) is tested in test_ravenea_scoring.py."""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import ir_measures
import numpy as np
import pyarrow as pa
import pytest

from data import reference
from data.publish.reader import Release
from data.reference import default_pack
from evaluation import registry
from evaluation.models.encoders import ImageRef, ModelIdentity
from evaluation.xcm import retrieval_metrics as rm
from evaluation.xcm.metrics import Vectors
from evaluation.xcm.retrieval import (
    HEADLINE,
    Pool,
    Query,
    build_queries,
    evaluate_pool,
    evaluate_retrieval,
    pool_from_table,
    shows_matrix,
)
from evaluation.xcm.retrieval_report import TITLE

LANGUAGE = {"USA": "en", "UK": "en", "Spain": "es", "Japan": "ja", "Kenya": "sw", "Atlantis": "xx"}
CONCEPTS = {0: "train", 1: "food", 2: "school", 3: "wedding"}


def _table(images: Sequence[dict[str, Any]]) -> pa.Table:
    """An image table with the CATALOG columns the retrieval reads; each image a dict of concept_id, country and
    optionally tags, sha256, pixel_sha256."""
    rows = []
    for i, image in enumerate(images):
        concept, country = image["concept_id"], image["country"]
        language = LANGUAGE[country]
        rows.append(
            {
                "index_in_dataset": i,
                "image_id": f"{country.lower()}-{concept}-{i}",
                "concept_id": concept,
                "concept": CONCEPTS[concept],
                "concept_in_native": CONCEPTS[concept] if language == "en" else f"{CONCEPTS[concept]} ({language})",
                "country": country,
                "language_code": language,
                "language_group": language,
                "tags": image.get("tags", [concept]),
                "sha256": image.get("sha256", f"bytes-{i}"),
                "pixel_sha256": image.get("pixel_sha256"),
            }
        )
    schema = pa.schema(
        [
            ("index_in_dataset", pa.int32()),
            ("image_id", pa.string()),
            ("concept_id", pa.int32()),
            ("concept", pa.string()),
            ("concept_in_native", pa.string()),
            ("country", pa.string()),
            ("language_code", pa.string()),
            ("language_group", pa.string()),
            ("tags", pa.list_(pa.int32())),
            ("sha256", pa.string()),
            ("pixel_sha256", pa.string()),
        ]
    )
    return pa.Table.from_pylist(rows, schema=schema)


def _grid(countries: Sequence[str], per_cell: int = 3) -> list[dict[str, Any]]:
    return [{"concept_id": c, "country": k} for c in CONCEPTS for k in countries for _ in range(per_cell)]


def _unit(matrix: np.ndarray) -> np.ndarray:
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def _random_vectors(n_queries: int, n_images: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    return _unit(rng.normal(size=(n_queries, 8))), _unit(rng.normal(size=(n_images, 8)))


def _tied_vectors(n_queries: int, n_images: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Images on 4 axes, queries between two axes: every score is exactly 0 or 1/sqrt(2) (one product plus zeros,
    exact in any summation order), so most places are decided by the tie rule."""
    images = np.eye(8)[rng.integers(0, 4, size=n_images)]
    queries = np.zeros((n_queries, 8))
    for i in range(n_queries):
        queries[i, rng.choice(4, size=2, replace=False)] = 1.0
    return _unit(queries), images


def _docid(position: int, n: int) -> str:
    """trec_eval breaks a score tie by docno, descending: numbering the images backwards makes that the pool order
    (earlier first), the retrieval's rule."""
    return f"img{n - 1 - position:06d}"


def _grades(pool: Pool, query: Query) -> np.ndarray:
    images = np.arange(len(pool.image_ids))
    shows = pool.catalog.shows(images, np.full(len(images), query.concept_id))
    return shows.astype(np.int64) * (1 + (pool.languages == query.language))


@pytest.mark.parametrize("vectors", [_random_vectors, _tied_vectors], ids=["distinct", "tied"])
def test_mrr_precision_and_ndcg_equal_ir_measures(
    vectors: Callable[[int, int, np.random.Generator], tuple[np.ndarray, np.ndarray]], monkeypatch: pytest.MonkeyPatch
) -> None:
    images = _grid(["USA", "UK", "Spain", "Japan", "Kenya"])
    images[0]["tags"] = [0, 1]  # a train image tagged food
    images[5]["pixel_sha256"] = images[20]["pixel_sha256"] = "same-pixels"  # a train and a food image
    pool = pool_from_table(_table(images), default_pack())
    queries, _, _ = build_queries(pool)
    q, x = vectors(len(queries), len(pool.image_ids), np.random.default_rng(7))
    monkeypatch.setattr(rm, "BLOCK_ELEMENTS", 7 * len(queries))  # blocks of 7 images: the merge runs 9 times
    part = evaluate_pool(pool, queries, q, x, n_resamples=0, seed=0)

    n = len(pool.image_ids)
    scores = q @ x.T
    qrels, run = [], []
    for i, query in enumerate(queries):
        qid = f"{query.concept_id}-{query.language}"
        qrels += [ir_measures.Qrel(qid, _docid(j, n), int(g)) for j, g in enumerate(_grades(pool, query))]
        run += [ir_measures.ScoredDoc(qid, _docid(j, n), float(scores[i, j])) for j in range(n)]
    measures = {
        "reciprocal_rank": ir_measures.RR,
        "precision@5": ir_measures.P @ 5,
        "precision@10": ir_measures.P @ 10,
        "precision@5_native": ir_measures.P(rel=2) @ 5,
        "precision@10_native": ir_measures.P(rel=2) @ 10,
        "ndcg@5": ir_measures.nDCG @ 5,
        "ndcg@10": ir_measures.nDCG @ 10,
    }
    expected: dict[str, dict[Any, float]] = {}
    for metric in ir_measures.iter_calc(list(measures.values()), qrels, run):
        expected.setdefault(metric.query_id, {})[metric.measure] = metric.value
    rows = part.per_query.to_pylist()
    assert len(rows) == len(queries) == len(expected)
    for row in rows:
        theirs = expected[f"{row['concept_id']}-{row['query_language']}"]
        for column, measure in measures.items():
            assert row[column] == pytest.approx(theirs[measure], abs=1e-12), (row["query_text"], column)
    aggregate = ir_measures.calc_aggregate([ir_measures.RR, ir_measures.P @ 5, ir_measures.nDCG @ 5], qrels, run)
    assert part.headline["mrr"] == pytest.approx(aggregate[ir_measures.RR], abs=1e-12)
    assert part.headline["precision@5"] == pytest.approx(aggregate[ir_measures.P @ 5], abs=1e-12)
    assert part.headline["ndcg@5"] == pytest.approx(aggregate[ir_measures.nDCG @ 5], abs=1e-12)

    # The top 10 is the full ranking's head: by score, an exact tie to the earlier image.
    top = part.tables["top_k"]
    for i, query in enumerate(queries):
        order = np.lexsort((np.arange(n), -scores[i]))[:10]
        mine = [
            r["image_id"]
            for r in top.to_pylist()
            if r["concept_id"] == query.concept_id and r["query_language"] == query.language
        ]
        assert mine == [pool.image_ids[j] for j in order]
    if vectors is _tied_vectors:
        assert sum(part.metrics["boundary_ties"].values()) > 0  # the case is the one it claims to be


def test_diversity_at_k_by_hand() -> None:
    """GlobalRG Eq. 1: -1/log(m) sum p_i log p_i over the m cultures of the top k; m = 1 gives 0."""
    assert rm.diversity_at_k(["JP"] * 5, 5) == 0.0  # one culture: log m = 0
    assert rm.diversity_at_k([], 5) == 0.0
    assert rm.diversity_at_k(["JP", "US", "KE", "ES", "UK"], 5) == pytest.approx(1.0)  # uniform
    assert rm.diversity_at_k(["JP", "JP", "US", "US"], 5) == pytest.approx(1.0)  # uniform over its own 2
    # 3 + 2: -(0.6 ln 0.6 + 0.4 ln 0.4) / ln 2 = 0.673012 / 0.693147
    assert rm.diversity_at_k(["JP", "JP", "JP", "US", "US"], 5) == pytest.approx(0.970951, abs=1e-6)
    # 2 + 2 + 1: -(2 * 0.4 ln 0.4 + 0.2 ln 0.2) / ln 3 = 1.054920 / 1.098612
    assert rm.diversity_at_k(["JP", "US", "JP", "US", "KE"], 5) == pytest.approx(0.960230, abs=1e-6)
    # Only the first k count: the sixth image's culture is not in the top 5.
    assert rm.diversity_at_k(["JP"] * 5 + ["US"], 5) == 0.0
    # Ours: the same entropy over log(pool cultures); 5 cultures of a pool of 16 reach ln 5 / ln 16 only.
    assert rm.pool_diversity_at_k(["JP", "US", "KE", "ES", "UK"], 5, 16) == pytest.approx(math.log(5) / math.log(16))
    assert rm.pool_diversity_at_k(["JP", "JP", "US", "US"], 5, 4) == pytest.approx(math.log(2) / math.log(4))
    assert rm.pool_diversity_at_k(["JP"] * 5, 5, 1) == 0.0


def test_precision_rank_and_ndcg_by_hand() -> None:
    grades = [0, 2, 1]  # ranked: irrelevant, native, relevant
    assert rm.precision_at_k(grades, 5) == pytest.approx(2 / 5)  # over k, as trec_eval's P@k
    assert rm.precision_at_k(grades, 2, rm.RELEVANT_NATIVE) == pytest.approx(1 / 2)
    assert rm.reciprocal_rank(2) == 0.5 and rm.reciprocal_rank(None) == 0.0
    # DCG = 2/log2(3) + 1/log2(4); ideal = 2/log2(2) + 1/log2(3)
    expected = (2 / math.log2(3) + 1 / 2) / (2 + 1 / math.log2(3))
    assert rm.ndcg_at_k(grades, 5, [2, 1, 0]) == pytest.approx(expected)
    assert rm.ndcg_at_k([0, 0], 5, [0, 0]) == 0.0  # nothing relevant in the pool
    assert rm.aggregate_name("reciprocal_rank") == "mrr" and rm.aggregate_name("ndcg@5") == "ndcg@5"


def test_relevance_is_graded_by_the_assembly_rule() -> None:
    """An image shows a concept by its own, a tag, or a byte or pixel copy (Catalog.shows); grade 2 when it also
    comes from a country of the query's language."""
    images = [
        {"concept_id": 0, "country": "USA"},  # 0: train, English
        {"concept_id": 1, "country": "Spain", "tags": [1, 0]},  # 1: food, tagged train
        {"concept_id": 2, "country": "Japan", "pixel_sha256": "p"},  # 2: school, pixels of image 3
        {"concept_id": 0, "country": "Kenya", "pixel_sha256": "p"},  # 3: train
        {"concept_id": 2, "country": "UK", "sha256": "b"},  # 4: school, bytes of image 5
        {"concept_id": 1, "country": "USA", "sha256": "b"},  # 5: food
    ]
    pool = pool_from_table(_table(images), default_pack())
    queries, _, _ = build_queries(pool)
    q, x = _random_vectors(len(queries), len(images), np.random.default_rng(1))
    part = evaluate_pool(pool, queries, q, x, n_resamples=0, seed=0)
    grade = {
        (r["concept_id"], r["query_language"], r["image_id"]): r["relevance"]
        for r in part.tables["top_k"].to_pylist()  # a pool of 6: every image is in every top 10
    }
    ids = pool.image_ids
    train = {  # query language -> grade of images 0..5 for "train"
        "en": [2, 1, 1, 1, 0, 0],
        "es": [1, 2, 1, 1, 0, 0],
        "ja": [1, 1, 2, 1, 0, 0],
        "sw": [1, 1, 1, 2, 0, 0],
    }
    for language, grades in train.items():
        assert [grade[(0, language, i)] for i in ids] == grades, language
    # School: image 3 is a pixel copy of 2 (copies show each other's concepts), image 5 a byte copy of 4.
    assert [grade[(2, "en", i)] for i in ids] == [0, 0, 1, 1, 2, 2]
    # Food: its own two, and image 4, the byte copy of image 5; not image 0, which image 1's tag does not reach.
    assert shows_matrix(pool.catalog, [1]).tolist() == [[False, True, False, False, True, True]]
    rows = {(r["concept_id"], r["query_language"]): r for r in part.per_query.to_pylist()}
    assert rows[(0, "en")]["n_relevant"] == 4 and rows[(0, "en")]["n_relevant_native"] == 1
    assert rows[(2, "en")]["n_relevant"] == 4 and rows[(2, "en")]["n_relevant_native"] == 2


def test_countries_outside_the_reference_have_an_unknown_region() -> None:
    known = default_pack().countries
    assert all(c.region and c.region != reference.UNKNOWN_REGION for c in known)
    assert len({c.region for c in known}) <= 10  # GlobalRG's 10 regions at most
    assert default_pack().region_of("Japan") == default_pack().country_by_name()["Japan"].region
    assert default_pack().region_of("Atlantis") == reference.UNKNOWN_REGION

    pool = pool_from_table(_table(_grid(["USA", "Japan", "Atlantis"], per_cell=2)), default_pack())
    assert pool.unknown_region == ["Atlantis"]
    queries, _, missing = build_queries(pool)
    assert not missing and {q.language for q in queries} == {"en", "ja", "xx"}
    q, x = _random_vectors(len(queries), len(pool.image_ids), np.random.default_rng(3))
    part = evaluate_pool(pool, queries, q, x, n_resamples=20, seed=0)
    regions = part.metrics["settings"]["regions"]
    assert regions["n_unknown_region_countries"] == 1 and regions["unknown_region_countries"] == ["Atlantis"]
    assert regions["by_country"]["Atlantis"] == "unknown"
    assert part.metrics["settings"]["pool_regions"] == 3
    top = part.tables["top_k"].to_pylist()
    assert {r["region"] for r in top if r["country"] == "Atlantis"} == {"unknown"}
    card = "".join(part.card)
    assert "1 of the pool's countries are outside the reference data" in card and "Atlantis" in card


class HashEncoder:
    """Deterministic vectors: an image's from the sha256 of its bytes (byte copies share one), a text's from the
    text."""

    runs_locally = needs_image_bytes = True
    identity = ModelIdentity(
        backend="open_clip", model_id="open_clip--hash", name="hash", weights_sha256=None, device="cpu",
        precision="fp32",
    )  # fmt: skip

    @staticmethod
    def _vector(key: bytes) -> np.ndarray:
        seed = int.from_bytes(hashlib.sha256(key).digest()[:8], "little")
        return np.random.default_rng(seed).normal(size=16).astype(np.float32)

    def image_vectors(self, images: Sequence[ImageRef], progress: Callable[[int], None] | None = None) -> np.ndarray:
        vectors = np.stack([self._vector(ref.load()) for ref in images])
        if progress is not None:
            progress(len(images))
        return vectors

    def text_vectors(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self._vector(t.encode()) for t in texts])


def test_retrieval_on_the_small_release(small_releases: dict[str, Path], tmp_path: Path) -> None:
    release = Release.open(small_releases["3xcm"])
    encoder = HashEncoder()
    stages: list[str] = []
    part = evaluate_retrieval(
        release, encoder, n_resamples=200, seed=3, progress=lambda stage, done, total: stages.append(stage)
    )
    assert {"embed images", "retrieve"} <= set(stages)
    metadata = release.table("image_metadata", ["index_in_dataset", "image_id", "concept_id", "language_code"])
    metadata = metadata.sort_by("index_in_dataset")
    languages = set(metadata.column("language_code").to_pylist()) | {"en"}
    concepts = set(metadata.column("concept_id").to_pylist())

    per_query = part.per_query
    assert per_query.schema == rm.PER_QUERY
    assert per_query.num_rows == len(concepts) * len(languages)
    assert {tuple(r.values()) for r in per_query.select(["concept_id", "query_language"]).to_pylist()} == {
        (c, lang) for c in concepts for lang in languages
    }
    assert tuple(part.headline) == HEADLINE == registry.get("3xcm").task("retrieval").headline
    english = np.array(per_query.column("query_language").to_pylist()) == "en"
    ravenea = part.headline["ravenea"]
    assert isinstance(ravenea, dict)
    flat = {
        **{name: value for name, value in part.headline.items() if name != "ravenea"},
        **{f"ravenea.{name}": value for name, value in ravenea.items()},
    }
    assert len(flat) == 18 and set(part.ci95) == set(flat)
    for name, value in flat.items():
        base = name.removesuffix("_en")
        column = {"mrr": "reciprocal_rank", "ravenea.mrr": "ravenea_reciprocal_rank"}.get(base, base)
        column = column.replace("ravenea.", "ravenea_")
        values = per_query.column(column).to_numpy(zero_copy_only=False).astype(float)
        if name.endswith("_en"):
            values = values[english]
        assert value == pytest.approx(float(np.nanmean(values))), name
        low, high = part.ci95[name]
        assert value is not None and low is not None and high is not None and low <= value <= high, name
    assert part.tables["by_language"].schema == part.tables["by_concept"].schema == rm.GROUP_METRICS
    assert part.tables["top_k"].schema == rm.TOP_K
    assert set(part.metrics["by_language"]) == languages
    assert part.metrics["settings"]["pool_images"] == metadata.num_rows
    json.dumps(part.metrics, allow_nan=False)  # JSON-ready

    # Against a brute-force ranking of the whole pool with the same vectors.
    ids = metadata.column("image_id").to_pylist()
    store = release.images("image_metadata", "image_id")
    x = Vectors.from_arrays(ids, encoder.image_vectors([ImageRef(i, "", lambda i=i: store.load(i)) for i in ids]))
    top = part.tables["top_k"].to_pylist()
    for row in per_query.to_pylist():
        q = Vectors.from_arrays(["q"], encoder.text_vectors([row["query_text"]])).matrix[0]
        scores = x.matrix @ q
        order = np.lexsort((np.arange(len(ids)), -scores))
        mine = [
            r["image_id"]
            for r in top
            if (r["concept_id"], r["query_language"]) == (row["concept_id"], row["query_language"])
        ]
        assert mine == [ids[j] for j in order[:10]]
    assert part.figures["precision_diversity.png"].startswith(b"\x89PNG")
    assert part.card[0] == TITLE and "ours" in "".join(part.card)
    assert sum(line.count("\n| ") for line in part.card) >= len(languages)  # a row per language (and "all")

    again = evaluate_retrieval(release, encoder, n_resamples=200, seed=3)
    assert again.ci95 == part.ci95 and again.per_query.equals(per_query)  # seeded

    class ZeroImages(HashEncoder):
        def image_vectors(self, images: Sequence[ImageRef], progress: Any = None) -> np.ndarray:
            vectors = super().image_vectors(images, progress)
            vectors[:2] = 0.0
            return vectors

    with pytest.raises(ValueError, match=r"2 image vector\(s\) of zero norm"):  # refused, as 3XCM's evaluation does
        evaluate_retrieval(release, ZeroImages(), n_resamples=0, seed=0)

    bare = Path(shutil.copytree(small_releases["3xcm"], tmp_path / "bare"))
    shutil.rmtree(bare / "image_metadata")
    with pytest.raises(ValueError, match="image_metadata") as info:
        evaluate_retrieval(Release.open(bare), encoder, n_resamples=0, seed=0)
    assert str(bare) in str(info.value) and "\n" not in str(info.value)
