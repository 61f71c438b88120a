"""3XCM's card sections after the headline: M_k per query language (Tables 2, 3), App. P.2's chi-squared tests
(Tables 15-17) and Δsim (Table 18), from the metrics the triplet task wrote."""

from __future__ import annotations

from typing import Any

from data.publish.card import markdown_table
from evaluation.results.folder import EvaluationResult, fmt
from evaluation.xcm.metrics import PAPER_SYMBOL


def _rates_by_language(report: dict[str, Any], symbols: dict[str, str], sp: bool) -> list[dict[str, Any]]:
    rows = []
    for group in [report["overall"], *report["by_language"]]:
        row: dict[str, Any] = {"query language": fmt(group["group"]), "n": fmt(group["n"])}
        row.update({f"M_{symbols[c]}": fmt(e["value"]) for c, e in group["rates"].items()})
        if sp:
            row["SP"] = fmt((group.get("sp") or {}).get("value"))
        rows.append(row)
    return rows


def detail_sections(result: EvaluationResult) -> list[str]:
    """The paper-shaped tables of a 3XCM result whose triplet task ran."""
    metrics = result.metrics
    out = [
        "## RQ2 per query language\n",
        markdown_table(_rates_by_language(metrics["rq2"], PAPER_SYMBOL["rq2"], True)),
    ]
    if "rq3" in metrics:
        out += [
            "## RQ3 per query language\n",
            markdown_table(_rates_by_language(metrics["rq3"], PAPER_SYMBOL["rq3"], False)),
        ]
    tests = [t for t in metrics.get("preference_tests", []) if t["group_by"] in ("overall", "query_language")]
    if tests:
        rows = [
            {
                "test": fmt(t["test"]),
                "group": fmt(t["group"]),
                "A vs B": fmt(f"{t['category_a']} vs {t['category_b']}"),
                "diff": fmt(t["diff"]),
                "chi2": fmt(t["statistic"]),
                "p": "–" if t["p_value"] is None else f"{t['p_value']:.3g}",
            }
            for t in tests
        ]
        out += ["## App. P.2 chi-squared tests\n", markdown_table(rows)]
    drift = [d for d in metrics.get("delta_sim", []) if d["group_by"] in ("overall", "query_language")]
    if drift:
        rows = [
            {
                "query language": fmt(d["group"]),
                **{f"M_{PAPER_SYMBOL['rq3'][c]}": f"{100 * v:+.2f}" for c, v in d["mean_drift"].items()},
            }
            for d in drift
        ]
        out += ["## Δsim x100 per candidate category (Eq. 5)\n", markdown_table(rows)]
    return out
