"""Concept dedup stage: merge concepts that name the same thing (3XCM paper §3.2.1 uses BGE-M3, cos >= 0.92).

Embedded default: lexical similarity, the cosine of character n-gram TF-IDF vectors of the normalised names.
Every concept gets a decision row; a merged concept names the kept one. The earlier concept (lower id) is kept.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Literal, Protocol

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from curation.unionfind import UnionFind
from data.schemas import CONCEPT_DEDUP, from_rows
from data.stage import Registry


class LexicalConceptDedupConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: Literal["lexical"] = "lexical"
    threshold: float = Field(
        default=0.9,
        gt=0,
        le=1,
        description="Cosine of character 2-4-gram TF-IDF vectors at or above which two concepts merge.",
    )
    ngram_range: tuple[int, int] = (2, 4)


ConceptDedupConfig = LexicalConceptDedupConfig


class ConceptEmbedder(Protocol):
    method: str

    def similarity(self, names: list[str]) -> np.ndarray:
        """A symmetric (n, n) similarity matrix with 1.0 on the diagonal."""
        ...


concept_embedders: Registry[ConceptEmbedder] = Registry("concept_dedup")


def normalize(name: str) -> str:
    """Lower case, NFKC, punctuation and '_'/'-' as spaces, one space between words, a plural 's' dropped."""
    text = unicodedata.normalize("NFKC", name).lower()
    text = re.sub(r"[\W_]+", " ", text).strip()
    words = [w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w for w in text.split()]
    return " ".join(words)


class LexicalEmbedder:
    method = "lexical_char_ngram"

    def __init__(self, config: LexicalConceptDedupConfig) -> None:
        self.config = config

    def similarity(self, names: list[str]) -> np.ndarray:
        from sklearn.feature_extraction.text import TfidfVectorizer

        vectors = TfidfVectorizer(analyzer="char_wb", ngram_range=self.config.ngram_range).fit_transform(
            [normalize(n) for n in names]
        )
        return (vectors @ vectors.T).toarray()


@concept_embedders.register("lexical")
def _lexical(config: LexicalConceptDedupConfig) -> ConceptEmbedder:
    return LexicalEmbedder(config)


def decide_concept_merges(
    concept_ids: list[int], names: list[str], similarity: np.ndarray, threshold: float, method: str
) -> list[dict]:
    """Union concepts at or above `threshold`; each group keeps its lowest id."""
    n = len(names)
    groups = UnionFind(n)
    sim = similarity.copy()
    np.fill_diagonal(sim, -np.inf)
    rows_i, cols_j = np.nonzero(np.triu(sim >= threshold, k=1))
    for i, j in zip(rows_i.tolist(), cols_j.tolist(), strict=True):
        groups.union(i, j)
    keeper = {}
    for i in sorted(range(n), key=lambda k: concept_ids[k]):
        keeper.setdefault(groups.find(i), i)
    rows = []
    for i in range(n):
        kept = keeper[groups.find(i)]
        nearest = int(np.argmax(sim[i])) if n > 1 else None
        merged = kept != i
        rows.append(
            {
                "concept_id": concept_ids[i],
                "concept": names[i],
                "normalized": normalize(names[i]),
                "keep": not merged,
                "duplicate_of": concept_ids[kept] if merged else None,
                "score": float(similarity[i, kept])
                if merged
                else (float(sim[i, nearest]) if nearest is not None else None),
                "nearest_id": concept_ids[nearest] if nearest is not None else None,
                "method": method,
                "reason": f"duplicate_concept(>= {threshold})" if merged else None,
            }
        )
    return rows


def run_concept_dedup(config: ConceptDedupConfig, concepts: pa.Table) -> pa.Table:
    embedder = concept_embedders.build(config)
    ids = concepts["concept_id"].to_pylist()
    names = concepts["concept"].to_pylist()
    if not names:
        return from_rows([], CONCEPT_DEDUP)
    rows = decide_concept_merges(ids, names, embedder.similarity(names), config.threshold, embedder.method)
    return from_rows(rows, CONCEPT_DEDUP)
