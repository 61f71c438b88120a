"""The result folders' own figure: models compared on their headline figures (headless, byte-stable for a given
input through `data.figures`)."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt  # data.figures, imported here too, makes it draw with Agg
import numpy as np

from data.figures import figure_png


def compare_png(models: Sequence[str], metrics: dict[str, Sequence[float | None]], title: str) -> bytes:
    """Grouped bars: one group per metric, one bar per model (None drawn as a gap)."""
    names = list(metrics)
    width = 0.8 / max(1, len(models))
    figure, axes = plt.subplots(figsize=(max(5.0, 1.3 * len(names) + 2), 3.4))
    x = np.arange(len(names))
    for k, model in enumerate(models):
        values = [metrics[name][k] for name in names]
        heights = [v if v is not None else 0.0 for v in values]
        axes.bar(x + (k - (len(models) - 1) / 2) * width, heights, width, label=model)
    axes.set_xticks(x, names, fontsize=8)
    axes.legend(fontsize=7)
    axes.set_title(title, fontsize=10)
    return figure_png(figure)
