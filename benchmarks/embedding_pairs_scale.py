"""Scale check for embedding near-duplicate pairs (issue 4 target: 1,000,000 x 512-d in < 10 min, RSS < 4 GB).

Synthetic unit vectors (float16, 1 GB at full size) spread over 138 concepts, with planted near-copies (a vector
plus small noise, cosine ~0.97). Pairs are searched within each concept at cosine >= 0.9. In the same run, a dense
per-concept similarity matrix on a sample of concepts gives the peer figure (time per concept) and checks that the
blocked search finds exactly the same pairs there.

    .venv/bin/python benchmarks/embedding_pairs_scale.py [--n 1000000] [--dim 512] [--concepts 138]

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


def synthetic(n: int, dim: int, concepts: int, dup_share: float, seed: int) -> tuple[np.ndarray, np.ndarray, set]:
    rng = np.random.default_rng(seed)
    vectors = np.empty((n, dim), dtype=np.float16)
    for start in range(0, n, 65536):  # in chunks: never a float32 copy of the whole set
        chunk = rng.standard_normal((min(65536, n - start), dim), dtype=np.float32)
        vectors[start : start + len(chunk)] = chunk / np.linalg.norm(chunk, axis=1, keepdims=True)
    groups = rng.integers(0, concepts, n).astype(np.int32)
    picked = rng.choice(n, 2 * int(n * dup_share), replace=False)
    copies, sources = picked[: len(picked) // 2], picked[len(picked) // 2 :]  # disjoint: no source is overwritten
    planted = set()
    for copy, source in zip(copies.tolist(), sources.tolist(), strict=True):
        noisy = vectors[source].astype(np.float32) + rng.standard_normal(dim).astype(np.float32) * 0.01
        vectors[copy] = noisy / np.linalg.norm(noisy)
        groups[copy] = groups[source]
        planted.add((min(copy, source), max(copy, source)))
    return vectors, groups, planted


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
    vectors, groups, planted = synthetic(args.n, args.dim, args.concepts, 0.01, seed=0)
    generate_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    i, j, _ = similar_pairs(vectors, groups, args.min_score, block=args.block)
    pairs_s = time.perf_counter() - t0
    found = set(zip(i.tolist(), j.tolist(), strict=True))
    recall = len(planted & found) / max(1, len(planted))

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
        "min_score": args.min_score,
        "generate_s": round(generate_s, 2),
        "pairs_s": round(pairs_s, 2),
        "pairs_found": len(found),
        "planted_pairs": len(planted),
        "planted_recall": round(recall, 5),
        "peak_rss_gib": round(peak_rss_gib, 3),
        "peer_dense_s_per_concept": round(float(np.median(peer_times)), 3),
        "ours_s_per_concept": round(pairs_s / args.concepts, 3),
        "peer_pairs_identical": same,
        "target_under_600_s": pairs_s < 600,
        "target_under_4_gib": peak_rss_gib < 4,
    }
    print(f"{args.n:,} x {args.dim} in {args.concepts} concepts: pairs in {pairs_s:.1f} s")
    print(f"peak RSS {peak_rss_gib:.2f} GiB (the float16 vectors alone are {vectors.nbytes / 2**30:.2f} GiB)")
    print(f"planted pairs found: {recall:.2%} of {len(planted):,}; all pairs >= {args.min_score}: {len(found):,}")
    print(f"dense peer on {args.peer_concepts} concepts: same pairs {same}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
