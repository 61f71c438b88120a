"""MixCuBe on the leaderboard: its tables in page order (the questions' headline, originals against swaps, accuracy
and drop per ethnicity and per country, per category, marker accuracy per ethnicity, the bias audit's headline) and
how a result's breakdowns are read (`LEADERBOARD`, named by the registry). The drop per country needs each
country's originals apart, which metrics.json does not hold: it is counted from `accuracy.parquet` (country x
category x ethnicity), the original label being the one ethnicity `swap_drops.parquet` lists no swap of."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import Field

from evaluation.leaderboard.spec import (
    Breakdowns,
    Cell,
    LeaderboardSpec,
    Strict,
    TableSpec,
    difference,
    read_table,
    sections,
)
from evaluation.results.folder import MetricsReadError, tasks_of

ACCURACY_TABLE = "accuracy.parquet"
SWAP_DROPS_TABLE = "swap_drops.parquet"

TABLES = [
    TableSpec(
        "questions",
        "questions",
        "Country and Cultural Marker Identification (MixCuBe §3, App. B.2-B.3)",
        "accuracy: App. A.5's answer rule over every image; marker_accuracy: the judge's verdicts on Food; "
        "accuracy_with_our_aliases: ours, with our aliases accepted too.",
        rank_by="accuracy",
        headline=True,
    ),
    TableSpec(
        "original_vs_synthesized",
        "questions",
        "Originals against their synthesized swaps (MixCuBe §3, Fig. 3)",
        "drop = accuracy on the originals - accuracy on the synthesized images (positive: the swap lost).",
    ),
    TableSpec("accuracy_by_ethnicity", "questions", "Accuracy per ethnicity (Fig. 3-4, App. D)", "Every country."),
    TableSpec(
        "drop_by_ethnicity",
        "questions",
        "Drop from the original to each swap ethnicity (Fig. 4's columns, every country pooled)",
        "Accuracy on the originals - accuracy on that ethnicity's swaps.",
    ),
    TableSpec(
        "accuracy_by_country",
        "questions",
        "Accuracy per country (§3: low- and high-resource cultures)",
        "Originals and swaps.",
    ),
    TableSpec(
        "drop_by_country",
        "questions",
        "Drop from the originals to the swaps per country (Fig. 3-4's rows)",
        f"Counted from each result's {ACCURACY_TABLE}: a country's originals - its synthesized images.",
    ),
    TableSpec("accuracy_by_category", "questions", "Accuracy per category", "Food, Festival, Clothes."),
    TableSpec(
        "marker_accuracy_by_ethnicity",
        "questions",
        "Cultural Marker Identification accuracy per ethnicity (Food; Fig. 5, Fig. 8a)",
        "The judge's verdicts (App. B.3).",
    ),
    TableSpec(
        "audit",
        "audit",
        "Multilingual CLIP bias audit (§3.5-3.6, App. A)",
        "MaxSkew per prompt set and the harm rates over the quintets.",
        headline=True,
    ),
]


class _MixCubeSections(Strict):
    accuracy_original: float | None = None
    accuracy_synthesized: float | None = None
    drop_original_minus_synthesized: float | None = None
    accuracy_by_ethnicity: dict[str, float | None] = Field(default_factory=dict)
    accuracy_by_country: dict[str, float | None] = Field(default_factory=dict)
    accuracy_by_category: dict[str, float | None] = Field(default_factory=dict)
    marker_accuracy_by_ethnicity: dict[str, float | None] = Field(default_factory=dict)


def _drop_by_country(folder: Path) -> tuple[str, dict[str, Cell]] | None:
    """(the original label, each country's originals' accuracy - its swaps'), pooled over categories as
    `drop_original_minus_synthesized` pools everything; None for a result without the two tables."""
    accuracy_path, drops_path = folder / ACCURACY_TABLE, folder / SWAP_DROPS_TABLE
    if not (os.path.lexists(accuracy_path) and os.path.lexists(drops_path)):
        return None
    counts = {"country": "string", "ethnicity": "string", "answered": "integer", "correct": "integer"}
    rows = read_table(accuracy_path, counts)
    swaps = {r["ethnicity"] for r in read_table(drops_path, {"ethnicity": "string"})}
    originals = sorted({r["ethnicity"] for r in rows} - swaps)
    if len(originals) != 1:
        raise MetricsReadError(
            f"{accuracy_path}: column 'ethnicity' must hold exactly one label that {drops_path.name} has no swap of "
            f"(the originals), not {originals[:5]}"
        )
    tallies: dict[str, list[int]] = {}  # country -> [original correct, answered, swap correct, answered]
    for r in rows:
        tally = tallies.setdefault(r["country"], [0, 0, 0, 0])
        at = 0 if r["ethnicity"] == originals[0] else 2
        tally[at] += r["correct"]
        tally[at + 1] += r["answered"]

    def rate(correct: int, answered: int) -> float | None:
        return correct / answered if answered else None

    drops = {country: Cell(difference(rate(*t[:2]), rate(*t[2:]))) for country, t in tallies.items()}
    return originals[0], drops


def _breakdowns(folder: Path, read: _MixCubeSections) -> dict[str, dict[str, Cell]]:
    out = {
        "original_vs_synthesized": {
            "original": Cell(read.accuracy_original),
            "synthesized": Cell(read.accuracy_synthesized),
            "drop": Cell(read.drop_original_minus_synthesized),
        },
        "accuracy_by_ethnicity": {k: Cell(v) for k, v in read.accuracy_by_ethnicity.items()},
        "accuracy_by_country": {k: Cell(v) for k, v in read.accuracy_by_country.items()},
        "accuracy_by_category": {k: Cell(v) for k, v in read.accuracy_by_category.items()},
        "marker_accuracy_by_ethnicity": {k: Cell(v) for k, v in read.marker_accuracy_by_ethnicity.items()},
    }
    counted = _drop_by_country(folder)
    if counted is not None:
        original, out["drop_by_country"] = counted
        base = read.accuracy_by_ethnicity.get(original)
        out["drop_by_ethnicity"] = {
            e: Cell(difference(base, v)) for e, v in read.accuracy_by_ethnicity.items() if e != original
        }
    return out


def read_breakdowns(folder: Path, path: Path, metrics: dict[str, Any]) -> Breakdowns:
    if "questions" not in tasks_of("mixcube", metrics):
        return {}
    return _breakdowns(folder, sections(path, _MixCubeSections, metrics))


LEADERBOARD = LeaderboardSpec(TABLES, read_breakdowns)
