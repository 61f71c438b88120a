"""What makes a vector scorable by cosine, shared by the embeddings backend (which refuses a file holding such
vectors) and the evaluation (which refuses a model's): numpy only, so reading a config imports nothing heavy."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

#: torch.nn.CosineSimilarity's eps in the authors' evaluator: each norm is clamped at it.
COSINE_EPS = 1e-6


def degenerate_rows(matrix: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """(rows holding a NaN or an infinity, finite rows of zero norm): vectors no cosine can be taken of. A norm
    at or below `COSINE_EPS` counts as zero (the cosine clamps it there, so the scores would be shrunk to ~0)."""
    m = np.asarray(matrix, dtype=np.float64)
    if m.ndim != 2 or m.shape[0] == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    finite = np.asarray(np.isfinite(m).all(axis=1))  # (an array already: asarray tells the type checker so)
    norms = np.linalg.norm(np.where(finite[:, None], m, 0.0), axis=1)
    return np.flatnonzero(~finite), np.flatnonzero(finite & (norms <= COSINE_EPS))
