"""The bootstrap's shared pieces, used by every task's intervals (3XCM's win rates and retrieval, the bias audit):
a group's own generator, so a group's interval does not depend on the other groups a table has, and the percentile
interval of a resample's draws."""

from __future__ import annotations

import zlib

import numpy as np
from numpy.typing import NDArray


def group_rng(seed: int, task: str, group_by: str, group: str) -> np.random.Generator:
    """A group's own generator: its intervals do not depend on which other groups a table has."""
    return np.random.default_rng([seed, zlib.crc32(f"{task}\0{group_by}\0{group}".encode())])


def percentile_interval(samples: NDArray[np.float64], confidence: float) -> tuple[float | None, float | None]:
    alpha = 1.0 - confidence
    with np.errstate(invalid="ignore"):
        low, high = np.quantile(samples, [alpha / 2, 1 - alpha / 2])
    return (float(low) if np.isfinite(low) else None, float(high) if np.isfinite(high) else None)
