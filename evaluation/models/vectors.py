"""What makes a vector scorable by cosine, shared by the embeddings backend (which refuses a file holding such
vectors) and the evaluation (which refuses a model's): numpy only, so reading a config imports nothing heavy."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

#: torch.nn.CosineSimilarity's eps in the authors' evaluator: each norm is clamped at it.
COSINE_EPS = 1e-6


def degenerate_rows(matrix: ArrayLike) -> tuple[NDArray[np.integer], NDArray[np.integer]]:
    """(rows holding a NaN or an infinity, finite rows of zero norm): vectors no cosine can be taken of. A norm
    at or below `COSINE_EPS` counts as zero (the cosine clamps it there, so the scores would be shrunk to ~0)."""
    m = np.asarray(matrix, dtype=np.float64)
    if m.ndim != 2 or m.shape[0] == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    finite = np.asarray(np.isfinite(m).all(axis=1))  # (an array already: asarray tells the type checker so)
    norms = np.linalg.norm(np.where(finite[:, None], m, 0.0), axis=1)
    return np.flatnonzero(~finite), np.flatnonzero(finite & (norms <= COSINE_EPS))


def refuse_degenerate(stage: str, model_id: str, keys: list[str], matrix: ArrayLike, what: str) -> None:
    """A vector with a NaN or an infinity, or of zero norm, has no direction to compare: refused, naming the model
    and how many, rather than scored (zero vectors tie everywhere and would publish M_cr = 1, SP = 0). A matrix of
    the wrong shape is left to its reader, which names it."""
    array = np.asarray(matrix)
    if array.ndim != 2 or array.shape[0] != len(keys):
        return
    nonfinite, zero = degenerate_rows(array)
    for rows, problem in ((nonfinite, "holding NaN or infinite values"), (zero, "of zero norm")):
        if len(rows):
            raise ValueError(
                f"{stage}: model {model_id} returned {len(rows)} {what} vector(s) {problem} (of {len(keys)}, "
                f"e.g. {what} {keys[int(rows[0])]!r}): such a vector has no direction and no cosine; check the model "
                "and its inputs"
            )
