"""Vectors as every task scores them (`Vectors`: by key, unit rows, torch's cosine eps), the winner rule and its
ties, and what makes a vector scorable by cosine, shared by the embeddings backend (which refuses a file holding such
vectors) and the evaluations (which refuse a model's): numpy only, so reading a config imports nothing heavy."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

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


#: Scores closer than this are a tie: a cosine of float32 unit vectors carries a rounding error of a few float32
#: ulps at 1.0 (2**-23 = 1.2e-7) from the vectors and their dot product; 1e-6 is about 8 of them, far below the
#: score gaps a model's ranking rests on.
TIE_TOLERANCE = 1e-6


@dataclass(frozen=True)
class Vectors:
    """Vectors by key (an image id, or a query text), each row divided by its norm clamped at `COSINE_EPS`, so a
    row-wise dot product is torch's cosine similarity with that eps."""

    keys: tuple[str, ...]
    matrix: NDArray[np.float64]  # float64, (len(keys), dim), unit rows (or zero rows for zero vectors)
    _position: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_position", {key: i for i, key in enumerate(self.keys)})
        if len(self._position) != len(self.keys):
            raise ValueError("duplicate keys")

    @classmethod
    def from_arrays(cls, keys: Sequence[str], matrix: ArrayLike) -> Vectors:
        m = np.asarray(matrix, dtype=np.float64)
        if m.ndim != 2 or m.shape[0] != len(keys):
            raise ValueError(f"need one row per key: {len(keys)} keys, matrix of shape {m.shape}")
        if not np.isfinite(m).all():
            raise ValueError("embeddings hold a non-finite value")
        norms = np.maximum(np.linalg.norm(m, axis=1, keepdims=True), COSINE_EPS)
        return cls(tuple(keys), m / norms)

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, ArrayLike]) -> Vectors:
        """Vectors of shape (dim,) or (1, dim), as the authors store theirs."""
        keys = list(mapping)
        rows = [np.asarray(mapping[k], dtype=np.float64).reshape(-1) for k in keys]
        dims = {r.shape[0] for r in rows}
        if len(dims) > 1:
            raise ValueError(f"vectors of different sizes: {sorted(dims)}")
        return cls.from_arrays(keys, np.stack(rows) if rows else np.zeros((0, 0)))

    def take(self, keys: Sequence[str], what: str) -> NDArray[np.float64]:
        missing = [k for k in dict.fromkeys(keys) if k not in self._position]
        if missing:
            raise KeyError(f"no {what} vector for {len(missing)} key(s), e.g. {missing[:3]}")
        rows = np.fromiter((self._position[k] for k in keys), dtype=np.int64, count=len(keys))
        return self.matrix[rows]


VectorsLike = Vectors | Mapping[str, ArrayLike]


def as_vectors(vectors: VectorsLike) -> Vectors:
    return vectors if isinstance(vectors, Vectors) else Vectors.from_mapping(vectors)


def first_argmax(scores: NDArray[np.float64]) -> NDArray[np.intp]:
    """Per row, the position of the first maximal score (np.argmax's and torch.argmax's tie rule): one winner per
    row, an exact tie going to the earlier candidate. For 3XCM's Eq. 3 this is the authors' code's reading
    (`SelfPreferenceBiasEvaluator.evaluate_test_case`, `torch.argmax`, and numpy `argmax` in
    `summarize_scores_with_metadata`), which we follow; the paper's formula, read literally (1[S_k,i = max]),
    would credit every tied candidate (`evaluation/xcm/metrics.py` says more)."""
    if not np.isfinite(scores).all():
        raise ValueError("non-finite scores")
    first: NDArray[np.intp] = np.argmax(scores, axis=1)
    return first


def tied_winners(scores: ArrayLike, tolerance: float = TIE_TOLERANCE) -> NDArray[np.bool_]:
    """Per row, whether another candidate scores within `tolerance` of the maximum: the first-maximum rule, not the
    model, chose that row's winner."""
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 2 or s.shape[1] < 2:
        return np.zeros(s.shape[0] if s.ndim else 0, dtype=bool)
    tied: NDArray[np.bool_] = ((s.max(axis=1, keepdims=True) - s) <= tolerance).sum(axis=1) > 1
    return tied
