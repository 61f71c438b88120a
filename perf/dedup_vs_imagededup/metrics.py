"""Pairwise scores of a deduplicator's answer against the corpus truth.

A pair is an unordered pair of file names, stored sorted. The true pairs are all pairs of files in the same
group. Conventions for empty sets: precision is 1 when nothing is predicted (no false claim was made), recall is
1 when there is nothing to find, and F1 is 0 when both precision and recall are 0.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import combinations

from data.unionfind import UnionFind
from perf.dedup_vs_imagededup.corpus import COPY_KINDS, CorpusTruth

Pair = tuple[str, str]


def pair(a: str, b: str) -> Pair:
    return (a, b) if a <= b else (b, a)


def normalise_pairs(pairs: Iterable[Iterable[str]]) -> set[Pair]:
    """Unordered, deduplicated pairs; a pair of a file with itself is dropped."""
    out = set()
    for a, b in pairs:
        if a != b:
            out.add(pair(a, b))
    return out


def cluster_pairs(clusters: Iterable[Iterable[str]]) -> set[Pair]:
    """Every pair inside each cluster: what merging the clusters declares to be duplicates."""
    return {pair(a, b) for members in clusters for a, b in combinations(sorted(set(members)), 2)}


def connected_clusters(pairs: Iterable[Pair]) -> list[list[str]]:
    """The connected components (size >= 2) of the graph the pairs draw: their transitive closure."""
    pairs = list(pairs)
    names = sorted({name for p in pairs for name in p})
    index = {name: i for i, name in enumerate(names)}
    forest = UnionFind(len(names))
    for a, b in pairs:
        forest.union(index[a], index[b])
    return sorted(sorted(names[i] for i in members) for members in forest.groups().values() if len(members) > 1)


@dataclass(frozen=True)
class PairScores:
    predicted: int
    true: int
    true_positives: int

    @property
    def false_positives(self) -> int:
        return self.predicted - self.true_positives

    @property
    def false_negatives(self) -> int:
        return self.true - self.true_positives

    @property
    def precision(self) -> float:
        return self.true_positives / self.predicted if self.predicted else 1.0

    @property
    def recall(self) -> float:
        return self.true_positives / self.true if self.true else 1.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    def as_dict(self) -> dict[str, float | int]:
        return {
            "precision": self.precision,
            "recall": self.recall,
            "f1": self.f1,
            "predicted_pairs": self.predicted,
            "true_pairs": self.true,
            "true_positives": self.true_positives,
            "false_positives": self.false_positives,
            "false_negatives": self.false_negatives,
        }


def score_pairs(predicted: set[Pair], true: set[Pair]) -> PairScores:
    return PairScores(predicted=len(predicted), true=len(true), true_positives=len(predicted & true))


@dataclass(frozen=True)
class Recall:
    found: int
    total: int

    @property
    def recall(self) -> float:
        return self.found / self.total if self.total else 1.0


def recall_by_kind(predicted: set[Pair], truth: CorpusTruth, true: set[Pair] | None = None) -> dict[str, Recall]:
    """Recall of the true pairs that involve a copy of each transform kind; a pair counts under the kind of each
    copy in it, so a pair of two copies counts under both kinds."""
    true = truth.true_pairs() if true is None else true
    found: dict[str, int] = dict.fromkeys(COPY_KINDS, 0)
    total: dict[str, int] = dict.fromkeys(COPY_KINDS, 0)
    for p in true:
        hit = p in predicted
        for kind in {truth.files[name].kind for name in p} & set(COPY_KINDS):
            total[kind] += 1
            found[kind] += hit
    return {kind: Recall(found[kind], total[kind]) for kind in COPY_KINDS}


def recall_vs_source_by_kind(predicted: set[Pair], truth: CorpusTruth) -> dict[str, Recall]:
    """Recall of the pairs (copy, the file it was made from) per transform kind: one transform apart exactly."""
    found: dict[str, int] = dict.fromkeys(COPY_KINDS, 0)
    total: dict[str, int] = dict.fromkeys(COPY_KINDS, 0)
    for name, t in truth.files.items():
        if t.source is not None:
            total[t.kind] += 1
            found[t.kind] += pair(name, t.source) in predicted
    return {kind: Recall(found[kind], total[kind]) for kind in COPY_KINDS}


def sibling_false_positives(predicted: set[Pair], truth: CorpusTruth, true: set[Pair] | None = None) -> dict[str, int]:
    """False-positive pairs with a file of a hard-negative sibling's group in them, and the subset that joins two
    groups of the same family (a base's group and its sibling's, or two siblings': the planted confusions)."""
    true = truth.true_pairs() if true is None else true
    siblings = truth.sibling_groups
    involving = same_family = 0
    for a, b in predicted - true:
        ta, tb = truth.files[a], truth.files[b]
        involving += ta.group in siblings or tb.group in siblings
        same_family += ta.family == tb.family
    return {"fp_involving_siblings": involving, "fp_same_family": same_family}


def evaluate(predicted: set[Pair], truth: CorpusTruth, review: set[Pair] | None = None) -> dict[str, object]:
    """All figures for one predicted pair set, as plain JSON-able values."""
    true = truth.true_pairs()
    unknown = {name for p in predicted for name in p} - truth.files.keys()
    if unknown:
        raise ValueError(f"predicted pairs name files outside the corpus: {sorted(unknown)[:5]}")
    figures: dict[str, object] = score_pairs(predicted, true).as_dict()
    figures.update(sibling_false_positives(predicted, truth, true))
    figures["recall_by_kind"] = {k: r.recall for k, r in recall_by_kind(predicted, truth, true).items()}
    figures["recall_vs_source_by_kind"] = {k: r.recall for k, r in recall_vs_source_by_kind(predicted, truth).items()}
    if review is not None:
        figures["review_pairs"] = len(review)
        figures["review_pairs_true"] = len(review & true)
        # True pairs the clusters missed that the review queue would still show a person.
        figures["review_pairs_missed_by_clusters"] = len((review & true) - predicted)
    return figures
