"""The 3XCM metric core (`evaluation/xcm/metrics.py`) against the authors' RQ2 evaluator and hand cases.

The authors' `SelfPreferenceBiasEvaluator` (ChulaAI/EVALUATING-PERSPECTIVAL-BIASES-IN-CROSS-MODAL-RETRIEVAL,
`rq2_eval/utils/benchmark_evaluator.py`) is checked two ways, on a small demo release and fixed random embeddings:

- `XCM_AUTHORS_EVAL` = the folder holding their `benchmark_evaluator.py` and `load_cultural_dataset.py` (or the
  path of `benchmark_evaluator.py`): their code runs on the release as their notebook runs it
  (`rq2_eval/2_self_preference_evaluation.ipynb`), and its winners, scores and counts must equal ours. It needs
  torch; without the variable, or without torch, those tests are skipped.
- Always: `_AuthorsRQ2` below restates their arithmetic (float32 cosine with norms clamped at 1e-6, the first
  maximum wins, rows aligned to the image table by `equalize_benchmark_dataset_length`, win counts divided by the
  number of scored rows, groups taken from the image row at the query's position) and ours must equal it.

RQ3 has no published evaluator: its M_k are checked against the same restatement over six slots, the App. P
tests against scipy directly, and Eq. 5 on a case built by hand.
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import stats

from data.schemas import RQ2_SLOTS, RQ3_SLOTS
from evaluation.xcm import metrics as m

DIM = 24
AUTHORS_ENV = "XCM_AUTHORS_EVAL"
#: The authors' load_cultural_dataset.add_native_language_column mapping (country -> native_language).
AUTHORS_LANGUAGE = {
    "Argentina": "Spanish",
    "Australia": "English",
    "Brazil": "Portuguese",
    "China": "Chinese",
    "France": "French",
    "Germany": "German",
    "India": "Hindi",
    "Japan": "Japanese",
    "Kenya": "Swahili",
    "Nigeria": "Yoruba",
    "Portugal": "Portuguese",
    "Saudi Arabia": "Arabic",
    "Spain": "Spanish",
    "Thailand": "Thai",
    "UK": "English",
    "USA": "English",
}
AUTHORS_LETTER = {"A": "correct", "B": "language_biased", "C": "irrelevant"}  # score_A/B/C, winner A/B/C


# --- the release and the embeddings ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def release(small_releases: dict[str, Path]) -> Path:
    """The small 3XCM demo release (`small_releases` in tests/conftest.py, built once per run): read only."""
    return small_releases["3xcm"]


def _read(release: Path, name: str, columns: list[str] | None = None) -> pa.Table:
    return pa.concat_tables(pq.read_table(f, columns=columns) for f in sorted((release / name).glob("*.parquet")))


@pytest.fixture(scope="module")
def tables(release: Path) -> dict[str, pa.Table]:
    return {
        "benchmark": _read(release, "benchmark"),
        "benchmark_cd": _read(release, "benchmark_cd"),
        "image_metadata": _read(
            release, "image_metadata", ["image_id", "index_in_dataset", "concept_in_native", "country", "language_code"]
        ),
    }


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.normal(size=(n, DIM))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def _embeddings(tables: dict[str, pa.Table], kind: str) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Fixed random unit vectors (float32, as the authors' pickles): one per image id and one per query text
    (RQ2, RQ3 and the plain q_C texts). `tied` draws the image vectors from a pool of three, so candidates of one
    row often score exactly the same and the tie rule decides."""
    rng = np.random.default_rng(20251017)
    ids = tables["image_metadata"]["image_id"].to_pylist()
    texts = sorted(
        set(tables["benchmark"]["query_text"].to_pylist())
        | set(tables["benchmark_cd"]["query_text"].to_pylist())
        | set(tables["image_metadata"]["concept_in_native"].to_pylist())
    )
    text_vectors = dict(zip(texts, _unit(rng, len(texts)), strict=True))
    if kind.startswith("tied"):
        pool = _unit(rng, 3)
        image_vectors = {image_id: pool[rng.integers(3)] for image_id in ids}
    else:
        image_vectors = dict(zip(ids, _unit(rng, len(ids)), strict=True))
    return image_vectors, text_vectors


# --- the restatement of the authors' arithmetic ------------------------------------------------------------------


class _AuthorsRQ2:
    """SelfPreferenceBiasEvaluator's arithmetic, restated (not copied) from rq2_eval/utils/benchmark_evaluator.py:

    - the dataset is image_metadata in row order; `image_embedding[i]` and `translated_concept_embedding[i]` are
      the vectors of row i's image and of its `concept_in_native`, each of shape (1, D), float32;
    - `equalize_benchmark_dataset_length`: a benchmark as long as the dataset is used as it is; a shorter one is
      walked against the dataset rows in order, a row kept where its query_index is the next dataset position, a
      placeholder (no score) elsewhere;
    - `calculate_matching_score`: torch.nn.CosineSimilarity(dim=1, eps=1e-6), each vector divided by its norm
      clamped at eps, then the products summed, in float32;
    - the winner is the first maximum of [score_a, score_b, score_c] (torch.argmax; numpy argmax after the
      float32 cast in `summarize_scores_with_metadata`);
    - rows without a score are dropped; counts are `value_counts` of the winners overall, and grouped by the
      dataset row's `country` and `native_language` at the benchmark row's position; M_k = count / scored rows;
      SP = M_lb / M_cr is the paper's (Eq. 4; the evaluator reports counts)."""

    def __init__(self, image_metadata: pa.Table, image_vectors: dict, text_vectors: dict, query: str = "text"):
        self.countries = image_metadata["country"].to_pylist()
        ids = image_metadata["image_id"].to_pylist()
        self.image_embedding = [image_vectors[i].reshape(1, -1).astype(np.float32) for i in ids]
        native = image_metadata["concept_in_native"].to_pylist()
        self.query_embedding = (
            [text_vectors[t].reshape(1, -1).astype(np.float32) for t in native]
            if query == "text"
            else self.image_embedding
        )

    @staticmethod
    def cosine(x: np.ndarray, y: np.ndarray) -> np.float32:
        eps = np.float32(1e-6)
        x = x / np.maximum(np.sqrt((x * x).sum(axis=1, keepdims=True)), eps)
        y = y / np.maximum(np.sqrt((y * y).sum(axis=1, keepdims=True)), eps)
        return (x * y).sum(axis=1, dtype=np.float32)[0]

    def aligned(self, rows: list[dict]) -> list[dict | None]:
        if len(rows) == len(self.countries):
            return list(rows)
        out: list[dict | None] = []
        j = 0
        for i in range(len(self.countries)):
            if j < len(rows) and rows[j]["query_index"] == i:
                out.append(rows[j])
                j += 1
            else:
                out.append(None)
        return out

    def evaluate(self, benchmark: pa.Table) -> dict:
        prefixes = [prefix for _, prefix in RQ2_SLOTS]
        winners: dict[int, str] = {}
        scores: dict[int, list[float]] = {}
        by_country: dict[str, Counter] = {}
        by_language: dict[str, Counter] = {}
        for position, row in enumerate(self.aligned(benchmark.to_pylist())):
            if row is None:
                continue
            q = self.query_embedding[row["query_index"]]
            s = [self.cosine(q, self.image_embedding[row[f"{p}index"]]) for p in prefixes]
            best = 0
            for k in range(1, len(s)):
                if s[k] > s[best]:  # strictly greater: an equal later score does not displace the first maximum
                    best = k
            winner = RQ2_SLOTS[best][0]
            winners[row["query_index"]] = winner
            scores[row["query_index"]] = [float(x) for x in s]
            country = self.countries[position]
            by_country.setdefault(country, Counter())[winner] += 1
            by_language.setdefault(AUTHORS_LANGUAGE[country], Counter())[winner] += 1
        overall = Counter(winners.values())
        n = sum(overall.values())
        rates = {k: overall[k] / n for k, _ in RQ2_SLOTS}
        return {
            "winners": winners,
            "scores": scores,
            "overall": overall,
            "rates": rates,
            "sp": rates["language_biased"] / rates["correct"] if rates["correct"] else None,
            "by_country": by_country,
            "by_language": by_language,
        }


def _ours_by_authors_language(per_query: pa.Table, report: m.WinRateReport) -> dict[str, Counter]:
    """Our per-language counts keyed by the authors' language names: each of our language codes must cover the
    countries of exactly one of their languages, and the other way round."""
    countries_of: dict[str, set[str]] = {}
    for code, country in zip(
        per_query["query_language"].to_pylist(), per_query["query_country"].to_pylist(), strict=True
    ):
        countries_of.setdefault(code, set()).add(country)
    out = {}
    for group in report.by_language:
        names = {AUTHORS_LANGUAGE[c] for c in countries_of[group.group]}
        assert len(names) == 1, (group.group, names)
        (name,) = names
        assert name not in out
        out[name] = Counter({k: v for k, v in group.wins.items() if v})
    return out


def _wins(counter: Counter) -> Counter:
    return Counter({k: v for k, v in counter.items() if v})


# --- RQ2 against the restatement (always) ------------------------------------------------------------------------


def _benchmark(tables: dict[str, pa.Table], kind: str) -> pa.Table:
    """The release's RQ2 table; for `*-subset`, without every 7th query (as if those images were unassembled),
    which sends the authors' evaluator through its padding path (`equalize_benchmark_dataset_length`)."""
    benchmark = tables["benchmark"]
    if kind.endswith("-subset"):
        keep = [i % 7 != 3 for i in range(benchmark.num_rows)]
        benchmark = benchmark.filter(pa.array(keep))
    return benchmark


RQ2_KINDS = ["continuous", "tied", "tied-subset"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", RQ2_KINDS)
@pytest.mark.parametrize("query", ["text", "image"])
def test_rq2_equals_the_restated_authors_arithmetic(tables: dict[str, pa.Table], kind: str, query: str) -> None:
    image_vectors, text_vectors = _embeddings(tables, kind)
    benchmark = _benchmark(tables, kind)
    per_query = m.rq2_scores(benchmark, image_vectors, text_vectors, query=query)
    assert per_query.schema == m.RQ2_PER_QUERY
    assert per_query.column_names[:6] == [
        "query_index",
        "query_image_id",
        "score_correct",
        "score_language_biased",
        "score_irrelevant",
        "winner",
    ]
    report = m.win_rates(per_query, "rq2", n_resamples=200, seed=1)
    theirs = _AuthorsRQ2(tables["image_metadata"], image_vectors, text_vectors, query).evaluate(benchmark)

    ours_winner = dict(zip(per_query["query_index"].to_pylist(), per_query["winner"].to_pylist(), strict=True))
    assert ours_winner == theirs["winners"]
    ours_scores = np.column_stack([per_query[f"score_{c}"].to_numpy() for c, _ in RQ2_SLOTS])
    np.testing.assert_allclose(
        ours_scores, [theirs["scores"][i] for i in per_query["query_index"].to_pylist()], atol=1e-6
    )

    assert report.overall.n == sum(theirs["overall"].values()) == benchmark.num_rows
    assert _wins(Counter(report.overall.wins)) == theirs["overall"]
    for symbol, category in (("cr", "correct"), ("lb", "language_biased"), ("ti", "irrelevant")):
        assert report.overall.rate(symbol).value == pytest.approx(theirs["rates"][category], abs=1e-15)
    if theirs["sp"] is None:
        assert report.overall.sp.value is None
    else:
        assert report.overall.sp.value == pytest.approx(theirs["sp"], rel=1e-12)
    assert {g.group: _wins(Counter(g.wins)) for g in report.by_country} == theirs["by_country"]
    assert _ours_by_authors_language(per_query, report) == theirs["by_language"]
    for g in report.by_country:
        n = sum(theirs["by_country"][g.group].values())
        assert g.n == n
        assert g.rates["language_biased"].value == theirs["by_country"][g.group]["language_biased"] / n

    if kind.startswith("tied"):  # the tie rule was exercised: some winners share the top score with a later slot
        top = ours_scores.max(axis=1, keepdims=True)
        tied_rows = (ours_scores == top).sum(axis=1) > 1
        assert tied_rows.sum() >= 3
        first = np.argmax(ours_scores == top, axis=1)
        assert (
            np.array(per_query["winner"].to_pylist())[tied_rows] == np.array(m.RQ2_CATEGORIES)[first[tied_rows]]
        ).all()
        assert (first[tied_rows] < 2).any()


def test_ties_go_to_the_earlier_slot() -> None:
    """An exact tie is won by correct over language-biased over irrelevant, as torch.argmax / numpy argmax do."""
    e1, e2 = np.eye(2)
    benchmark = _rq2_table(
        [
            ("q", "a", "a", "b"),  # correct = language-biased > irrelevant -> correct
            ("q", "b", "a", "a"),  # language-biased = irrelevant > correct -> language_biased
            ("q", "b", "b", "b"),  # all equal -> correct
        ]
    )
    per_query = m.rq2_scores(benchmark, {"a": e1, "b": e2}, {"q": e1})
    assert per_query["winner"].to_pylist() == ["correct", "language_biased", "correct"]


def _rq2_table(rows: list[tuple[str, str, str, str]], countries: list[str] | None = None) -> pa.Table:
    """A minimal RQ2 table: (query text, correct id, language-biased id, irrelevant id) per row."""
    data: dict[str, list] = {
        "query_index": list(range(len(rows))),
        "query_image_id": [f"q{i}" for i in range(len(rows))],
        "query_concept": ["train"] * len(rows),
        "query_country": countries or ["Japan"] * len(rows),
        "query_language": ["ja"] * len(rows),
        "query_text": [r[0] for r in rows],
    }
    for k, (_, prefix) in enumerate(RQ2_SLOTS):
        data[f"{prefix}image_id"] = [r[k + 1] for r in rows]
    return pa.table(data)


# --- RQ2 against the authors' evaluator (XCM_AUTHORS_EVAL) --------------------------------------------------------


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def authors() -> tuple[ModuleType, ModuleType]:
    where = os.environ.get(AUTHORS_ENV)
    if not where:
        pytest.skip(f"{AUTHORS_ENV} is not set (the folder of the authors' rq2_eval/utils)")
    pytest.importorskip("torch", reason="the authors' evaluator needs torch")
    folder = Path(where) if Path(where).is_dir() else Path(where).parent
    return (
        _load(folder / "benchmark_evaluator.py", "xcm_authors_benchmark_evaluator"),
        _load(folder / "load_cultural_dataset.py", "xcm_authors_load_cultural_dataset"),
    )


@pytest.mark.parametrize("kind", RQ2_KINDS)
@pytest.mark.parametrize("experiment", ["text-to-image", "image-to-image"])
def test_rq2_equals_the_authors_evaluator(
    authors: tuple[ModuleType, ModuleType], release: Path, tables: dict[str, pa.Table], kind: str, experiment: str
) -> None:
    import datasets

    evaluator_module, dataset_module = authors
    dataset = dataset_module.CulturalBiasDataset(str(release))  # load_dataset(release, name="image_metadata")
    benchmark = datasets.load_dataset(str(release), name="benchmark", split="train")  # as their notebook does
    if kind.endswith("-subset"):
        benchmark = datasets.Dataset(_benchmark(tables, kind))
    image_vectors, text_vectors = _embeddings(tables, kind)
    ids, native = dataset["image_id"], dataset["concept_in_native"]
    embeddings = {
        "image_embedding": [image_vectors[i].reshape(1, -1) for i in ids],
        "text_embeddings": {"translated_concept_embedding": [text_vectors[t].reshape(1, -1) for t in native]},
    }
    evaluator = evaluator_module.SelfPreferenceBiasEvaluator(dataset, embeddings, "random", "clip")
    similarity, raw = evaluator.evaluate_from_benchmark(benchmark, experiment)
    summary = evaluator.summarize_scores_with_metadata(similarity)
    one_hot, _ = evaluator.summarize_scores(similarity)

    query = "text" if experiment == "text-to-image" else "image"
    per_query = m.rq2_scores(_benchmark(tables, kind), image_vectors, text_vectors, query=query)
    report = m.win_rates(per_query, "rq2", n_resamples=0)

    theirs = {r["query_index"]: r for r in raw if r is not None}
    letter = {"a": "correct", "b": "language_biased", "c": "irrelevant"}
    for row in per_query.to_pylist():
        their = theirs[row["query_index"]]
        assert row["winner"] == letter[their["winner"]], row["query_index"]
        for k, category in letter.items():
            assert row[f"score_{category}"] == pytest.approx(their[f"score_{k}"], abs=1e-6)
    assert len(theirs) == per_query.num_rows

    overall = Counter({AUTHORS_LETTER[k]: v for k, v in summary["overall_one_hot"].items()})
    assert _wins(Counter(report.overall.wins)) == overall
    assert [report.overall.wins[c] for c in m.RQ2_CATEGORIES] == [
        one_hot["A_wins"],
        one_hot["B_wins"],
        one_hot["C_wins"],
    ]
    n = sum(overall.values())
    for category in m.RQ2_CATEGORIES:
        assert report.overall.rates[category].value == overall[category] / n
    if overall["correct"]:
        assert report.overall.sp.value == pytest.approx(overall["language_biased"] / overall["correct"])

    def frame(counts) -> dict[str, Counter]:  # pandas unstack -> {group: Counter(category -> wins)}
        return {
            group: _wins(Counter({AUTHORS_LETTER[k]: int(v) for k, v in row.items()}))
            for group, row in counts.to_dict(orient="index").items()
        }

    assert {g.group: _wins(Counter(g.wins)) for g in report.by_country} == frame(summary["country_one_hot"])
    assert _ours_by_authors_language(per_query, report) == frame(summary["language_one_hot"])


# --- RQ3 ---------------------------------------------------------------------------------------------------------


def _restated_rq3_winners(benchmark_cd: pa.Table, image_vectors: dict, text_vectors: dict) -> list[str]:
    """The RQ2 rule over six slots: float32 clamped cosine, first maximum in the paper's category order."""
    out = []
    for row in benchmark_cd.to_pylist():
        q = text_vectors[row["query_text"]].reshape(1, -1)
        s = [
            _AuthorsRQ2.cosine(q, image_vectors[row[f"{slot}_candidate_image_id"]].reshape(1, -1)) for slot in RQ3_SLOTS
        ]
        out.append(RQ3_SLOTS[max(range(len(s)), key=lambda k: (s[k], -k))])
    return out


@pytest.mark.parametrize("kind", ["continuous", "tied"])
def test_rq3_win_rates_and_tests_equal_a_restatement(tables: dict[str, pa.Table], kind: str) -> None:
    image_vectors, text_vectors = _embeddings(tables, kind)
    benchmark_cd = tables["benchmark_cd"]
    per_query = m.rq3_scores(benchmark_cd, image_vectors, text_vectors)
    assert per_query.schema == m.RQ3_PER_QUERY
    winners = _restated_rq3_winners(benchmark_cd, image_vectors, text_vectors)
    assert per_query["winner"].to_pylist() == winners

    report = m.win_rates(per_query, "rq3", n_resamples=200)
    n = len(winners)
    counts = Counter(winners)
    # Table 3: M_k over all sextets, micro-averaged.
    assert {c: e.value for c, e in report.overall.rates.items()} == {c: counts[c] / n for c in RQ3_SLOTS}
    assert report.overall.sp is None
    assert report.overall.rate("orlb").value == counts["object_relevant_language_biased"] / n
    countries = benchmark_cd["query_country"].to_pylist()
    for g in report.by_country:  # Table 14
        mine = [w for w, c in zip(winners, countries, strict=True) if c == g.group]
        assert g.n == len(mine)
        assert g.wins == {c: mine.count(c) for c in RQ3_SLOTS}

    tests = {(t.test, t.group_by, t.group): t for t in m.failure_mode_tests(per_query)}
    languages = benchmark_cd["query_language"].to_pylist()
    for (test, group_by, group), t in tests.items():
        a, b = m.FAILURE_MODE_TESTS[test]
        keys = {"overall": [m.ALL] * n, "query_country": countries, "query_language": languages}[group_by]
        mine = [w for w, key in zip(winners, keys, strict=True) if key == group]
        o_a, o_b = mine.count(a), mine.count(b)
        assert (t.wins_a, t.wins_b, t.n) == (o_a, o_b, len(mine))
        assert t.diff == pytest.approx(o_a / len(mine) - o_b / len(mine))
        if o_a + o_b == 0:
            assert t.p_value is None and not t.significant
            continue
        rest = len(mine) - o_a - o_b
        e = (o_a + o_b) / 2
        observed, expected = ([o_a, o_b, rest], [e, e, rest]) if rest else ([o_a, o_b], [e, e])
        want = stats.chisquare(observed, expected, ddof=len(observed) - 2)
        assert t.statistic == pytest.approx(want.statistic)
        assert t.p_value == pytest.approx(want.pvalue)
    assert {(g, grp) for _, g, grp in tests} >= {("overall", m.ALL), *(("query_country", c) for c in set(countries))}
    table = m.preference_tests_table(list(tests.values()))
    assert table.schema == m.PREFERENCE_TESTS and table.num_rows == len(tests)


# --- App. P.1: the chi-squared test on a hand-built table ----------------------------------------------------------


def test_chi_squared_on_a_hand_built_contingency_equals_scipy() -> None:
    """O = (30 object-relevant, 10 object-relevant language-biased, 60 other); E = (20, 20, 60), 1 dof:
    chi2 = 100/20 + 100/20 + 0 = 10."""
    statistic, p_value = m.preference_chi_squared(30, 10)
    direct = stats.chisquare(f_obs=[30, 10, 60], f_exp=[20, 20, 60], ddof=1)
    assert statistic == pytest.approx(10.0) == pytest.approx(direct.statistic)
    assert p_value == pytest.approx(direct.pvalue) == pytest.approx(stats.chi2.sf(10.0, df=1))
    assert p_value == pytest.approx(0.001565402258, rel=1e-9)
    assert m.preference_chi_squared(7, 7) == (0.0, 1.0)
    assert m.preference_chi_squared(0, 0) is None

    winners = ["object_relevant"] * 30 + ["object_relevant_language_biased"] * 10 + ["correct"] * 60
    per_query = _rq3_per_query(winners, ["Japan"] * 50 + ["Kenya"] * 50)
    (overall,) = [t for t in m.failure_mode_tests(per_query, group_by=["overall"]) if t.test == "ql_association"]
    assert (overall.wins_a, overall.wins_b, overall.n) == (30, 10, 100)
    assert (overall.rate_a, overall.rate_b, overall.diff) == (0.3, 0.1, pytest.approx(0.2))
    assert overall.statistic == pytest.approx(10.0) and overall.p_value == pytest.approx(direct.pvalue)
    assert overall.significant
    cd = [t for t in m.failure_mode_tests(per_query, group_by=["query_country"]) if t.test == "cd_vs_ql"]
    assert [(t.group, t.statistic, t.p_value, t.significant) for t in cd] == [
        ("Japan", None, None, False),
        ("Kenya", None, None, False),
    ]


def _rq3_per_query(winners: list[str], countries: list[str]) -> pa.Table:
    n = len(winners)
    columns = {
        "query_index": pa.array(range(n), pa.int32()),
        "query_image_id": [f"q{i}" for i in range(n)],
        **{f"score_{c}": [0.0] * n for c in m.RQ3_CATEGORIES},
        "winner": winners,
        "query_concept": ["train"] * n,
        "query_country": countries,
        "query_language": ["xx"] * n,
        "descriptor_country": ["USA"] * n,
    }
    return pa.table(columns, schema=m.RQ3_PER_QUERY)


# --- win rates and bootstrap intervals ---------------------------------------------------------------------------


def _rq2_per_query(winners: list[str], countries: list[str] | None = None, languages: list[str] | None = None):
    n = len(winners)
    return pa.table(
        {
            "query_index": pa.array(range(n), pa.int32()),
            "query_image_id": [f"q{i}" for i in range(n)],
            **{f"score_{c}": [0.0] * n for c in m.RQ2_CATEGORIES},
            "winner": winners,
            "query_concept": ["train"] * n,
            "query_country": countries or ["Japan"] * n,
            "query_language": languages or ["ja"] * n,
        },
        schema=m.RQ2_PER_QUERY,
    )


def _shares(n: int, cr: float, lb: float) -> list[str]:
    a, b = round(n * cr), round(n * lb)
    return ["correct"] * a + ["language_biased"] * b + ["irrelevant"] * (n - a - b)


def test_m_k_and_sp_on_a_hand_built_table() -> None:
    winners = _shares(10, 0.5, 0.3)
    report = m.win_rates(_rq2_per_query(winners, ["UK"] * 4 + ["USA"] * 6, ["en"] * 10), "rq2", n_resamples=0)
    assert report.overall.wins == {"correct": 5, "language_biased": 3, "irrelevant": 2}
    assert [report.overall.rate(s).value for s in ("cr", "lb", "ti")] == [0.5, 0.3, 0.2]
    assert report.overall.sp.value == pytest.approx(0.6)  # Eq. 4: 0.3 / 0.5
    assert report.overall.sp.ci_low is None and report.overall.rates["correct"].ci_high is None
    (uk, usa) = report.by_country
    assert (uk.group, uk.wins) == ("UK", {"correct": 4, "language_biased": 0, "irrelevant": 0})
    assert uk.sp.value == 0.0
    assert (usa.wins, usa.sp.value) == ({"correct": 1, "language_biased": 3, "irrelevant": 2}, 3.0)
    assert [g.group for g in report.by_language] == ["en"]

    no_correct = m.win_rates(_rq2_per_query(["language_biased", "irrelevant"] * 5), "rq2", n_resamples=100)
    assert no_correct.overall.rate("cr").value == 0.0
    assert no_correct.overall.sp.value is None  # M_cr = 0: SP undefined
    assert no_correct.overall.sp.ci_high is None

    table = m.win_rates_table(report)
    assert table.schema == m.WIN_RATES
    sp = table.filter(pa.compute.equal(table["metric"], "sp")).to_pylist()
    assert [(r["group_by"], r["group"], r["value"]) for r in sp] == [
        ("overall", "all", pytest.approx(0.6)),
        ("query_language", "en", pytest.approx(0.6)),
        ("query_country", "UK", 0.0),
        ("query_country", "USA", 3.0),
    ]


def _widths(report: m.WinRateReport) -> dict[str, float]:
    g = report.overall
    return {c: g.rates[c].ci_high - g.rates[c].ci_low for c in m.RQ2_CATEGORIES} | {"sp": g.sp.ci_high - g.sp.ci_low}


def test_bootstrap_intervals_contain_the_estimate_and_shrink_with_more_queries(tables: dict[str, pa.Table]) -> None:
    image_vectors, text_vectors = _embeddings(tables, "continuous")
    report = m.win_rates(m.rq2_scores(tables["benchmark"], image_vectors, text_vectors), "rq2", n_resamples=500)
    checked = 0
    for g in report.groups():
        for estimate in [*g.rates.values(), g.sp]:
            if estimate.value is None or estimate.ci_high is None:
                continue
            assert estimate.ci_low <= estimate.value <= estimate.ci_high, (g.group_by, g.group)
            checked += 1
    assert checked >= 20

    small = m.win_rates(_rq2_per_query(_shares(100, 0.6, 0.3)), "rq2", n_resamples=2000, seed=3)
    large = m.win_rates(_rq2_per_query(_shares(10_000, 0.6, 0.3)), "rq2", n_resamples=2000, seed=3)
    assert small.overall.rates["correct"].value == large.overall.rates["correct"].value == 0.6
    for metric, width in _widths(large).items():
        # Standard errors fall as 1/sqrt(n): 100x the queries, about a tenth of the width.
        assert 0 < width < _widths(small)[metric] / 5, metric
    # A 95% interval of a share p from n queries is about 2 * 1.96 * sqrt(p (1 - p) / n) wide.
    assert _widths(large)["correct"] == pytest.approx(2 * 1.96 * math.sqrt(0.6 * 0.4 / 10_000), rel=0.1)
    assert _widths(small)["correct"] == pytest.approx(2 * 1.96 * math.sqrt(0.6 * 0.4 / 100), rel=0.15)
    narrow = m.win_rates(_rq2_per_query(_shares(100, 0.6, 0.3)), "rq2", n_resamples=2000, seed=3, confidence=0.5)
    assert _widths(narrow)["correct"] < _widths(small)["correct"]


def test_bootstrap_is_seeded_and_equals_resampling_the_queries() -> None:
    per_query = _rq2_per_query(_shares(400, 0.55, 0.3), ["Japan", "Kenya"] * 200, ["ja", "sw"] * 200)
    once = m.win_rates(per_query, "rq2", n_resamples=300, seed=7)
    assert m.win_rates(per_query, "rq2", n_resamples=300, seed=7) == once
    other_seed = m.win_rates(per_query, "rq2", n_resamples=300, seed=8)
    assert other_seed.overall.rates["correct"].value == once.overall.rates["correct"].value
    assert other_seed.overall.rates["correct"] != once.overall.rates["correct"]  # other resamples, other bounds
    # A group's interval does not depend on the other groups of the table.
    japan_only = per_query.filter(pa.compute.equal(per_query["query_country"], "Japan"))
    assert m.win_rates(japan_only, "rq2", n_resamples=300, seed=7).by_country == once.by_country[:1]

    # The multinomial draw is the index bootstrap's distribution: compare with resampling the rows.
    b = 4000
    report = m.win_rates(per_query, "rq2", n_resamples=b, seed=11)
    codes = np.array([m.RQ2_CATEGORIES.index(w) for w in per_query["winner"].to_pylist()])
    rows = np.random.default_rng(12).integers(0, len(codes), size=(b, len(codes)))
    counts = np.stack([(codes[rows] == k).sum(axis=1) for k in range(3)], axis=1)
    for k, category in enumerate(m.RQ2_CATEGORIES):
        low, high = np.quantile(counts[:, k] / len(codes), [0.025, 0.975])
        assert report.overall.rates[category].ci_low == pytest.approx(low, abs=0.01)
        assert report.overall.rates[category].ci_high == pytest.approx(high, abs=0.01)
    low, high = np.quantile(counts[:, 1] / counts[:, 0], [0.025, 0.975])
    assert report.overall.sp.ci_low == pytest.approx(low, rel=0.04)
    assert report.overall.sp.ci_high == pytest.approx(high, rel=0.04)

    with pytest.raises(ValueError, match="confidence"):
        m.win_rates(per_query, "rq2", confidence=1.0)
    with pytest.raises(ValueError, match="not a rq2 category"):
        m.win_rates(_rq3_per_query(["object_relevant"], ["Japan"]), "rq2")


# --- Eq. 5: similarity drift -------------------------------------------------------------------------------------


def test_similarity_drift_on_a_constructed_case() -> None:
    """q_C = e1 and q_{C+CD} = (e1 + e2) / sqrt(2): an image along e2 (the descriptor's culture) gains 1/sqrt(2),
    one along e1 (the object only) loses 1 - 1/sqrt(2), one along e3 does not move."""
    e1, e2, e3 = np.eye(3)
    r = 1 / math.sqrt(2)
    images = {"y-obj": e1 + e2, "x-obj": e1, "z-obj": 2 * e1, "y-other": e2, "x-other": e3, "none": -e3}
    texts = {"tren": e1, "tren de Japón": e1 + e2, "電車": e3, "日本の電車": e3}
    slots = dict(zip(RQ3_SLOTS, ["y-obj", "x-obj", "z-obj", "y-other", "x-other", "none"], strict=True))
    rows = [
        {"query_text": "tren de Japón", "query_language": "es", "query_country": "Spain", **slots},
        {"query_text": "日本の電車", "query_language": "ja", "query_country": "Japan", **slots},  # no change
    ]
    benchmark_cd = pa.table(
        {
            "query_index": [0, 1],
            "query_image_id": ["spain-0-1-eng", "japan-0-1-eng"],
            "query_concept": ["train", "train"],
            "query_country": [r_["query_country"] for r_ in rows],
            "descriptor_country": ["Japan", "Spain"],
            **{f"{s}_candidate_image_id": [r_[s] for r_ in rows] for s in RQ3_SLOTS},
            "query_language": [r_["query_language"] for r_ in rows],
            "query_text": [r_["query_text"] for r_ in rows],
        }
    )
    image_metadata = pa.table(
        {
            "image_id": ["spain-0-1-eng", "japan-0-1-eng"],
            "concept_in_native": ["tren", "電車"],
            "language_code": ["es", "ja"],
        }
    )
    plain = m.plain_query_texts(benchmark_cd, image_metadata)
    assert plain.to_pylist() == ["tren", "電車"]
    drift = m.similarity_drift(benchmark_cd, plain, images, texts)
    assert drift.schema == m.DRIFT_PER_QUERY
    got = {c: drift[f"drift_{c}"].to_pylist() for c in RQ3_SLOTS}
    # Row 0: cos((e1+e2)/|.|, I) - cos(e1, I).
    assert got["correct"][0] == pytest.approx(1.0 - r)  # e1 + e2 is the descriptor query itself: 1 - 1/sqrt(2)
    assert got["object_relevant_language_biased"][0] == pytest.approx(r - 1.0)
    assert got["object_relevant"][0] == pytest.approx(r - 1.0)  # the norm does not matter
    assert got["cultural_descriptor_relevant"][0] == pytest.approx(r)
    assert got["language_biased"][0] == pytest.approx(0.0)
    assert got["irrelevant"][0] == pytest.approx(0.0)
    assert all(values[1] == pytest.approx(0.0) for values in got.values())

    means = {(d.group_by, d.group): d for d in m.drift_means(drift)}
    assert means[("overall", "all")].n == 2
    assert means[("overall", "all")].mean_drift["correct"] == pytest.approx((1.0 - r) / 2)
    assert means[("query_country", "Spain")].mean_drift["cultural_descriptor_relevant"] == pytest.approx(r)
    assert means[("query_language", "ja")].mean_drift == {c: pytest.approx(0.0) for c in RQ3_SLOTS}
    table = m.drift_means_table(list(means.values()))
    assert table.schema == m.DRIFT_MEANS and table.num_rows == len(means) * 6

    with pytest.raises(ValueError, match="in 'ja', its RQ3 row in 'es'"):
        m.plain_query_texts(benchmark_cd, image_metadata.set_column(2, "language_code", pa.array(["ja", "ja"])))
    with pytest.raises(ValueError, match="1 plain texts for 2"):
        m.similarity_drift(benchmark_cd, ["tren"], images, texts)


def test_the_plain_query_of_an_rq3_row_is_the_rq2_query_of_its_image(tables: dict[str, pa.Table]) -> None:
    """q_C is not stored in benchmark_cd; it is the query image's concept_in_native, which is also the RQ2
    query text of that image (same translation), and the start of the RQ3 text for the demo's templates."""
    benchmark_cd, benchmark = tables["benchmark_cd"], tables["benchmark"]
    plain = m.plain_query_texts(benchmark_cd, tables["image_metadata"]).to_pylist()
    rq2_text = dict(zip(benchmark["query_image_id"].to_pylist(), benchmark["query_text"].to_pylist(), strict=True))
    ids = benchmark_cd["query_image_id"].to_pylist()
    assert [rq2_text[i] for i in ids if i in rq2_text] == [p for i, p in zip(ids, plain, strict=True) if i in rq2_text]
    assert sum(i in rq2_text for i in ids) >= len(ids) * 0.9
    descriptor = benchmark_cd["query_text"].to_pylist()
    assert all(p in d and p != d for p, d in zip(plain, descriptor, strict=True))

    image_vectors, text_vectors = _embeddings(tables, "continuous")
    drift = m.similarity_drift(benchmark_cd, plain, image_vectors, text_vectors)
    row = benchmark_cd.to_pylist()[0]
    image = image_vectors[row["correct_candidate_image_id"]].astype(np.float64)
    want = float(text_vectors[row["query_text"]] @ image) - float(text_vectors[plain[0]] @ image)
    assert drift["drift_correct"][0].as_py() == pytest.approx(want, abs=1e-6)


def test_missing_vectors_and_columns_are_named() -> None:
    benchmark = _rq2_table([("q", "a", "b", "c")])
    with pytest.raises(KeyError, match=r"no image vector for 1 key\(s\), e.g. \['c'\]"):
        m.rq2_scores(benchmark, {"a": [1, 0], "b": [0, 1]}, {"q": [1, 0]})
    with pytest.raises(KeyError, match="no query text vector"):
        m.rq2_scores(benchmark, {"a": [1, 0], "b": [0, 1], "c": [1, 1]}, {"other": [1, 0]})
    with pytest.raises(ValueError, match=r"lacks the column\(s\) \['query_text'\]"):
        m.rq2_scores(benchmark.drop(["query_text"]), {}, {})
    with pytest.raises(ValueError, match="non-finite"):
        m.Vectors.from_mapping({"a": [np.nan, 1.0]})


# --- end to end: `culturebench evaluate 3xcm --model-backend embeddings` -----------------------------------------


def _write_embeddings(folder: Path, image_vectors: dict, text_vectors: dict, drop_text: str | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(
        pa.table({"image_id": list(image_vectors), "embedding": [v.tolist() for v in image_vectors.values()]}),
        folder / "IMG.parquet",
    )
    texts = [t for t in text_vectors if t != drop_text]
    pq.write_table(
        pa.table({"text": texts, "embedding": [text_vectors[t].tolist() for t in texts]}), folder / "TXT.parquet"
    )


def _evaluate_cli(*args: str) -> tuple[int, str]:
    from typer.testing import CliRunner

    from flows.cli import app

    result = CliRunner().invoke(app, ["evaluate", *args])
    return result.exit_code, result.output


def _embeddings_cli(release: Path, folder: Path, out: Path, *extra: str) -> tuple[int, str]:
    return _evaluate_cli(
        "3xcm",
        str(release),
        "--model-backend",
        "embeddings",
        "--image-embeddings",
        str(folder / "IMG.parquet"),
        "--text-embeddings",
        str(folder / "TXT.parquet"),
        "--out",
        str(out),
        *extra,
    )


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["continuous", "tied"])
def test_cli_results_equal_the_authors_arithmetic_and_form_an_immutable_loadable_folder(
    release: Path, tables: dict[str, pa.Table], tmp_path: Path, kind: str
) -> None:
    import json

    from datasets import load_dataset

    image_vectors, text_vectors = _embeddings(tables, kind)
    _write_embeddings(tmp_path / "vectors", image_vectors, text_vectors)
    out = tmp_path / "result"
    code, output = _embeddings_cli(release, tmp_path / "vectors", out, "--bootstrap-resamples", "200")
    assert code == 0, output

    per_query = pq.read_table(out / "per_query.parquet")
    assert per_query.column_names[:6] == [
        "query_index",
        "query_image_id",
        "score_correct",
        "score_language_biased",
        "score_irrelevant",
        "winner",
    ]
    theirs = _AuthorsRQ2(tables["image_metadata"], image_vectors, text_vectors).evaluate(tables["benchmark"])
    winners = dict(zip(per_query["query_index"].to_pylist(), per_query["winner"].to_pylist(), strict=True))
    assert winners == theirs["winners"] and set(winners.values()) <= set(m.RQ2_CATEGORIES)
    metrics = json.loads((out / "metrics.json").read_text())
    for symbol, category in (("M_cr", "correct"), ("M_lb", "language_biased"), ("M_ti", "irrelevant")):
        assert metrics[symbol] == pytest.approx(theirs["rates"][category], abs=1e-15)
        low, high = metrics["ci95"][symbol]
        assert low <= metrics[symbol] <= high
    assert metrics["SP"] == pytest.approx(theirs["sp"], rel=1e-12)
    # RQ3 and Δsim ran too (the vectors cover their texts), and the release is named by its manifest's hash.
    assert metrics["skipped"] == [] and len(metrics["rq3"]["overall"]["rates"]) == 6
    assert {t["test"] for t in metrics["preference_tests"]} == {"ql_association", "cd_vs_ql"}
    manifest_sha = __import__("hashlib").sha256((release / "manifest.json").read_bytes()).hexdigest()
    assert metrics["release"]["manifest_sha256"] == manifest_sha
    card = (out / "README.md").read_text()
    assert manifest_sha in card and metrics["model"]["weights_sha256"] in card
    assert {p.name for p in (out / "figures").iterdir()} == {
        "sp_per_language.png",
        "win_rates_rq2.png",
        "win_rates_rq3.png",
        "delta_sim.png",
    }
    assert len(load_dataset(str(out), "per_query", split="test")) == tables["benchmark"].num_rows

    # Immutable: the same evaluation again is `unchanged`; other vectors into the same folder are refused.
    code, output = _embeddings_cli(release, tmp_path / "vectors", out, "--bootstrap-resamples", "200")
    assert code == 0 and '"status": "unchanged"' in output, output
    other_images = {k: -v for k, v in image_vectors.items()}
    _write_embeddings(tmp_path / "other", other_images, text_vectors)
    code, output = _embeddings_cli(release, tmp_path / "other", out, "--bootstrap-resamples", "200")
    assert code == 1 and "immutable" in output, output


@pytest.mark.parametrize("kind", ["continuous", "tied"])
def test_cli_winners_equal_the_authors_evaluator(
    authors: tuple[ModuleType, ModuleType], release: Path, tables: dict[str, pa.Table], tmp_path: Path, kind: str
) -> None:
    """The required cross-check, end to end: the same vectors into their evaluator and into the CLI."""
    import datasets

    evaluator_module, dataset_module = authors
    dataset = dataset_module.CulturalBiasDataset(str(release))
    benchmark = datasets.load_dataset(str(release), name="benchmark", split="train")
    image_vectors, text_vectors = _embeddings(tables, kind)
    ids, native = dataset["image_id"], dataset["concept_in_native"]
    embeddings = {
        "image_embedding": [image_vectors[i].reshape(1, -1) for i in ids],
        "text_embeddings": {"translated_concept_embedding": [text_vectors[t].reshape(1, -1) for t in native]},
    }
    evaluator = evaluator_module.SelfPreferenceBiasEvaluator(dataset, embeddings, "random", "clip")
    _, raw = evaluator.evaluate_from_benchmark(benchmark, "text-to-image")
    one_hot, _ = evaluator.summarize_scores(evaluator.evaluate_from_benchmark(benchmark, "text-to-image")[0])

    _write_embeddings(tmp_path / "vectors", image_vectors, text_vectors)
    code, output = _embeddings_cli(release, tmp_path / "vectors", tmp_path / "out", "--bootstrap-resamples", "0")
    assert code == 0, output
    per_query = pq.read_table(tmp_path / "out" / "per_query.parquet")
    letter = {"a": "correct", "b": "language_biased", "c": "irrelevant"}
    theirs = {r["query_index"]: letter[r["winner"]] for r in raw if r is not None}
    assert dict(zip(per_query["query_index"].to_pylist(), per_query["winner"].to_pylist(), strict=True)) == theirs
    import json

    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    n = one_hot["A_wins"] + one_hot["B_wins"] + one_hot["C_wins"]
    assert (metrics["M_cr"], metrics["M_lb"], metrics["M_ti"]) == (
        one_hot["A_wins"] / n,
        one_hot["B_wins"] / n,
        one_hot["C_wins"] / n,
    )
    assert metrics["SP"] == pytest.approx(one_hot["B_wins"] / one_hot["A_wins"], rel=1e-12)


def test_cli_names_missing_vectors_and_skips_what_rq2_only_vectors_cannot_score(
    release: Path, tables: dict[str, pa.Table], tmp_path: Path
) -> None:
    import json

    image_vectors, text_vectors = _embeddings(tables, "continuous")
    first_query = tables["benchmark"]["query_text"][0].as_py()
    _write_embeddings(tmp_path / "missing", image_vectors, text_vectors, drop_text=first_query)
    code, output = _embeddings_cli(release, tmp_path / "missing", tmp_path / "out-missing")
    assert code == 2, output
    assert "cannot evaluate" in output and "1" in output, output
    assert not (tmp_path / "out-missing").exists()

    rq2_texts = set(tables["benchmark"]["query_text"].to_pylist())
    _write_embeddings(tmp_path / "rq2", image_vectors, {t: v for t, v in text_vectors.items() if t in rq2_texts})
    code, output = _embeddings_cli(release, tmp_path / "rq2", tmp_path / "out-rq2", "--bootstrap-resamples", "0")
    if set(tables["benchmark_cd"]["query_text"].to_pylist()) <= rq2_texts:
        pytest.skip("the release's RQ3 texts are all RQ2 texts")
    assert code == 0, output
    metrics = json.loads((tmp_path / "out-rq2" / "metrics.json").read_text())
    assert "rq3" not in metrics and any(s.startswith("RQ3") for s in metrics["skipped"])
    assert "Not computed" in (tmp_path / "out-rq2" / "README.md").read_text()


@pytest.mark.slow
def test_compare_puts_models_side_by_side(release: Path, tables: dict[str, pa.Table], tmp_path: Path) -> None:
    image_vectors, text_vectors = _embeddings(tables, "continuous")
    _write_embeddings(tmp_path / "a", image_vectors, text_vectors)
    _write_embeddings(tmp_path / "b", {k: -v for k, v in image_vectors.items()}, text_vectors)
    for name in ("a", "b"):
        code, output = _embeddings_cli(release, tmp_path / name, tmp_path / f"out-{name}", "--bootstrap-resamples", "0")
        assert code == 0, output
    code, output = _evaluate_cli(
        "compare", str(tmp_path / "out-a"), str(tmp_path / "out-b"), "--out", str(tmp_path / "cmp")
    )
    assert code == 0, output
    table = pq.read_table(tmp_path / "cmp" / "comparison.parquet")
    assert table.num_rows == 2 * 4 and set(table["metric"].to_pylist()) == {"M_cr", "M_lb", "M_ti", "SP"}
    # Negated image vectors turn every ranking around: the two models are told apart, and so are their numbers.
    assert len(set(table["model_id"].to_pylist())) == 2
    by_model = {}
    for r in table.to_pylist():
        by_model.setdefault(r["model_id"], {})[r["metric"]] = r["value"]
    first, second = by_model.values()
    assert first["M_cr"] != second["M_cr"]
    assert "M_cr" in output.splitlines()[0]  # the Markdown table's header
    assert (tmp_path / "cmp" / "comparison.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, output = _evaluate_cli("compare", str(tmp_path / "out-a"), str(tmp_path))
    assert code == 2 and "not an evaluation result folder" in output
