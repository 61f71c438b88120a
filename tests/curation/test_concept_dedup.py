"""The BGE-M3 concept dedup backend (3XCM paper §3.2.1), run on a tiny random XLM-R model built offline.

Random weights give near-identical vectors for every name, so the tests never assume a ranking: they read the
model's own similarities and check that the decisions follow them at a threshold placed between two of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from pathlib import Path

import FlagEmbedding  # noqa: F401  (locked: a missing one must fail, not skip)
import numpy as np
import pyarrow as pa
import pytest
from pydantic import TypeAdapter

from curation import concept_dedup
from curation.concept_dedup import (
    BgeM3ConceptDedupConfig,
    BgeM3Embedder,
    ConceptDedupConfig,
    LexicalConceptDedupConfig,
    run_concept_dedup,
)
from data.schemas import CONCEPT_DEDUP, CONCEPTS
from tests.support.tiny_models import build_tiny_m3

# Three copies of one name form a group of three; the rest are distinct names.
NAMES = {
    0: "hello world",
    1: "a photo of a cat",
    2: "a red apple on a table",
    3: "hello world",
    4: "Bonjour le monde",
    5: "hello world",
    6: "xin chào thế giới",
    7: "a cat",
}


@pytest.fixture(scope="session")
def tiny_m3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")  # nothing in this module may reach the hub
        yield build_tiny_m3(tmp_path_factory.mktemp("tiny-bge-m3"))


def concepts_table(names: dict[int, str]) -> pa.Table:
    return pa.Table.from_pylist(
        [{"concept_id": i, "concept": n, "source": "operator"} for i, n in names.items()], schema=CONCEPTS
    )


@cache
def reference_model(model_dir: Path):  # -> BGEM3FlagModel
    from FlagEmbedding import BGEM3FlagModel

    return BGEM3FlagModel(str(model_dir), use_fp16=False, devices="cpu", normalize_embeddings=True)


def reference_similarity(model_dir: Path, names: list[str]) -> np.ndarray:
    """The model's cosines computed here with FlagEmbedding directly, independently of the backend."""
    vecs = reference_model(model_dir).encode(names, batch_size=3, max_length=64)["dense_vecs"].astype(np.float64)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return vecs @ vecs.T


def components(n: int, edges: list[tuple[int, int]]) -> list[set[int]]:
    """Connected components by plain graph search (not the union-find under test)."""
    neighbours: dict[int, set[int]] = {i: set() for i in range(n)}
    for a, b in edges:
        neighbours[a].add(b)
        neighbours[b].add(a)
    seen: set[int] = set()
    out = []
    for start in range(n):
        if start in seen:
            continue
        stack, group = [start], set()
        while stack:
            node = stack.pop()
            if node not in group:
                group.add(node)
                stack.extend(neighbours[node] - group)
        seen |= group
        out.append(group)
    return out


def test_bge_m3_similarities_come_from_the_model(tiny_m3: Path, tmp_path: Path) -> None:
    names = list(NAMES.values())
    sim = BgeM3Embedder(BgeM3ConceptDedupConfig(model=str(tiny_m3))).similarity(names)
    assert sim.shape == (len(names), len(names))
    assert np.array_equal(sim, sim.T) and np.all(np.diag(sim) == 1.0)
    assert np.all(sim >= -1.0) and np.all(sim <= 1.0)
    # The same numbers as encoding with FlagEmbedding directly: the backend really uses the model's vectors.
    np.testing.assert_allclose(sim, reference_similarity(tiny_m3, names), atol=1e-5)
    # Identical strings have identical vectors: cosine 1.
    assert sim[0, 3] == pytest.approx(1.0, abs=1e-5) and sim[0, 5] == pytest.approx(1.0, abs=1e-5)


def test_bge_m3_merges_exactly_the_pairs_at_or_above_the_threshold(tiny_m3: Path, tmp_path: Path) -> None:
    ids, names = list(NAMES), list(NAMES.values())
    sim = reference_similarity(tiny_m3, names)
    pairs = [(i, j) for i in range(len(names)) for j in range(i + 1, len(names)) if names[i] != names[j]]
    # The cosines of distinct name pairs, one per value: the copies of "hello world" give the same pair again, equal
    # up to float noise from padding in another batch (1e-6), which rounding alone can split (0.843873 vs 0.843872).
    distinct: list[float] = []
    for value in sorted((float(sim[i, j]) for i, j in pairs), reverse=True):
        if not distinct or distinct[-1] - value > 1e-5:
            distinct.append(value)
    # Between the 2nd and 3rd highest cosine of distinct names: some distinct names merge, most do not.
    threshold = (distinct[1] + distinct[2]) / 2
    assert distinct[1] - distinct[2] > 1e-4, "the tiny model's scores are too close to place a threshold"

    table = run_concept_dedup(BgeM3ConceptDedupConfig(model=str(tiny_m3), threshold=threshold), concepts_table(NAMES))

    assert table.schema.names == CONCEPT_DEDUP.names and table.num_rows == len(NAMES)
    rows = {r["concept_id"]: r for r in table.to_pylist()}
    assert {r["method"] for r in rows.values()} == {f"bge-m3:{tiny_m3.name}"}
    edges = [(i, j) for i in range(len(names)) for j in range(i + 1, len(names)) if sim[i, j] >= threshold]
    for group in components(len(names), edges):
        kept = min(ids[k] for k in group)
        for k in group:
            row = rows[ids[k]]
            if ids[k] == kept:
                assert row["keep"] and row["duplicate_of"] is None and row["reason"] is None
            else:  # every merged concept names the kept one, with its score to it
                assert not row["keep"] and row["duplicate_of"] == kept
                assert row["score"] == pytest.approx(sim[k, ids.index(kept)], abs=1e-5)
                assert row["reason"] == f"duplicate_concept(>= {threshold})"
    # The three copies of "hello world" form one group of three kept as concept 0.
    assert rows[0]["keep"] and rows[3]["duplicate_of"] == 0 and rows[5]["duplicate_of"] == 0
    assert rows[3]["score"] == pytest.approx(1.0, abs=1e-5)
    merged_distinct = {ids[k] for g in components(len(names), edges) if len(g) > 1 for k in g} - {0, 3, 5}
    assert merged_distinct, "the threshold must merge at least one pair of distinct names"
    assert sum(r["keep"] for r in rows.values()) >= 2


def test_bge_m3_model_is_loaded_once_per_process(tiny_m3: Path, tmp_path: Path) -> None:
    config = BgeM3ConceptDedupConfig(model=str(tiny_m3))
    first = run_concept_dedup(config, concepts_table(NAMES))
    loaded = concept_dedup._load_bge_m3(str(tiny_m3), "cpu", False)
    second = run_concept_dedup(config.model_copy(update={"threshold": 0.99}), concepts_table(NAMES))
    assert concept_dedup._load_bge_m3(str(tiny_m3), "cpu", False) is loaded
    # Same model, same inputs; float summation order may differ between calls (oneDNN), so not bit for bit. A concept
    # kept at both thresholds scores its nearest neighbour, whatever the threshold; a merged one scores its group's
    # kept concept, which a chain of merges at the lower threshold can change.
    kept = [
        i for i, (a, b) in enumerate(zip(first["keep"].to_pylist(), second["keep"].to_pylist(), strict=True)) if a and b
    ]
    assert kept
    scores = [first["score"][i].as_py() for i in kept]
    assert scores == pytest.approx([second["score"][i].as_py() for i in kept], abs=1e-6)


def test_bge_m3_missing_weights_give_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "models" / "bge-m3"
    with pytest.raises(FileNotFoundError, match="does not exist"):
        run_concept_dedup(BgeM3ConceptDedupConfig(model=str(missing)), concepts_table(NAMES))
    # A hub id that is not cached fails before any download is tried.
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))
    with pytest.raises(FileNotFoundError, match="neither a local folder nor in the Hugging Face cache"):
        run_concept_dedup(BgeM3ConceptDedupConfig(model="BAAI/bge-m3"), concepts_table(NAMES))


def test_concept_dedup_config_union_picks_the_backend(tmp_path: Path) -> None:
    adapter = TypeAdapter(ConceptDedupConfig)
    assert isinstance(adapter.validate_python({"backend": "lexical"}), LexicalConceptDedupConfig)
    m3 = adapter.validate_python({"backend": "bge-m3", "device": "cuda:0"})
    assert isinstance(m3, BgeM3ConceptDedupConfig) and m3.threshold == 0.92 and m3.fp16
    assert not BgeM3ConceptDedupConfig().fp16
    with pytest.raises(ValueError):
        adapter.validate_python({"backend": "bge-m3", "batch": 3})
