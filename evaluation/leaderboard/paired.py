"""Paired tests between the models of one release: whether two models' main figures (3XCM's M_cr, MixCuBe's
accuracy) differ by more than chance, on the very queries both answered.

Both figures are shares of queries with a binary outcome (the correct image wins the triplet; the answer names the
culture), so the test is McNemar's on per-query correctness (McNemar 1947): only the discordant queries count, and
the exact two-sided binomial test of `b` (A right, B wrong) among `b + c` at p = 1/2 gives its p-value (the exact
form, as statsmodels' `mcnemar(exact=True)` computes it; the tests cross-check it). The pairs' p-values are
adjusted together with Holm's step-down correction (Holm 1979), per table, so that "distinguishable" holds at
`ALPHA` family-wise for every pair a page shows. Queries are aligned by key (the benchmark row's index; the
image's sample_id); a query one model has no outcome for (a failed answer) is left out of that pair."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scipy.stats import binomtest

from evaluation.leaderboard.spec import Outcomes

ALPHA = 0.05
TEST = "McNemar's exact test on per-query correctness (two-sided binomial on the discordant queries)"
CORRECTION = "Holm"


@dataclass(frozen=True)
class PairedTest:
    a: int  # the results compared, by position
    b: int
    queries: int  # queries both have an outcome for
    a_only: int  # right for a, wrong for b
    b_only: int
    p_value: float
    p_holm: float = 1.0

    @property
    def distinguishable(self) -> bool:
        return self.p_holm < ALPHA


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """The exact two-sided McNemar p-value of a pair's discordant counts (1 when there are none)."""
    discordant = a_only + b_only
    return 1.0 if discordant == 0 else float(binomtest(a_only, discordant, 0.5).pvalue)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given: the k-th smallest times (m - k + 1), never below
    the one before it, at most 1. Written here because scipy has no Holm and statsmodels, whose `multipletests` the
    tests check this against, is only in the annotation extra."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [1.0] * len(p_values)
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


def pair(a: int, b: int, first: Outcomes, second: Outcomes) -> PairedTest:
    shared = first.keys() & second.keys()
    a_only = sum(1 for key in shared if first[key] and not second[key])
    b_only = sum(1 for key in shared if second[key] and not first[key])
    return PairedTest(a, b, len(shared), a_only, b_only, mcnemar_exact(a_only, b_only))


def paired_tests(groups: Sequence[Sequence[tuple[int, Outcomes]]]) -> list[PairedTest]:
    """Every pair within each group of results (position, outcomes; a group: the results of one release), in order,
    their p-values Holm-adjusted together."""
    tests = [
        pair(a, b, first, second)
        for outcomes in groups
        for i, (a, first) in enumerate(outcomes)
        for b, second in outcomes[i + 1 :]
    ]
    adjusted = holm([t.p_value for t in tests])
    return [
        PairedTest(t.a, t.b, t.queries, t.a_only, t.b_only, t.p_value, p) for t, p in zip(tests, adjusted, strict=True)
    ]
