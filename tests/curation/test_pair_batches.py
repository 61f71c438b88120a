"""Candidate pairs are scored batch by batch with bounded thumbnails (issue 31), and the answer does not depend on
the batches.

- `pair_batches` never splits a connected component (checked against scipy's connected components), covers every
  pair once, keeps each batch within its row budget unless one component alone is bigger, and keeps pair order.
- `decide` gives the same tables with batches of a few rows as with one batch, while the thumbnails it holds at
  once stay within a batch.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
import pytest
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

import curation.pair_batches as pair_batches_module
from curation.image_dedup import DedupInputs, ImageDedupConfig, decide
from curation.pair_batches import pair_batches


def _components(i: np.ndarray, j: np.ndarray, n: int) -> np.ndarray:
    graph = coo_matrix((np.ones(len(i)), (i, j)), shape=(n, n))
    return connected_components(graph, directed=False)[1]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_batches_keep_components_whole_within_their_row_budget(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 400
    i = rng.integers(0, n, 300)
    j = rng.integers(0, n, 300)
    keep = i != j
    i, j = i[keep], j[keep]
    budget = 25
    batches = pair_batches(i, j, rows=budget)
    label = _components(i, j, n)

    assert sorted(np.concatenate(batches).tolist()) == list(range(len(i)))
    batch_of_component: dict[int, int] = {}
    for number, batch in enumerate(batches):
        assert np.all(np.diff(batch) > 0)  # the pairs' order is kept
        for pair in batch.tolist():
            assert batch_of_component.setdefault(int(label[i[pair]]), number) == number
        touched = np.unique(np.concatenate([i[batch], j[batch]]))
        if len(touched) > budget:
            assert len(np.unique(label[touched])) == 1  # only a component bigger than the budget stands alone
    assert len(batches) > 1


def _inputs(paths: list[str], held: list[int]) -> DedupInputs:
    """The file deduplicator's inputs on a small crops corpus, with a thumbnail cache that `forget` empties and
    whose size is recorded after every fill."""
    from curation.file_hashing import read_file
    from curation.image_hashing import hash_batch
    from curation.image_thumbnails import pixel_sha256

    batch = hash_batch([partial(read_file, p) for p in paths], 2, keep_align=True)
    align, chroma = batch.align, batch.chroma
    assert align is not None and chroma is not None
    cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def thumbs(row: int) -> tuple[np.ndarray, np.ndarray]:
        if row not in cache:
            cache[row] = (align[row], chroma[row])
            held.append(len(cache))
        return cache[row]

    n = len(paths)
    return DedupInputs(
        image_ids=paths,
        concept_ids=np.arange(n, dtype=np.int32) % 3,  # three concepts: three scopes
        width=batch.width,
        height=batch.height,
        rank=np.zeros(n, dtype=np.int32),
        english=np.ones(n, dtype=bool),
        sha256=[d or f"unreadable:{p}" for d, p in zip(batch.sha256, paths, strict=True)],
        phash=batch.phash,
        dhash=batch.dhash,
        hashed=np.array([e is None for e in batch.errors], dtype=bool),
        pixel_hash=lambda row: batch.pixel_sha256[row] or pixel_sha256(read_file(paths[row])),
        align_thumbnail=lambda row: thumbs(row)[0],
        chroma_thumbnail=lambda row: thumbs(row)[1],
        forget_thumbnails=cache.clear,
        draft_decoded=batch.draft_decoded,
        workers=2,
    )


@pytest.mark.slow
def test_decide_answers_the_same_whatever_the_batches_and_holds_one_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from perf.dedup_vs_imagededup.corpus import generate_corpus

    paths = generate_corpus(tmp_path / "c", seed=5, bases=16, workers=1, mix="small-crops").paths()
    config = ImageDedupConfig(scope="global")
    whole_held: list[int] = []
    whole = decide(_inputs(paths, whole_held), config)

    monkeypatch.setattr(pair_batches_module, "BATCH_ROWS", 6)
    small_held: list[int] = []
    small = decide(_inputs(paths, small_held), config)

    for name in ("decisions", "pairs", "review_queue"):
        assert getattr(small, name).equals(getattr(whole, name)), name
    assert len(set(whole.pairs["tier"].to_pylist())) >= 3  # exact pixels, pHash and aligned pairs all took part
    # One batch at a time: far fewer thumbnails held at once than with a single batch.
    assert max(whole_held) > 3 * max(small_held)


@pytest.mark.slow
def test_batches_scored_in_worker_processes_give_the_same_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build's dedup scores its batches in worker processes (`DedupInputs.processes`): the same tables as in
    this process, with the thumbnails decoded over there."""
    import dataclasses
    import os

    from perf.dedup_vs_imagededup.corpus import generate_corpus

    paths = generate_corpus(tmp_path / "c", seed=7, bases=10, workers=1, mix="small-crops").paths()
    config = ImageDedupConfig(scope="global")
    monkeypatch.setattr(pair_batches_module, "BATCH_ROWS", 8)
    here = decide(_inputs(paths, []), config)

    seen = tmp_path / "pids"
    seen.mkdir()
    inputs = _inputs(paths, [])
    align = inputs.align_thumbnail
    assert align is not None

    def recorded(row: int) -> np.ndarray:
        (seen / str(os.getpid())).touch()
        return align(row)

    there = decide(dataclasses.replace(inputs, align_thumbnail=recorded, processes=2), config)
    for name in ("decisions", "pairs", "review_queue"):
        assert getattr(there, name).equals(getattr(here, name)), name
    pids = {int(p.name) for p in seen.iterdir()}
    assert pids and os.getpid() not in pids  # the workers scored the batches, this process none
