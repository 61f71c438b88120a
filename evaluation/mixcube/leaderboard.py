"""MixCuBe on the leaderboard: its tables in page order (the questions' headline, originals against swaps, accuracy
and drop per ethnicity and per country, per category, marker accuracy per ethnicity, the bias audit's headline) and
how a result's breakdowns are read (`LEADERBOARD`, named by the registry). The drop per country needs each
country's originals apart, which metrics.json does not hold: it is counted from `accuracy.parquet` (country x
category x ethnicity), the original label being the one ethnicity `swap_drops.parquet` lists no swap of."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from evaluation.intervals import newcombe_interval, wilson_interval
from evaluation.leaderboard.spec import (
    Breakdowns,
    Cell,
    LeaderboardSpec,
    Outcomes,
    Strict,
    TableSpec,
    difference,
    read_table,
    sections,
)
from evaluation.results.folder import PER_QUERY, MetricsReadError, tasks_of

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


Tally = tuple[int, int]  # (correct, answered)


def _add(tallies: dict[str, list[int]], key: str, correct: int, answered: int) -> None:
    tally = tallies.setdefault(key, [0, 0])
    tally[0] += correct
    tally[1] += answered


@dataclass
class _Counts:
    """accuracy.parquet's cells (country x category x ethnicity) summed per breakdown group: what each interval is
    over, as the headline's Wilson interval is over `correct` of `answered`."""

    original: str
    by: dict[str, dict[str, list[int]]]  # breakdown -> group -> [correct, answered]

    def tally(self, breakdown: str, group: str) -> Tally | None:
        found = self.by.get(breakdown, {}).get(group)
        return None if found is None else (found[0], found[1])


def _counts(folder: Path) -> _Counts | None:
    """The counts behind every breakdown, from `accuracy.parquet`; the original label is the one ethnicity
    `swap_drops.parquet` lists no swap of. None for a result without the two tables."""
    accuracy_path, drops_path = folder / ACCURACY_TABLE, folder / SWAP_DROPS_TABLE
    if not (os.path.lexists(accuracy_path) and os.path.lexists(drops_path)):
        return None
    columns = {"country": "string", "category": "string", "ethnicity": "string", "answered": "integer"}
    # the judge's counts are null outside Food (no marker question there)
    columns |= {"correct": "integer", "marker_answered": "integer?", "marker_correct": "integer?"}
    rows = read_table(accuracy_path, columns)
    swaps = {r["ethnicity"] for r in read_table(drops_path, {"ethnicity": "string"})}
    originals = sorted({r["ethnicity"] for r in rows} - swaps)
    if len(originals) != 1:
        raise MetricsReadError(
            f"{accuracy_path}: column 'ethnicity' must hold exactly one label that {drops_path.name} has no swap of "
            f"(the originals), not {originals[:5]}"
        )
    by: dict[str, dict[str, list[int]]] = {}
    for r in rows:
        original = r["ethnicity"] == originals[0]
        tallies = [
            ("ethnicity", r["ethnicity"]),
            ("country", r["country"]),
            ("category", r["category"]),
            ("kind", "original" if original else "synthesized"),
            ("country_original" if original else "country_swaps", r["country"]),
        ]
        for breakdown, group in tallies:
            _add(by.setdefault(breakdown, {}), group, r["correct"], r["answered"])
        if r["marker_answered"] is not None:
            _add(by.setdefault("marker", {}), r["ethnicity"], r["marker_correct"] or 0, r["marker_answered"])
    return _Counts(originals[0], by)


def _share(value: float | None, tally: Tally | None) -> Cell:
    """A breakdown's accuracy with its Wilson interval (the headline's method), over the counts behind it."""
    if tally is None:
        return Cell(value)
    low, high = wilson_interval(*tally)
    return Cell(value, low, high)


def _drop(value: float | None, first: Tally | None, second: Tally | None) -> Cell:
    """A drop (originals - swaps) with Newcombe's interval from the two Wilson intervals. Ours: it treats the
    originals and their swaps as independent samples, though each swap is made from an original (MixCuBe §3 reports
    the drops without an interval)."""
    if first is None or second is None:
        return Cell(value)
    low, high = newcombe_interval(first, second)
    return Cell(value, low, high)


def _rate(tally: Tally | None) -> float | None:
    return None if tally is None or tally[1] == 0 else tally[0] / tally[1]


def _breakdowns(folder: Path, read: _MixCubeSections) -> dict[str, dict[str, Cell]]:
    counts = _counts(folder)

    def tally(breakdown: str, group: str) -> Tally | None:
        return None if counts is None else counts.tally(breakdown, group)

    def shares(values: dict[str, float | None], breakdown: str) -> dict[str, Cell]:
        return {k: _share(v, tally(breakdown, k)) for k, v in values.items()}

    out = {
        "original_vs_synthesized": {
            "original": _share(read.accuracy_original, tally("kind", "original")),
            "synthesized": _share(read.accuracy_synthesized, tally("kind", "synthesized")),
            "drop": _drop(
                read.drop_original_minus_synthesized, tally("kind", "original"), tally("kind", "synthesized")
            ),
        },
        "accuracy_by_ethnicity": shares(read.accuracy_by_ethnicity, "ethnicity"),
        "accuracy_by_country": shares(read.accuracy_by_country, "country"),
        "accuracy_by_category": shares(read.accuracy_by_category, "category"),
        "marker_accuracy_by_ethnicity": shares(read.marker_accuracy_by_ethnicity, "marker"),
    }
    if counts is not None:
        # pooled over categories as `drop_original_minus_synthesized` pools everything
        out["drop_by_country"] = {
            country: _drop(
                difference(_rate(tally("country_original", country)), _rate(tally("country_swaps", country))),
                tally("country_original", country),
                tally("country_swaps", country),
            )
            for country in counts.by.get("country", {})
        }
        base = read.accuracy_by_ethnicity.get(counts.original)
        out["drop_by_ethnicity"] = {
            e: _drop(difference(base, v), tally("ethnicity", counts.original), tally("ethnicity", e))
            for e, v in read.accuracy_by_ethnicity.items()
            if e != counts.original
        }
    return out


def read_breakdowns(folder: Path, path: Path, metrics: dict[str, Any]) -> Breakdowns:
    if "questions" not in tasks_of("mixcube", metrics):
        return {}
    return _breakdowns(folder, sections(path, _MixCubeSections, metrics))


def read_outcomes(folder: Path) -> Outcomes | None:
    """Per image (by sample_id): whether the answer names the culture (App. A.5's rule), the image's share of
    `accuracy`; an image without a scored answer (a failure) has none, as `accuracy` leaves it out."""
    if not os.path.lexists(folder / PER_QUERY):
        return None  # a result without its per-query table: nothing to pair (a link is refused by read_table)
    columns = {"sample_id": "string", "correct": "boolean?", "error": "string?"}
    rows = read_table(folder / PER_QUERY, columns)
    return {r["sample_id"]: bool(r["correct"]) for r in rows if r["error"] is None and r["correct"] is not None}


def intervals(metrics: dict[str, Any]) -> str:
    """The headline's interval, which every breakdown follows (MixCuBe §3 reports points only; the intervals are
    ours)."""
    return (
        "95% Wilson score intervals over the answered images (the headline's); a drop's, Newcombe's hybrid score "
        "interval of the two (ours: originals and swaps read as independent)"
    )


LEADERBOARD = LeaderboardSpec(TABLES, read_breakdowns, {"questions": read_outcomes}, intervals)
