"""The leaderboard's paired tests and breakdown intervals, cross-checked against independent implementations:
McNemar's exact test against statsmodels' `mcnemar(exact=True)`, Holm against statsmodels' `multipletests`, the
tests' decisions against a paired bootstrap written here with a fixed seed; MixCuBe's breakdown intervals against
statsmodels' Wilson and Newcombe intervals over counts taken from per_query.parquet (the code reads
accuracy.parquet); the per-query outcomes against the headline they add up to; `compare --out`'s comparison.json;
the comparison figure's size with 2 and with 20 models."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from PIL import Image
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import confint_proportions_2indep, proportion_confint
from typer.testing import CliRunner

from evaluation.leaderboard import paired
from evaluation.leaderboard.tables import read_results, tables
from evaluation.mixcube.leaderboard import read_outcomes as mixcube_outcomes
from evaluation.results.figures import ROW_INCHES, compare_png
from evaluation.xcm.leaderboard import read_outcomes as xcm_outcomes
from flows.cli import app
from tests.evaluation.leaderboard.test_tables import MIXCUBE, XCM, metrics


def outcomes(rng: np.random.Generator, n: int, p: float) -> dict[str, bool]:
    return {f"q{i}": bool(v) for i, v in enumerate(rng.random(n) < p)}


@pytest.mark.parametrize("seed", range(6))
def test_mcnemar_is_statsmodels_exact_mcnemar(seed: int) -> None:
    rng = np.random.default_rng(seed)
    first, second = outcomes(rng, 80, 0.3 + 0.1 * seed), outcomes(rng, 80, 0.5)
    test = paired.pair(0, 1, first, second)
    both = sum(first[k] and second[k] for k in first)
    neither = sum(not first[k] and not second[k] for k in first)
    table = [[both, test.a_only], [test.b_only, neither]]
    assert test.queries == 80 and both + neither + test.a_only + test.b_only == 80
    assert test.p_value == pytest.approx(mcnemar(table, exact=True).pvalue, rel=1e-12)


def test_holm_is_statsmodels_holm() -> None:
    rng = np.random.default_rng(7)
    for size in (1, 3, 10):
        p_values = list(rng.random(size) ** 3)
        _, expected, _, _ = multipletests(p_values, method="holm")
        assert paired.holm(p_values) == pytest.approx(list(expected), rel=1e-12)


def paired_bootstrap_excludes_zero(first: dict[str, bool], second: dict[str, bool], resamples: int = 2000) -> bool:
    """A paired bootstrap of the difference in shares, queries resampled together, 95% percentile interval."""
    keys = sorted(first.keys() & second.keys())
    a = np.array([first[k] for k in keys], dtype=float)
    b = np.array([second[k] for k in keys], dtype=float)
    rng = np.random.default_rng(0)
    draws = rng.integers(0, len(keys), size=(resamples, len(keys)))
    low, high = np.quantile((a[draws] - b[draws]).mean(axis=1), [0.025, 0.975])
    return bool(low > 0 or high < 0)


def test_the_decisions_agree_with_a_paired_bootstrap() -> None:
    """Clear cases: a model right on 80% of 300 queries against one right on 30% (both tell them apart), two
    draws of the same 50% model (neither does); one pair each, so Holm changes nothing."""
    rng = np.random.default_rng(3)
    good, poor = outcomes(rng, 300, 0.8), outcomes(rng, 300, 0.3)
    same_a, same_b = outcomes(rng, 300, 0.5), outcomes(rng, 300, 0.5)
    for first, second in ((good, poor), (same_a, same_b)):
        (test,) = paired.paired_tests([[(0, first), (1, second)]])
        assert test.distinguishable == paired_bootstrap_excludes_zero(first, second)
    assert paired.paired_tests([[(0, good), (1, poor)]])[0].distinguishable


def test_pairs_stay_within_a_release_and_queries_are_aligned_by_key() -> None:
    first = {"a": True, "b": True, "c": False}
    second = {"b": False, "c": True, "d": True}  # a and d: one model's only
    test = paired.pair(0, 1, first, second)
    assert (test.queries, test.a_only, test.b_only) == (2, 1, 1)
    tests = paired.paired_tests([[(0, first), (1, second)], [(2, first)]])
    assert [(t.a, t.b) for t in tests] == [(0, 1)]  # the lone result of another release is paired with nobody


def test_outcomes_add_up_to_the_headline() -> None:
    xcm = xcm_outcomes(XCM)
    assert len(xcm) == metrics(XCM)["n_queries"]
    assert sum(xcm.values()) / len(xcm) == pytest.approx(metrics(XCM)["M_cr"], abs=1e-12)
    mix = mixcube_outcomes(MIXCUBE)
    assert len(mix) == metrics(MIXCUBE)["answered"]
    assert sum(mix.values()) / len(mix) == pytest.approx(metrics(MIXCUBE)["accuracy"], abs=1e-12)


def test_mixcube_breakdown_intervals_are_statsmodels_over_the_per_image_counts(tmp_path: Path) -> None:
    """Counts recounted from per_query.parquet (some answers made correct first, so that the intervals are not all
    alike): each group's Wilson interval, each drop's Newcombe interval."""
    folder = tmp_path / "result"
    shutil.copytree(MIXCUBE, folder)
    per_image = pq.read_table(folder / "per_query.parquet")
    correct = [i % 3 == 0 or row == "Korean" for i, row in enumerate(per_image["country"].to_pylist())]
    per_image = per_image.set_column(per_image.schema.get_field_index("correct"), "correct", [correct])
    accuracy = pq.read_table(folder / "accuracy.parquet").to_pylist()
    cells = list(zip(*(per_image[c].to_pylist() for c in ("country", "category", "ethnicity")), strict=True))
    for row in accuracy:
        keys = (row["country"], row["category"], row["ethnicity"])
        row["correct"] = sum(v for cell, v in zip(cells, correct, strict=True) if cell == keys)
    path = folder / "accuracy.parquet"
    pq.write_table(pa.Table.from_pylist(accuracy, schema=pq.read_schema(path)), path)

    def counts(column: str, value: str) -> tuple[int, int]:
        chosen = pc.equal(per_image[column], value).to_pylist()
        answered = [
            c for c, e, m in zip(correct, per_image["error"].to_pylist(), chosen, strict=True) if m and e is None
        ]
        return sum(answered), len(answered)

    (result,) = read_results([folder])
    by_key = {t.key: t for t in tables([result])}
    for key, column in (("accuracy_by_country", "country"), ("accuracy_by_category", "category")):
        (row,) = by_key[key].rows
        for group, cell in row.cells.items():
            successes, trials = counts(column, group)
            low, high = proportion_confint(successes, trials, alpha=0.05, method="wilson")
            assert (cell.low, cell.high) == pytest.approx((low, high), abs=1e-12), (key, group)
    (drops,) = by_key["drop_by_ethnicity"].rows
    original = counts("ethnicity", "original")
    for ethnicity, cell in drops.cells.items():
        swap = counts("ethnicity", ethnicity)
        low, high = confint_proportions_2indep(original[0], original[1], swap[0], swap[1], method="newcomb")
        assert (cell.low, cell.high) == pytest.approx((low, high), abs=1e-12), ethnicity


def test_compare_out_writes_the_json_the_page_holds(tmp_path: Path) -> None:
    other = tmp_path / "other"
    shutil.copytree(XCM, other)
    result = CliRunner().invoke(
        app,
        ["evaluate", "compare", str(XCM), str(other), "--out", str(tmp_path / "cmp"), "--html", str(tmp_path / "p")],
    )
    assert result.exit_code == 0, result.output
    document = json.loads((tmp_path / "cmp" / "comparison.json").read_text())
    assert document == json.loads((tmp_path / "p" / "comparison.json").read_text())
    (triplet,) = [t for t in document["paired_tests"] if t["table"] == "triplet"]
    (pair,) = triplet["pairs"]
    # the same result twice: every query concordant, nothing to tell apart
    assert (pair["a_only"], pair["b_only"], pair["p_value"], pair["distinguishable"]) == (0, 0, 1.0, False)
    names = [m["display_name"] for m in document["models"]]
    assert len(set(names)) == 2 and all(m["model_id"] == metrics(XCM)["model"]["model_id"] for m in document["models"])


@pytest.mark.parametrize("models", [2, 20])
def test_the_comparison_figure_grows_with_its_models(models: int) -> None:
    names = [f"model-{k:02d}" for k in range(models)]
    points = {m: [(0.1 * (k % 9), 0.05, 0.2) for k in range(models)] for m in ("M_cr", "M_lb", "M_ti", "SP")}
    image = Image.open(io.BytesIO(compare_png(names, points, "t")))
    dpi = image.info.get("dpi", (100, 100))[1]
    # each model's row keeps its height (a label's line), however many there are
    assert image.height >= ROW_INCHES * models * dpi
    assert image.width < 2000


@pytest.mark.parametrize("plant", ["link", "wrong-type"])
def test_a_per_query_table_that_is_not_ours_is_one_line(tmp_path: Path, plant: str) -> None:
    """The paired tests read per_query.parquet: a link, or a `winner` that is not text, is named in one line."""
    folder = tmp_path / "result"
    shutil.copytree(XCM, folder)
    target = folder / "per_query.parquet"
    if plant == "link":
        target.unlink()
        target.symlink_to(XCM / "per_query.parquet")
    else:
        table = pq.read_table(target)
        index = table.schema.get_field_index("winner")
        pq.write_table(table.set_column(index, "winner", pa.array(range(table.num_rows))), target)
    result = CliRunner().invoke(app, ["evaluate", "compare", str(XCM), str(folder)])
    assert result.exit_code != 0 and "Traceback" not in result.output
    (line,) = [line for line in result.output.splitlines() if "per_query.parquet" in line]
    assert ("not a regular file" if plant == "link" else "column 'winner' must be string") in line, line


def test_a_result_without_its_per_query_table_is_paired_with_none(tmp_path: Path) -> None:
    folder = tmp_path / "result"
    shutil.copytree(XCM, folder)
    (folder / "per_query.parquet").unlink()
    results = read_results([XCM, folder, XCM])
    (triplet,) = [t for t in tables(results) if t.key == "triplet"]
    assert [(t.a, t.b) for t in triplet.tests] == [(0, 2)]
