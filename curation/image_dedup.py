"""Image dedup stage: exact and perceptual near-duplicates within each concept (3XCM paper §3.2.1).

Tiers: identical bytes (sha256), identical decoded pixels, then pHash Hamming distance <= `phash_max_distance`.
Linked images are grouped with union-find. Each cluster keeps one image by this rule, in order:
  1. the highest resolution (width x height);
  2. the best search rank (lowest);
  3. the English query before the native one;
  4. the smallest image id (a stable tie-break).
Every dropped image records the kept image it duplicates, the tier that ties it to that image and the score.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Literal, Protocol

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from curation.image_hashing import hamming_within
from curation.unionfind import UnionFind
from data.schemas import IMAGE_DEDUP, from_rows
from data.stage import Registry

EXACT_BYTES = "exact_bytes"
EXACT_PIXELS = "exact_pixels"
PHASH = "phash"


class HashImageDedupConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: Literal["hash"] = "hash"
    phash_max_distance: int = Field(
        default=8,
        ge=0,
        le=32,
        description="pHash Hamming distance (of 64 bits) at or below which two images are near-duplicates.",
    )
    scope: Literal["concept", "global"] = Field(
        default="concept", description="Compare images within each concept (paper §3.2.1) or across all."
    )
    shard_size: int = Field(default=256, ge=1, description="Images per resumable hashing part.")


ImageDedupConfig = HashImageDedupConfig


class DedupRecord(BaseModel):
    """What the decision needs to know of one stored image."""

    image_id: str
    concept_id: int
    sha256: str
    pixel_sha256: str
    phash: int
    width: int
    height: int
    rank: int
    query_lang: str


def keep_order(record: DedupRecord) -> tuple:
    """Sort key: the first record of a cluster in this order is the one kept (module docstring)."""
    return (-(record.width * record.height), record.rank, record.query_lang != "eng", record.image_id)


def _link(a: DedupRecord, b: DedupRecord) -> tuple[str, float]:
    if a.sha256 == b.sha256:
        return EXACT_BYTES, 0.0
    if a.pixel_sha256 == b.pixel_sha256:
        return EXACT_PIXELS, 0.0
    return PHASH, float(int(a.phash ^ b.phash).bit_count())


def dedup_group(records: list[DedupRecord], phash_max_distance: int) -> list[dict]:
    """Decide one scope (one concept, or everything)."""
    n = len(records)
    groups = UnionFind(n)
    for key in ("sha256", "pixel_sha256"):
        first: dict[str, int] = {}
        for index, record in enumerate(records):
            groups.union(index, first.setdefault(getattr(record, key), index))
    hashes = np.array([r.phash for r in records], dtype=np.uint64)
    pair_i, pair_j, _ = hamming_within(hashes, phash_max_distance)
    for i, j in zip(pair_i.tolist(), pair_j.tolist(), strict=True):
        groups.union(i, j)

    rows = []
    for members in groups.groups().values():
        ordered = sorted(members, key=lambda k: keep_order(records[k]))
        kept = records[ordered[0]]
        for index in ordered:
            record = records[index]
            is_kept = index == ordered[0]
            method, score = (None, None) if is_kept else _link(record, kept)
            if method == PHASH and score is not None and score > phash_max_distance:
                reason = f"near_duplicate:{PHASH}_chain"  # linked to the kept image through other members
            else:
                reason = None if is_kept else f"near_duplicate:{method}"
            rows.append(
                {
                    "image_id": record.image_id,
                    "concept_id": record.concept_id,
                    "cluster_id": kept.image_id,
                    "cluster_size": len(members),
                    "keep": is_kept,
                    "duplicate_of": None if is_kept else kept.image_id,
                    "method": method,
                    "score": score,
                    "reason": reason,
                }
            )
    return rows


class ImageDeduper(Protocol):
    def decide(self, records: list[DedupRecord]) -> list[dict]:
        """One IMAGE_DEDUP row per record."""
        ...


image_dedupers: Registry[ImageDeduper] = Registry("image_dedup")


class HashImageDeduper:
    def __init__(self, config: HashImageDedupConfig) -> None:
        self.config = config

    def decide(self, records: list[DedupRecord]) -> list[dict]:
        scopes: dict[object, list[DedupRecord]] = defaultdict(list)
        for record in records:
            scopes[record.concept_id if self.config.scope == "concept" else "all"].append(record)
        max_distance = self.config.phash_max_distance
        return [row for key in sorted(scopes, key=str) for row in dedup_group(scopes[key], max_distance)]


@image_dedupers.register("hash")
def _hash(config: HashImageDedupConfig) -> ImageDeduper:
    return HashImageDeduper(config)


def run_image_dedup(config: ImageDedupConfig, records: list[DedupRecord]) -> pa.Table:
    rows = image_dedupers.build(config).decide(records)
    rows.sort(key=lambda r: r["image_id"])
    return from_rows(rows, IMAGE_DEDUP)
