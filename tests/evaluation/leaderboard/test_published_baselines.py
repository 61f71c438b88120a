"""The published baselines (evaluation/leaderboard/published_baselines.py) checked against what the papers say of
them elsewhere:
3XCM's rates sum to 100% and its SP is M_lb / M_cr (Eq. 4); MixCuBe's "Average (Synthesized)" lines are the means of
the cells above them, and §3's sentences (7.64% mean drop, 2.04% for the look-alike swaps, up to 58%) hold on the
cells. A mistyped number breaks one of them. The labels are the shipped reference pack's."""

from __future__ import annotations

import json
from statistics import fmean

import pytest

from evaluation.leaderboard.published_baselines import (
    MIXCUBE_CATEGORIES,
    MIXCUBE_COUNTRY,
    MIXCUBE_ETHNICITY,
    MIXCUBE_MODELS,
    XCM_MODELS,
    country_identification,
    marker_identification,
    mixcube_rows,
    xcm_rows,
)
from tests.support.paths import REPO_ROOT

PACK = json.loads((REPO_ROOT / "data" / "reference" / "mixcube.json").read_text())


def test_3xcm_rates_sum_to_one_and_sp_is_lb_over_cr() -> None:
    rows = xcm_rows()
    table2 = [r for r in rows if r.table == "triplet"]
    table3 = [r for r in rows if r.table == "rq3"]
    assert [r.model for r in table2] == [r.model for r in table3] == list(XCM_MODELS)
    for row in table2:
        assert row.values["M_cr"] + row.values["M_lb"] + row.values["M_ti"] == pytest.approx(1, abs=2e-4)
        assert row.values["SP"] == pytest.approx(row.values["M_lb"] / row.values["M_cr"], abs=0.005)  # 2 places
    for row in table3:
        assert sum(row.values.values()) == pytest.approx(1, abs=2e-4)
        assert len(row.values) == 6


def test_mixcube_cells_agree_with_the_papers_averages_and_its_sentences() -> None:
    for cells, averages in (country_identification(), marker_identification()):
        assert len(averages) * 5 == len(cells)
        for (model, country, _, category), average in averages.items():
            synthesized = [
                v for (m, c, e, k), v in cells.items() if (m, c, k) == (model, country, category) and e != "Original"
            ]
            assert len(synthesized) == 4
            # cells and averages are each rounded to 2 places, and the averages are of the unrounded counts
            assert fmean(synthesized) == pytest.approx(average, abs=0.0101)
    cells, _ = country_identification()
    assert len(cells) == len(MIXCUBE_MODELS) * len(MIXCUBE_COUNTRY) * len(MIXCUBE_ETHNICITY) * len(MIXCUBE_CATEGORIES)

    def drop(model: str, country: str, ethnicity: str, category: str) -> float:
        return cells[(model, country, "Original", category)] - cells[(model, country, ethnicity, category)]

    # §3: "higher than those of synthesized ones ... by an average of 7.64% across all models"
    by_model = [
        fmean(v for k, v in cells.items() if k[0] == m and k[2] == "Original")
        - fmean(v for k, v in cells.items() if k[0] == m and k[2] != "Original")
        for m in MIXCUBE_MODELS
    ]
    assert fmean(by_model) == pytest.approx(0.0764, abs=0.0005)
    # §3: the look-alike swaps (Fig. 4's red boxes: Korea and Myanmar East Asian, UK Caucasian) drop "just 2.04%"
    look_alike = [("Korea", "East Asian"), ("Myanmar", "East Asian"), ("UK", "Caucasian")]
    drops = [drop(m, c, e, k) for m in MIXCUBE_MODELS for c, e in look_alike for k in MIXCUBE_CATEGORIES]
    assert fmean(drops) == pytest.approx(0.0204, abs=0.0005)
    # Abstract: GPT-4o "shows up to 58% difference"
    gpt = [drop("GPT-4o", c, e, k) for (m, c, e, k) in cells if m == "GPT-4o" and e != "Original"]
    assert max(gpt) == pytest.approx(0.58, abs=1e-9)
    # the leaderboard's rows are these cells' means
    (row,) = [r for r in mixcube_rows() if r.model == "GPT-4o" and r.table == "original_vs_synthesized"]
    assert row.values["drop"] == pytest.approx(by_model[0])
    assert row.derived and "App. D" in row.source


def test_mixcube_labels_are_the_reference_packs() -> None:
    assert sorted(MIXCUBE_COUNTRY.values()) == sorted(c["adjective"] for c in PACK["cultures"])
    swaps = {e["label"] for e in PACK["ethnicities"]}
    assert set(MIXCUBE_ETHNICITY.values()) == swaps | {PACK["original_label"]}
    assert set(MIXCUBE_CATEGORIES) == set(PACK["categories"])
    for row in mixcube_rows():
        if row.table in ("accuracy_by_country", "drop_by_country"):
            assert set(row.values) == set(MIXCUBE_COUNTRY.values())
