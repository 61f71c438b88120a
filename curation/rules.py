"""The candidate rules of the RQ2 triplets and RQ3 sextets, written once for the assembler and the validator.

3XCM paper §3.2.2 (RQ2) and §3.2.3 (RQ3), with the stricter reading of the design brief: the correct and the
irrelevant candidates never share the query's language group, and no distractor shows the query concept: none
carries it among its tags, and none has the bytes (sha256) or the decoded pixels (pixel hash) of an image of the
query concept. The tags already include the concepts of an image's copies (`curation/copies.py`); the hashes are
checked again here, so the validator holds a release to the rule whatever its tags say.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import pyarrow as pa

from data import reference


@dataclass(frozen=True)
class Query:
    concept: int
    country: int
    group: int
    descriptor_country: int = -1  # RQ3 only: Y
    descriptor_group: int = -1


@dataclass
class Catalog:
    """The image table as arrays; row i is index_in_dataset i."""

    image_id: list[str]
    concept_name: list[str]
    concept: np.ndarray
    country: np.ndarray
    group: np.ndarray
    country_names: list[str]
    country_group: np.ndarray
    tags: list[frozenset[int]]
    sha_group: np.ndarray  # int: rows with equal sha256 share a value
    pixel_group: np.ndarray  # int: rows with equal (known) pixel hashes share a value; -1 where unknown
    _tag_masks: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    _shows: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    @classmethod
    def from_table(cls, table: pa.Table) -> Catalog:
        if table.column("index_in_dataset").to_pylist() != list(range(table.num_rows)):
            raise ValueError("image table rows must be in index_in_dataset order 0..n-1")
        names = table.column("country").to_pylist()
        ordered = [c.name for c in reference.countries() if c.name in set(names)]
        position = {name: i for i, name in enumerate(ordered)}
        groups = sorted({reference.country_by_name()[n].language_group for n in ordered})
        country_group = np.array(
            [groups.index(reference.country_by_name()[n].language_group) for n in ordered], dtype=np.int32
        )
        country = np.array([position[n] for n in names], dtype=np.int32)
        return cls(
            image_id=table.column("image_id").to_pylist(),
            concept_name=table.column("concept").to_pylist(),
            concept=np.asarray(table.column("concept_id").to_numpy(), dtype=np.int32),
            country=country,
            group=country_group[country] if len(country) else np.empty(0, np.int32),
            country_names=ordered,
            country_group=country_group,
            tags=[frozenset(t) for t in table.column("tags").to_pylist()],
            sha_group=_groups(table.column("sha256").to_pylist()),
            pixel_group=_groups(
                table.column("pixel_sha256").to_pylist()
                if "pixel_sha256" in table.column_names
                else [None] * table.num_rows
            ),
        )

    def __len__(self) -> int:
        return len(self.image_id)

    def tagged(self, concept: int) -> np.ndarray:
        mask = self._tag_masks.get(concept)
        if mask is None:
            mask = np.fromiter((concept in t for t in self.tags), dtype=bool, count=len(self.tags))
            self._tag_masks[concept] = mask
        return mask

    def shows(self, concept: int) -> np.ndarray:
        """Rows that show `concept`: tagged with it, or a byte- or pixel-identical copy of an image of it."""
        mask = self._shows.get(concept)
        if mask is None:
            of_concept = self.concept == concept
            mask = self.tagged(concept) | np.isin(self.sha_group, self.sha_group[of_concept])
            pixels = self.pixel_group[of_concept]
            mask |= np.isin(self.pixel_group, pixels[pixels >= 0])
            self._shows[concept] = mask
        return mask

    def query_for(self, index: int, descriptor_country: int = -1) -> Query:
        return Query(
            concept=int(self.concept[index]),
            country=int(self.country[index]),
            group=int(self.group[index]),
            descriptor_country=descriptor_country,
            descriptor_group=int(self.country_group[descriptor_country]) if descriptor_country >= 0 else -1,
        )


def _groups(values: list[str | None]) -> np.ndarray:
    """Equal non-null values -> equal non-negative ints; null -> -1."""
    ids: dict[str, int] = {}
    return np.array([-1 if v is None else ids.setdefault(v, len(ids)) for v in values], dtype=np.int64)


Rule = Callable[[Catalog, Query], np.ndarray]

RQ2_RULES: dict[str, Rule] = {
    # (i) Correct: the query concept, from a country outside the query's language group.
    "correct": lambda cat, q: (cat.concept == q.concept) & (cat.group != q.group),
    # (ii) Language-biased: from the query's country, not showing the query concept.
    "language_biased": lambda cat, q: (cat.country == q.country) & ~cat.shows(q.concept),
    # (iii) Totally irrelevant: not showing the concept, from outside the query's language group.
    "irrelevant": lambda cat, q: (cat.group != q.group) & ~cat.shows(q.concept),
}

RQ3_RULES: dict[str, Rule] = {
    "correct": lambda cat, q: (cat.concept == q.concept) & (cat.country == q.descriptor_country),
    "object_relevant_language_biased": lambda cat, q: (cat.concept == q.concept) & (cat.country == q.country),
    "object_relevant": lambda cat, q: (
        (cat.concept == q.concept) & (cat.group != q.group) & (cat.group != q.descriptor_group)
    ),
    "cultural_descriptor_relevant": lambda cat, q: (cat.country == q.descriptor_country) & ~cat.shows(q.concept),
    "language_biased": lambda cat, q: (cat.country == q.country) & ~cat.shows(q.concept),
    "irrelevant": lambda cat, q: ~cat.shows(q.concept) & (cat.group != q.group) & (cat.group != q.descriptor_group),
}


class PoolCache:
    """Eligible candidate indices per (task, slot, query). Queries arrive grouped, so a small LRU suffices."""

    def __init__(self, catalog: Catalog, rules: dict[str, Rule], size: int = 256) -> None:
        self.catalog = catalog
        self.rules = rules
        self._pool = lru_cache(maxsize=size)(self._compute)

    def _compute(self, slot: str, query: Query) -> np.ndarray:
        return np.flatnonzero(self.rules[slot](self.catalog, query))

    def pool(self, slot: str, query: Query) -> np.ndarray:
        return self._pool(slot, query)

    def allows(self, slot: str, query: Query, index: int) -> bool:
        """Whether row `index` is eligible for the slot: a binary search of the (sorted, cached) pool."""
        pool = self.pool(slot, query)
        position = int(np.searchsorted(pool, index))
        return position < len(pool) and int(pool[position]) == index


def eligible_descriptor_countries(cache: PoolCache, query: Query) -> list[int]:
    """Countries Y outside X's group for which all six RQ3 slots have a candidate."""
    catalog = cache.catalog
    out = []
    for y, group in enumerate(catalog.country_group.tolist()):
        if group == query.group:
            continue
        candidate = Query(query.concept, query.country, query.group, y, group)
        if all(len(cache.pool(slot, candidate)) for slot in cache.rules):
            out.append(y)
    return out


def least_used(pool: np.ndarray, usage: np.ndarray, priority: np.ndarray) -> int:
    """The pool member used least so far; ties go to the seeded priority order."""
    keys = usage[pool].astype(np.int64) * (len(priority) + 1) + priority[pool]
    return int(pool[int(np.argmin(keys))])


class DescriptorBalance:
    """How often each RQ3 descriptor country Y was chosen: per query concept first, then overall.

    Balancing per concept spreads the queries of one concept over the countries whose images of that concept
    serve as the correct answer, so no small pool is reused much more than the others.
    """

    def __init__(self, countries: int) -> None:
        self.countries = countries
        self.per_concept: dict[int, np.ndarray] = {}
        self.overall = np.zeros(countries, dtype=np.int64)

    def _keys(self, concept: int, eligible: np.ndarray) -> np.ndarray:
        per = self.per_concept.get(concept, np.zeros(self.countries, dtype=np.int64))
        return per[eligible] * (self.overall.max() + 2) + self.overall[eligible]

    def choose(self, concept: int, eligible: np.ndarray, priority: np.ndarray) -> int:
        keys = self._keys(concept, eligible) * (len(priority) + 1) + priority[eligible]
        return int(eligible[int(np.argmin(keys))])

    def is_least_used(self, concept: int, y: int, eligible: np.ndarray) -> bool:
        keys = self._keys(concept, eligible)
        return bool(keys[list(eligible).index(y)] == keys.min())

    def record(self, concept: int, y: int) -> None:
        self.per_concept.setdefault(concept, np.zeros(self.countries, dtype=np.int64))[y] += 1
        self.overall[y] += 1
