"""The intervals every task shares. The bootstrap's pieces (3XCM's win rates and retrieval, the bias audit): a
group's own generator, so a group's interval does not depend on the other groups a table has, and the percentile
interval of a resample's draws. A proportion's (MixCuBe's accuracies): Wilson's score interval, and Newcombe's for a
difference of two proportions built from the two Wilson intervals."""

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


def wilson_interval(successes: int, trials: int) -> list[float | None]:
    """The 95% Wilson score interval of a proportion (better than the normal one near 0 and 1)."""
    if trials == 0:
        return [None, None]
    from scipy.stats import binomtest

    interval = binomtest(successes, trials).proportion_ci(confidence_level=0.95, method="wilson")
    return [float(interval.low), float(interval.high)]


def newcombe_interval(first: tuple[int, int], second: tuple[int, int]) -> list[float | None]:
    """The 95% interval of p1 - p2 for two proportions (successes, trials), by Newcombe's hybrid score method
    (Newcombe 1998, method 10; statsmodels' `confint_proportions_2indep(method="newcomb")`): each end from the two
    Wilson intervals. It treats the two as independent samples."""
    (s1, n1), (s2, n2) = first, second
    if n1 == 0 or n2 == 0:
        return [None, None]
    p1, p2 = s1 / n1, s2 / n2
    low1, high1 = wilson_interval(s1, n1)
    low2, high2 = wilson_interval(s2, n2)
    assert low1 is not None and high1 is not None and low2 is not None and high2 is not None
    difference = p1 - p2
    low = difference - float(np.sqrt((p1 - low1) ** 2 + (high2 - p2) ** 2))
    high = difference + float(np.sqrt((high1 - p1) ** 2 + (p2 - low2) ** 2))
    return [low, high]
