"""The assembler's selection restated in the plainest way, as an oracle for the indexed assembler.

For each query in catalog order, every slot's pool is recomputed as a boolean mask over the whole catalog, and the
candidate is the pool member with the smallest (usage, seeded priority): what the project's assembler did before it
was indexed for a million images (and what it must still choose, image for image).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pyarrow as pa

from data.reference import default_pack
from data.schemas import RQ2_SLOTS, RQ3_SLOTS

RQ2 = tuple(name for name, _ in RQ2_SLOTS)
RQ3 = RQ3_SLOTS


class Oracle:
    def __init__(self, table: pa.Table) -> None:
        rows = table.to_pylist()
        present = {r["country"] for r in rows}
        self.countries = [c.name for c in default_pack().countries if c.name in present]
        self.countries += sorted(present - set(self.countries))
        group_of = {r["country"]: r["language_group"] for r in rows}
        groups = sorted(set(group_of.values()))
        self.country_group = np.array([groups.index(group_of[c]) for c in self.countries])
        self.concept = np.array([r["concept_id"] for r in rows])
        self.country = np.array([self.countries.index(r["country"]) for r in rows])
        self.group = self.country_group[self.country] if len(rows) else np.zeros(0, int)
        by_sha: dict[str, set[int]] = defaultdict(set)
        by_pixels: dict[str, set[int]] = defaultdict(set)
        for r in rows:
            by_sha[r["sha256"]].add(r["concept_id"])
            if r.get("pixel_sha256"):
                by_pixels[r["pixel_sha256"]].add(r["concept_id"])
        self.shown = [
            {
                r["concept_id"],
                *r["tags"],
                *by_sha[r["sha256"]],
                *(by_pixels[r["pixel_sha256"]] if r.get("pixel_sha256") else ()),
            }
            for r in rows
        ]

    def shows(self, concept: int) -> np.ndarray:
        return np.array([concept in s for s in self.shown], dtype=bool)

    def pool(self, task: str, slot: str, c: int, x: int, y: int = -1) -> np.ndarray:
        gx = self.country_group[x]
        gy = self.country_group[y] if y >= 0 else -1
        shows = self.shows(c)
        concept, country, group = self.concept == c, self.country, self.group
        masks = {
            ("rq2", "correct"): concept & (group != gx),
            ("rq2", "language_biased"): (country == x) & ~shows,
            ("rq2", "irrelevant"): (group != gx) & ~shows,
            ("rq3", "correct"): concept & (country == y),
            ("rq3", "object_relevant_language_biased"): concept & (country == x),
            ("rq3", "object_relevant"): concept & (group != gx) & (group != gy),
            ("rq3", "cultural_descriptor_relevant"): (country == y) & ~shows,
            ("rq3", "language_biased"): (country == x) & ~shows,
            ("rq3", "irrelevant"): ~shows & (group != gx) & (group != gy),
        }
        return np.flatnonzero(masks[(task, slot)])

    def assemble(self, seed: int) -> tuple[dict[int, tuple[int, ...]], dict[int, tuple[str, tuple[int, ...]]]]:
        """RQ2: query -> candidates (in slot order); RQ3: query -> (descriptor country, candidates)."""
        n = len(self.concept)
        rq2: dict[int, tuple[int, ...]] = {}
        priority = np.random.default_rng(seed).permutation(n)
        usage = np.zeros(n, dtype=np.int64)
        for q in range(n):
            pools = [self.pool("rq2", s, int(self.concept[q]), int(self.country[q])) for s in RQ2]
            if all(len(p) for p in pools):
                rq2[q] = tuple(self._take(p, usage, priority) for p in pools)
        rq3: dict[int, tuple[str, tuple[int, ...]]] = {}
        priority = np.random.default_rng(seed + 1).permutation(n)
        country_priority = np.random.default_rng(seed + 2).permutation(len(self.countries))
        usage = np.zeros(n, dtype=np.int64)
        per_concept: dict[int, np.ndarray] = {}
        overall = np.zeros(len(self.countries), dtype=np.int64)
        for q in range(n):
            c, x = int(self.concept[q]), int(self.country[q])
            eligible = [
                y
                for y in range(len(self.countries))
                if self.country_group[y] != self.country_group[x]
                and all(len(self.pool("rq3", s, c, x, y)) for s in RQ3)
            ]
            if not eligible:
                continue
            counts = per_concept.setdefault(c, np.zeros(len(self.countries), dtype=np.int64))
            y = min(eligible, key=lambda e: (counts[e], overall[e], country_priority[e]))
            counts[y] += 1
            overall[y] += 1
            rq3[q] = (self.countries[y], tuple(self._take(self.pool("rq3", s, c, x, y), usage, priority) for s in RQ3))
        return rq2, rq3

    @staticmethod
    def _take(pool: np.ndarray, usage: np.ndarray, priority: np.ndarray) -> int:
        chosen = int(pool[np.lexsort((priority[pool], usage[pool]))[0]])
        usage[chosen] += 1
        return chosen
