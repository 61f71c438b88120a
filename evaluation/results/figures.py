"""Models compared on their headline figures (`evaluate compare`'s comparison.png, and the leaderboard page's plot):
one small panel per figure, one row per model, a dot at its value and a bar across its 95% interval. Rows are read
across panels by their short names on the left; the height grows with the models, so the figure stays legible with 2
models or 20. Headless and byte-stable for a given input through `data.figures`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt  # data.figures, imported here too, makes it draw with Agg
import numpy as np

from data.figures import figure_png

#: (value, interval low, interval high); None where undefined.
Point = tuple[float | None, float | None, float | None]
#: Panels per row of the figure.
COLUMNS = 4
ROW_INCHES = 0.32  # per model
PANEL_INCHES = 3.1


def compare_png(models: Sequence[str], metrics: Mapping[str, Sequence[Point]], title: str) -> bytes:
    """One panel per metric (in the order given), `models` (short names) top to bottom in the order given; a model
    without a value is left out of that panel, one without an interval drawn as a dot alone."""
    names = list(metrics)
    columns = max(1, min(COLUMNS, len(names)))
    rows = max(1, math.ceil(len(names) / columns))
    panel_height = 0.9 + ROW_INCHES * max(2, len(models))
    label_inches = 0.09 * max((len(m) for m in models), default=8) + 0.3
    figure, axes_grid = plt.subplots(
        rows,
        columns,
        figsize=(label_inches + PANEL_INCHES * columns, 0.5 + panel_height * rows),
        sharey=True,
        squeeze=False,
    )
    y = np.arange(len(models))[::-1]  # the first model on top
    for index, axes in enumerate(axes_grid.flat):
        if index >= len(names):
            axes.set_visible(False)
            continue
        name = names[index]
        for row, (value, low, high) in zip(y, metrics[name], strict=True):
            if value is None:
                continue
            if low is not None and high is not None:
                axes.hlines(row, low, high, color="#4a78b5", linewidth=2.2, alpha=0.55)
            axes.plot([value], [row], "o", color="#1f4e8c", markersize=5)
        axes.set_title(name, fontsize=9)
        axes.grid(axis="x", color="#dddddd", linewidth=0.6)
        axes.tick_params(axis="x", labelsize=7)
        axes.set_yticks(y, list(models), fontsize=8)
        axes.set_ylim(-0.7, len(models) - 0.3)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    return figure_png(figure)
