"""Evaluation figures (headless, byte-stable for a given input through `data.figures`): SP per language, the
stacked M_k bars of the 3XCM paper's Fig. 7, the Δsim table (Table 18's shape); the model comparison is
`evaluation.results.figures`'s."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt  # data.figures, imported here too, makes it draw with Agg
import numpy as np

from data.figures import figure_png
from evaluation.xcm.metrics import PAPER_SYMBOL, RQ2_CATEGORIES, RQ3_CATEGORIES, DriftMeans, WinRateReport

#: Fig. 7's colours where App. P names them (Blue = object-relevant, Purple = object-relevant language-biased,
#: Yellow = cultural-descriptor-relevant, Pink = language-biased); green for correct, grey for irrelevant.
CATEGORY_COLOURS = {
    "correct": "#55a868",
    "object_relevant_language_biased": "#8172b3",
    "object_relevant": "#4c72b0",
    "cultural_descriptor_relevant": "#e5c74a",
    "language_biased": "#e58fb6",
    "irrelevant": "#9a9a9a",
}


def _symbol(task: str, category: str) -> str:
    return f"M_{PAPER_SYMBOL[task][category]}"


def sp_per_language_png(report: WinRateReport) -> bytes:
    """SP (Eq. 4) per query language with its bootstrap interval; the overall SP as a dashed line."""
    scored = [(g.group, g.sp) for g in report.by_language if g.sp is not None and g.sp.value is not None]
    labels = [group for group, _ in scored]
    values = np.array([sp.value for _, sp in scored], dtype=np.float64)
    low = np.array([sp.value if sp.ci_low is None else sp.ci_low for _, sp in scored], dtype=np.float64)
    high = np.array([sp.value if sp.ci_high is None else sp.ci_high for _, sp in scored], dtype=np.float64)
    figure, axes = plt.subplots(figsize=(max(4.0, 0.6 * len(labels) + 2), 3.2))
    if scored:
        axes.bar(labels, values, color="#e58fb6", yerr=[values - low, high - values], capsize=3)
    overall = report.overall.sp
    if overall is not None and overall.value is not None:
        axes.axhline(overall.value, color="black", linestyle="--", linewidth=1, label=f"overall {overall.value:.2f}")
        axes.legend(fontsize=8)
    axes.set_ylabel("SP = M_lb / M_cr")
    axes.set_xlabel("query language")
    axes.set_title(f"Self-preference per query language ({int(report.confidence * 100)}% bootstrap CI)", fontsize=10)
    return figure_png(figure)


def stacked_win_rates_png(report: WinRateReport, title: str) -> bytes:
    """One horizontal bar per query language (and overall), split into the M_k shares, as Fig. 7 draws them."""
    categories = RQ2_CATEGORIES if report.task == "rq2" else RQ3_CATEGORIES
    groups = [report.overall, *report.by_language]
    labels = ["all" if g.group_by == "overall" else g.group for g in groups]
    figure, axes = plt.subplots(figsize=(7.5, max(2.0, 0.35 * len(groups) + 1.2)))
    left = np.zeros(len(groups))
    for category in categories:
        shares = np.array([g.rates[category].value or 0.0 for g in groups])
        axes.barh(labels, shares, left=left, color=CATEGORY_COLOURS[category], label=_symbol(report.task, category))
        for y, (start, share) in enumerate(zip(left, shares, strict=True)):
            if share >= 0.08:
                axes.text(start + share / 2, y, f"{share:.2f}", ha="center", va="center", fontsize=7)
        left += shares
    axes.set_xlim(0, 1)
    axes.invert_yaxis()
    axes.set_xlabel("share of queries won")
    axes.legend(ncol=len(categories), fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    axes.set_title(title, fontsize=10)
    return figure_png(figure)


def delta_sim_png(means: Sequence[DriftMeans]) -> bytes:
    """Mean Δsim (Eq. 5, x100 as Table 18 prints it) per query language (rows) and candidate category (columns)."""
    rows = [d for d in means if d.group_by in ("overall", "query_language")]
    labels = ["all" if d.group_by == "overall" else d.group for d in rows]
    matrix = np.array([[100 * d.mean_drift[c] for c in RQ3_CATEGORIES] for d in rows]) if rows else np.zeros((0, 6))
    limit = float(np.abs(matrix).max()) if matrix.size else 1.0
    figure, axes = plt.subplots(figsize=(8, max(2.0, 0.35 * len(rows) + 1.5)))
    image = axes.imshow(matrix, cmap="RdBu_r", vmin=-limit or -1, vmax=limit or 1, aspect="auto")
    axes.set_xticks(range(len(RQ3_CATEGORIES)), [_symbol("rq3", c) for c in RQ3_CATEGORIES], fontsize=8)
    axes.set_yticks(range(len(labels)), labels, fontsize=8)
    for (i, j), value in np.ndenumerate(matrix):
        axes.text(j, i, f"{value:+.2f}", ha="center", va="center", fontsize=7)
    axes.set_title("Δsim x100: S(q_C+CD, I) − S(q_C, I), mean per query language (Eq. 5)", fontsize=10)
    figure.colorbar(image, ax=axes, fraction=0.04)
    return figure_png(figure)
