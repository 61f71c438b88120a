"""The count heatmap (a 3XCM release's images per concept and country): a large one is drawn as a mesh of quads, not
an image resampled to every pixel of the figure (issue 43: 1.8 GB at a thousand concepts), and shows the same."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

import data.figures as figures


def _pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.int16)


@pytest.mark.parametrize("seed", [0, 1])
def test_a_mesh_heatmap_shows_what_the_image_heatmap_shows(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(seed)
    matrix = rng.integers(0, 9, size=(int(rng.integers(25, 40)), int(rng.integers(15, 21))))  # text only to 400 cells
    matrix[0, 0], matrix[-1, -1] = 0, 40  # the scale's two ends, in the corners an upside-down draw would swap
    rows = [f"concept {k}" for k in range(matrix.shape[0])]
    cols = [f"country {k}" for k in range(matrix.shape[1])]
    as_image = _pixels(figures.heatmap_png(matrix, rows, cols, "counts"))
    monkeypatch.setattr(figures, "MESH_FROM_CELLS", 0)
    as_mesh = _pixels(figures.heatmap_png(matrix, rows, cols, "counts"))
    assert as_image.shape == as_mesh.shape
    differs = np.abs(as_image - as_mesh).max(axis=2) > 24
    assert differs.mean() < 0.001, f"{differs.mean():.2%} of the pixels differ"
    flipped = _pixels(figures.heatmap_png(matrix[::-1], rows, cols, "counts"))
    assert (np.abs(flipped - as_mesh).max(axis=2) > 24).mean() > 0.1  # and the comparison sees a wrong drawing
