"""Scale check of the whole image dedup decision (target: 1,000,000 x 512-d in < 10 min, RSS < 4 GB).

Synthetic unit vectors (float16, 1 GB at full size) spread over 138 concepts, with planted near-copies (a vector
plus small noise, cosine ~0.97, merged) and planted look-alikes (more noise, cosine ~0.93, the review band), plus
random 64-bit pHashes/dHashes with planted near-copies (a few flipped bits). `curation.image_dedup.decide` runs
the perceptual and embedding tiers within each concept, union-find, the keep rule, and builds the decision, pair
and review-queue tables, exactly as the stage does. In the same run, a dense per-concept similarity matrix on a
sample of concepts gives the peer figure (time per concept) and checks that the blocked search finds exactly the
same embedding pairs there.

    .venv/bin/python perf/dedup_scale.py [--n 1000000] [--dim 512] [--concepts 138]

The last line printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from curation.embedding_pairs import similar_pairs
from curation.image_dedup import DedupInputs, EmbeddingTierConfig, ImageDedupConfig, decide


def _plant(vectors: np.ndarray, rng: np.random.Generator, copy: int, source: int, noise: float) -> None:
    noisy = vectors[source].astype(np.float32) + rng.standard_normal(vectors.shape[1]).astype(np.float32) * noise
    vectors[copy] = noisy / np.linalg.norm(noisy)


def synthetic(n: int, dim: int, concepts: int, dup_share: float, seed: int) -> tuple[DedupInputs, set, set]:
    rng = np.random.default_rng(seed)
    vectors = np.empty((n, dim), dtype=np.float16)
    for start in range(0, n, 65536):  # in chunks: never a float32 copy of the whole set
        chunk = rng.standard_normal((min(65536, n - start), dim), dtype=np.float32)
        vectors[start : start + len(chunk)] = chunk / np.linalg.norm(chunk, axis=1, keepdims=True)
    groups = rng.integers(0, concepts, n).astype(np.int32)
    phash = rng.integers(0, 2**63, n, dtype=np.int64).astype(np.uint64) * np.uint64(2) + rng.integers(0, 2, n).astype(
        np.uint64
    )
    dhash = rng.integers(0, 2**63, n, dtype=np.int64).astype(np.uint64)
    k = int(n * dup_share)
    picked = rng.choice(n, 4 * k, replace=False)  # disjoint roles: no source is overwritten
    copies, sources, lookalikes, models = picked[:k], picked[k : 2 * k], picked[2 * k : 3 * k], picked[3 * k :]
    planted, band = set(), set()
    for copy, source in zip(copies.tolist(), sources.tolist(), strict=True):
        _plant(vectors, rng, copy, source, 0.01)  # cosine ~0.97
        flips = rng.choice(64, 3, replace=False)
        phash[copy] = phash[source] ^ np.uint64(sum(1 << int(b) for b in flips))
        dhash[copy] = dhash[source]
        groups[copy] = groups[source]
        planted.add((min(copy, source), max(copy, source)))
    for look, model in zip(lookalikes.tolist(), models.tolist(), strict=True):
        _plant(vectors, rng, look, model, 0.017)  # cosine ~0.93: the review band
        groups[look] = groups[model]
        band.add((min(look, model), max(look, model)))
    inputs = DedupInputs(
        image_ids=[f"img{k:07d}" for k in range(n)],
        concept_ids=groups,
        width=rng.integers(300, 2000, n).astype(np.int32),
        height=rng.integers(300, 2000, n).astype(np.int32),
        rank=rng.integers(0, 10, n).astype(np.int32),
        english=rng.random(n) < 0.5,
        phash=phash,
        dhash=dhash,
        embeddings=vectors,
    )
    return inputs, planted, band


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--concepts", type=int, default=138)  # 3XCM paper §3.1: 138 concepts
    parser.add_argument("--min-score", type=float, default=0.9)
    parser.add_argument("--block", type=int, default=2048)
    parser.add_argument("--peer-concepts", type=int, default=3)
    args = parser.parse_args()

    t0 = time.perf_counter()
    inputs, planted, band = synthetic(args.n, args.dim, args.concepts, 0.01, seed=0)
    vectors, groups = inputs.embeddings, inputs.concept_ids
    generate_s = time.perf_counter() - t0
    rss_before_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20

    config = ImageDedupConfig(
        embedding=EmbeddingTierConfig(merge_min_cosine=0.96, review_min_cosine=args.min_score, block=args.block)
    )
    t0 = time.perf_counter()
    result = decide(inputs, config)
    decide_s = time.perf_counter() - t0
    decisions = result.decisions
    cluster = dict(zip(decisions["image_id"].to_pylist(), decisions["cluster_id"].to_pylist(), strict=True))
    ids = inputs.image_ids
    merged = sum(cluster[ids[a]] == cluster[ids[b]] for a, b in planted)
    queue = set(
        zip(result.review_queue["image_a"].to_pylist(), result.review_queue["image_b"].to_pylist(), strict=True)
    )
    queued = sum((ids[a], ids[b]) in queue for a, b in band)
    recall = merged / max(1, len(planted))

    t0 = time.perf_counter()
    i, j, _ = similar_pairs(vectors, groups, args.min_score, block=args.block)
    pairs_s = time.perf_counter() - t0
    found = set(zip(i.tolist(), j.tolist(), strict=True))

    # Peer: the dense matrix of each sampled concept at once; it must give the same pairs.
    peer_times, same = [], True
    for concept in range(args.peer_concepts):
        members = np.flatnonzero(groups == concept)
        t0 = time.perf_counter()
        dense = vectors[members].astype(np.float32) @ vectors[members].astype(np.float32).T
        a, b = np.nonzero(np.triu(dense >= args.min_score, k=1))
        peer_times.append(time.perf_counter() - t0)
        dense_pairs = {(min(x, y), max(x, y)) for x, y in zip(members[a].tolist(), members[b].tolist(), strict=True)}
        ours = {(x, y) for x, y in found if groups[x] == concept}
        same &= dense_pairs == ours
    peak_rss_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20

    figures = {
        "n": args.n,
        "dim": args.dim,
        "concepts": args.concepts,
        "review_min_cosine": args.min_score,
        "generate_s": round(generate_s, 2),
        "decide_s": round(decide_s, 2),
        "embedding_pairs_s": round(pairs_s, 2),
        "pair_rows": result.pairs.num_rows,
        "dropped": decisions.num_rows - sum(decisions["keep"].to_pylist()),
        "planted_duplicates": len(planted),
        "planted_merged_share": round(recall, 5),
        "planted_lookalikes": len(band),
        "lookalikes_queued_share": round(queued / max(1, len(band)), 5),
        "review_queue": result.review_queue.num_rows,
        "peak_rss_gib": round(peak_rss_gib, 3),
        "rss_before_decide_gib": round(rss_before_gib, 3),
        "peer_dense_s_per_concept": round(float(np.median(peer_times)), 3),
        "ours_s_per_concept": round(pairs_s / args.concepts, 3),
        "ours_vs_peer_time_ratio": round(pairs_s / args.concepts / float(np.median(peer_times)), 3),
        "peer_pairs_identical": same,
        "target_under_600_s": decide_s < 600,
        "target_under_4_gib": peak_rss_gib < 4,
    }
    print(f"{args.n:,} x {args.dim} in {args.concepts} concepts: whole dedup decision in {decide_s:.1f} s")
    print(f"peak RSS {peak_rss_gib:.2f} GiB (the float16 vectors alone are {vectors.nbytes / 2**30:.2f} GiB)")
    print(f"planted duplicates merged: {recall:.2%} of {len(planted):,}; look-alikes queued: {queued:,}/{len(band):,}")
    print(f"embedding pairs alone: {pairs_s:.1f} s; dense peer on {args.peer_concepts} concepts: same pairs {same}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
