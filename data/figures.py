"""Figures for cards and artifacts, rendered headless (Agg) and byte-stable for a given input."""

from __future__ import annotations

import io
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import numpy.typing as npt
from matplotlib.figure import Figure

# PNG metadata would otherwise carry the matplotlib version string; keep figures comparable across builds.
_PNG_METADATA = {"Software": None}


def figure_png(figure: Figure) -> bytes:
    """The figure as PNG bytes (closed afterwards), without the version metadata."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight", metadata=_PNG_METADATA)
    plt.close(figure)
    return buffer.getvalue()


def heatmap_png(matrix: npt.NDArray[Any], row_labels: list[str], col_labels: list[str], title: str) -> bytes:
    """A count heatmap with the number in each cell (for example images per concept x country)."""
    height = max(2.5, 0.28 * len(row_labels) + 1.5)
    width = max(4.0, 0.5 * len(col_labels) + 2.5)
    figure, axes = plt.subplots(figsize=(width, height))
    image = axes.imshow(matrix, cmap="viridis", aspect="auto")
    axes.set_xticks(range(len(col_labels)), col_labels, rotation=60, ha="right", fontsize=8)
    axes.set_yticks(range(len(row_labels)), row_labels, fontsize=8)
    if matrix.size and matrix.size <= 400:
        threshold = matrix.max() / 2 if matrix.max() else 0
        for (i, j), value in np.ndenumerate(matrix):
            axes.text(
                j,
                i,
                str(int(value)),
                ha="center",
                va="center",
                fontsize=7,
                color="black" if value > threshold else "white",
            )
    axes.set_title(title, fontsize=10)
    figure.colorbar(image, ax=axes, fraction=0.04)
    return figure_png(figure)


def bars_png(counts: dict[str, int], title: str) -> bytes:
    """Horizontal bars, for example drop reasons of a stage."""
    labels = list(counts) or ["(none)"]
    values = [counts[k] for k in counts] or [0]
    figure, axes = plt.subplots(figsize=(6, max(1.8, 0.35 * len(labels) + 1)))
    axes.barh(labels, values, color="#4c72b0")
    for y, value in enumerate(values):
        axes.text(value, y, f" {value}", va="center", fontsize=8)
    axes.invert_yaxis()
    axes.set_title(title, fontsize=10)
    return figure_png(figure)
