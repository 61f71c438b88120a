"""MixCuBe's card sections after the headline: accuracy per ethnicity and the drop from the original to each swap
(Fig. 3, 4), from the metrics and tables the questions task wrote."""

from __future__ import annotations

from data.publish.card import markdown_table
from evaluation.results.folder import EvaluationResult, fmt


def detail_sections(result: EvaluationResult) -> list[str]:
    """The paper-shaped tables of a MixCuBe questions result."""
    metrics = result.metrics
    out = []
    by_ethnicity = metrics.get("accuracy_by_ethnicity") or {}
    if by_ethnicity:
        out += ["## Country Identification accuracy per ethnicity\n"]
        out.append(markdown_table([{"ethnicity": fmt(k), "accuracy": fmt(v)} for k, v in by_ethnicity.items()]))
    drops = result.tables.get("swap_drops")
    if drops is not None and drops.num_rows:
        keep = ["country", "category", "ethnicity", "original_accuracy", "swap_accuracy", "drop"]
        rows = [{k: fmt(row[k]) for k in keep} for row in drops.select(keep).to_pylist()]
        out += ["## Drop from the original to each swap (Fig. 4)\n", markdown_table(rows)]
    return out
