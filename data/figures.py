"""Figures for cards and artifacts, rendered headless (Agg) and byte-stable for a given input."""

from __future__ import annotations

import io
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import numpy.typing as npt
from matplotlib.cm import ScalarMappable
from matplotlib.figure import Figure

# Above this many cells a heatmap is drawn as a mesh, not an image (the paper's 139 concepts x 16 countries are 2,224).
MESH_FROM_CELLS = 50_000

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
    image: ScalarMappable
    if matrix.size <= MESH_FROM_CELLS:
        image = axes.imshow(matrix, cmap="viridis", aspect="auto")
    else:
        # The same cells as quads: imshow resamples its cells to every pixel of a figure this tall in float arrays
        # (1.8 GB for a thousand concepts by 59 countries, against none for the quads).
        rows, cols = matrix.shape
        image = axes.pcolormesh(
            np.arange(cols + 1) - 0.5, np.arange(rows + 1) - 0.5, matrix, cmap="viridis", antialiased=False
        )
        axes.set_xlim(-0.5, cols - 0.5)
        axes.set_ylim(rows - 0.5, -0.5)  # the first row on top, as an image's
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
