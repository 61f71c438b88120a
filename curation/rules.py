"""The candidate rules of the RQ2 triplets and RQ3 sextets, written once for the assembler and the validator.

3XCM paper §3.2.2 (RQ2) and §3.2.3 (RQ3), read more strictly than the released 3XCM (docs/researchers.md, "The benchmark
rules"): the correct and the irrelevant candidates never share the query's language group, and no distractor shows the
query concept: none carries it among its tags, and none has the bytes (sha256) or the decoded pixels (pixel hash) of an
image of the query concept. The tags already include the concepts of an image's copies (`curation/copies.py`); the
hashes are checked again here, so the validator holds a release to the rule whatever its tags say.

Each slot is declared, not coded: the images it draws from (one (concept, country) cell, a concept, a country, or
all), the language groups it leaves out, and whether its candidates must not show the query concept. The same
declaration answers "which rows are eligible" for a whole column at once (`in_pool`, the validator) and "which is
the least-used eligible image now" through an index (`curation/pool_index.py`, the assembler and the validator's
replay), so a million images never need a mask per query.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from data.reference_models import ReferencePack

Partition = Literal["cell_x", "cell_y", "concept", "country_x", "country_y", "all"]


@dataclass(frozen=True)
class Slot:
    name: str
    partition: Partition  # x: the query's country; y: the RQ3 descriptor country
    excluded_groups: tuple[str, ...] = ()  # language groups ("x", "y") its candidates may not come from
    not_showing: bool = False  # its candidates must not show the query concept


RQ2_RULES: tuple[Slot, ...] = (
    # (i) Correct: the query concept, from a country outside the query's language group.
    Slot("correct", "concept", ("x",)),
    # (ii) Language-biased: from the query's country, not showing the query concept.
    Slot("language_biased", "country_x", not_showing=True),
    # (iii) Totally irrelevant: not showing the concept, from outside the query's language group.
    Slot("irrelevant", "all", ("x",), not_showing=True),
)
RQ3_RULES: tuple[Slot, ...] = (
    Slot("correct", "cell_y"),  # the concept from Y
    Slot("object_relevant_language_biased", "cell_x"),  # the concept from X
    Slot("object_relevant", "concept", ("x", "y")),  # the concept from Z, outside the groups of X and Y
    Slot("cultural_descriptor_relevant", "country_y", not_showing=True),  # from Y, not the concept
    Slot("language_biased", "country_x", not_showing=True),  # from X, not the concept
    Slot("irrelevant", "all", ("x", "y"), not_showing=True),  # neither, and from neither group
)
TASK_RULES = {"rq2": RQ2_RULES, "rq3": RQ3_RULES}


@dataclass
class Catalog:
    """The image table as arrays; row i is index_in_dataset i. Countries keep the reference pack's order (others
    follow by name).

    Language groups: a country of one language is in that language's group; a country of several is in the group of
    each (3XCM §3.2 read for several languages: a candidate's country is in the query's language group when any of
    its languages is in it; docs/reference-packs.md). Each distinct set of groups a country is in is one
    *signature* (`group`, `country_group`, `group_names`: `es`, or `es+qu` for a country of Spanish and Quechua);
    where every country has one language, signatures are the groups themselves.

    Queries: each image is queried once in each language of its country. A query is named by its id `q`: the image
    row `q // languages_per_query` and the language `q % languages_per_query` of its country's list; where every
    country has one language, a query's id is its image row."""

    image_id: npt.NDArray[np.object_]  # object (str)
    concept_name: npt.NDArray[np.object_]  # object (str)
    concept: npt.NDArray[np.int64]  # int64 concept ids
    country: npt.NDArray[np.int64]  # int64 positions in country_names
    group: npt.NDArray[np.int64]  # int64 positions in group_names (signatures)
    country_names: list[str]
    country_group: npt.NDArray[np.int64]  # int64, per country (its signature)
    group_names: list[str]
    country_language: list[str]  # primary language code per country
    tags: list[list[int]]
    # Concepts an image shows besides its own (tags, and the concepts of its byte and pixel copies), as sorted
    # keys image * concept_stride + concept, for vectorised membership tests.
    extra_keys: npt.NDArray[np.int64]
    extra: dict[int, frozenset[int]] = field(repr=False)  # the same, per image, for the index's item test
    concept_stride: int = 1
    # Per country, its query languages and the position of each one's group in `language_groups`.
    country_queries: list[list[tuple[str, int]]] = field(default_factory=list)
    language_groups: list[str] = field(default_factory=list)
    # signature x language group: whether the signature holds the group; signature x signature: no group shared.
    signature_member: npt.NDArray[np.bool_] = field(default_factory=lambda: np.zeros((0, 0), dtype=bool))
    disjoint: npt.NDArray[np.bool_] = field(default_factory=lambda: np.zeros((0, 0), dtype=bool))
    languages_per_query: int = 1

    @classmethod
    def from_table(
        cls,
        table: pa.Table,
        country_order: Sequence[str],
        country_languages: Mapping[str, Sequence[tuple[str, str]]] | None = None,
    ) -> Catalog:
        """`country_order`: the reference pack's countries in its order (seeded choices over countries follow it:
        a release is checked and repaired in the order it was built in). `country_languages`: each country's
        (language, group) pairs, primary first, from the pack; without it, each country's one language and group
        are the table's own columns (a country of several languages needs its pack)."""
        if table.column("index_in_dataset").to_pylist() != list(range(table.num_rows)):
            raise ValueError("image table rows must be in index_in_dataset order 0..n-1")
        names = table.column("country").to_pylist()
        present = set(names)
        ordered = [name for name in country_order if name in present]
        ordered += sorted(present - set(ordered))
        position = {name: i for i, name in enumerate(ordered)}
        spoken = _country_languages(table, names, country_languages)
        real_groups = sorted({group for n in ordered for _, group in spoken[n]})
        signature_of = {n: "+".join(sorted({group for _, group in spoken[n]})) for n in ordered}
        signatures = sorted(set(signature_of.values()))
        member = np.zeros((len(signatures), len(real_groups)), dtype=bool)
        for i, signature in enumerate(signatures):
            for group in signature.split("+"):
                member[i, real_groups.index(group)] = True
        country_group = np.array([signatures.index(signature_of[n]) for n in ordered], dtype=np.int64)
        country = np.array([position[n] for n in names], dtype=np.int64)
        concept = np.asarray(table.column("concept_id").to_numpy(zero_copy_only=False), dtype=np.int64)
        tags = table.column("tags").to_pylist()
        stride = int(max(concept.max(initial=0), max((max(t, default=0) for t in tags), default=0))) + 1
        extra = _extra_concepts(concept, tags, table, stride)
        keys = np.array(sorted(i * stride + c for i, shown in extra.items() for c in shown), dtype=np.int64)
        queries = [[(code, real_groups.index(group)) for code, group in spoken[n]] for n in ordered]
        return cls(
            image_id=np.array(table.column("image_id").to_pylist(), dtype=object),
            concept_name=np.array(table.column("concept").to_pylist(), dtype=object),
            concept=concept,
            country=country,
            group=country_group[country] if len(country) else np.empty(0, np.int64),
            country_names=ordered,
            country_group=country_group,
            group_names=signatures,
            country_language=[spoken[n][0][0] for n in ordered],
            tags=tags,
            extra_keys=keys,
            extra=extra,
            concept_stride=stride,
            country_queries=queries,
            language_groups=real_groups,
            signature_member=member,
            disjoint=~(member.astype(np.int64) @ member.astype(np.int64).T).astype(bool),
            languages_per_query=max((len(q) for q in queries), default=1),
        )

    # -- queries: (image row, language) -------------------------------------------------------------------------

    def query_ids(self, rows: npt.NDArray[np.integer] | None = None) -> npt.NDArray[np.int64]:
        """The queries of `rows` (default: every image), each row's in its country's language order."""
        chosen: npt.NDArray[np.int64] = (
            np.arange(len(self), dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
        )
        per = self.languages_per_query
        if per == 1:
            return chosen
        rows = chosen
        counts = np.array([len(q) for q in self.country_queries], dtype=np.int64)[self.country[rows]]
        out = np.repeat(rows * per, counts)
        starts = np.cumsum(counts) - counts
        out += np.arange(len(out)) - np.repeat(starts, counts)
        return out

    def query_id(self, row: int, language: str) -> int:
        """The query of image `row` in `language`; KeyError when its country does not speak it."""
        for j, (code, _) in enumerate(self.country_queries[int(self.country[row])]):
            if code == language:
                return row * self.languages_per_query + j
        raise KeyError(f"{self.country_names[int(self.country[row])]} has no query language {language!r}")

    def query_row(self, query: int) -> int:
        return query // self.languages_per_query

    def query_language(self, query: int) -> tuple[str, int]:
        """(language code, its group's position in `language_groups`) of a query."""
        row = query // self.languages_per_query
        return self.country_queries[int(self.country[row])][query % self.languages_per_query]

    def left_out(self, which: str, x_group: int, y: int) -> npt.NDArray[np.bool_]:
        """Per signature, whether a slot that excludes `which` (x: the query's language group; y: every group of the
        descriptor country) leaves it out."""
        if which == "x":
            return self.signature_member[:, x_group]
        return ~self.disjoint[:, int(self.country_group[y])]

    def __len__(self) -> int:
        return len(self.image_id)

    def shows(self, images: npt.NDArray[np.integer], concepts: npt.NDArray[np.integer]) -> npt.NDArray[np.bool_]:
        """Whether each image shows the matching concept: its own, a tag, or a copy's concept."""
        images, concepts = np.asarray(images, dtype=np.int64), np.asarray(concepts, dtype=np.int64)
        mine = self.concept[images] == concepts
        keys = images * self.concept_stride + concepts
        at = np.searchsorted(self.extra_keys, keys)
        found = at < len(self.extra_keys)
        found[found] = self.extra_keys[at[found]] == keys[found]
        shown: npt.NDArray[np.bool_] = mine | (found & (concepts < self.concept_stride))
        return shown


def pack_catalog(image_table: pa.Table, pack: ReferencePack) -> Catalog:
    """The catalog of an image table, its countries in the pack's order and with the pack's languages."""
    languages = {c.name: [(lang.code, lang.group) for lang in c.languages] for c in pack.countries}
    return Catalog.from_table(image_table, [c.name for c in pack.countries], languages)


def _country_languages(
    table: pa.Table, names: list[str], given: Mapping[str, Sequence[tuple[str, str]]] | None
) -> dict[str, list[tuple[str, str]]]:
    """Each country's (language, group) pairs: the pack's where it knows the country, else the table's one (a
    scale test's synthetic countries)."""
    out: dict[str, list[tuple[str, str]]] = {n: list(given[n]) for n in set(names) if n in given} if given else {}
    groups = table.column("language_group").to_pylist()
    for name, code, group in zip(names, table.column("language_code").to_pylist(), groups, strict=True):
        if name in out:
            continue
        if "+" in group:
            raise ValueError(f"{name} speaks several languages ({group}): the catalog needs the reference pack's")
        out.setdefault(name, [(code, group)])
    return out


def _extra_concepts(
    concept: npt.NDArray[np.int64], tags: list[list[int]], table: pa.Table, stride: int
) -> dict[int, frozenset[int]]:
    """Per image, the concepts it shows besides its own: its tags, and every concept found for an image with the
    same bytes or the same decoded pixels (dedup is per concept, so such copies can sit under several)."""
    extra: dict[int, set[int]] = {}
    for i, image_tags in enumerate(tags):
        others = set(image_tags) - {int(concept[i])}
        if others:
            extra[i] = others
    columns = [c for c in ("sha256", "pixel_sha256") if c in table.column_names]
    for column in columns:
        members: dict[str, list[int]] = {}
        for i, value in enumerate(table.column(column).to_pylist()):
            if value is not None:
                members.setdefault(value, []).append(i)
        for rows in members.values():
            if len(rows) < 2:
                continue
            shown = {int(concept[i]) for i in rows}
            for i in rows:
                others = shown - {int(concept[i])}
                if others:
                    extra.setdefault(i, set()).update(others)
    return {i: frozenset(c for c in s if c < stride) for i, s in extra.items()}


def in_pool(
    catalog: Catalog,
    slot: Slot,
    candidates: npt.NDArray[np.integer],
    concept: npt.NDArray[np.integer],
    x: npt.NDArray[np.integer],
    y: npt.NDArray[np.integer] | None = None,
    x_group: npt.NDArray[np.integer] | None = None,
) -> npt.NDArray[np.bool_]:
    """For arrays of (candidate, query concept, query country X[, descriptor country Y], the query language's group
    (default: X's one group)), whether each candidate is eligible for the slot: the rule, evaluated for a whole
    column at once."""
    cat = catalog
    candidates = np.asarray(candidates, dtype=np.int64)
    if x_group is None:
        x_group = np.array([cat.country_queries[int(c)][0][1] for c in np.asarray(x)], dtype=np.int64)
    country = cat.country[candidates]
    ok: npt.NDArray[np.bool_] = {
        "cell_x": (cat.concept[candidates] == concept) & (country == x),
        "cell_y": (cat.concept[candidates] == concept) & (country == y),
        "concept": cat.concept[candidates] == concept,
        "country_x": country == x,
        "country_y": country == y,
        "all": np.ones(len(candidates), dtype=bool),
    }[slot.partition]
    for which in slot.excluded_groups:
        if which == "x":  # no language of the candidate's country in the query's language group
            ok &= ~cat.signature_member[cat.group[candidates], np.asarray(x_group, dtype=np.int64)]
        else:  # no group shared with the descriptor country
            assert y is not None
            ok &= cat.disjoint[cat.group[candidates], cat.country_group[np.asarray(y, dtype=np.int64)]]
    if slot.not_showing:
        ok &= ~cat.shows(candidates, concept)
    return ok


class PoolCounts:
    """How many images each kind of pool holds, per concept: enough to tell, without the index, whether a slot has
    any candidate at all (the pools do not depend on usage), for one query or a whole column."""

    def __init__(self, catalog: Catalog) -> None:
        cat = catalog
        self.catalog = cat
        self.concepts, concept_index = np.unique(cat.concept, return_inverse=True)
        self.concept_index = concept_index
        n_countries, n_groups = len(cat.country_names), len(cat.group_names)
        k = len(self.concepts)
        self.cell = np.zeros((k, n_countries), dtype=np.int64)  # images of concept c in country x
        np.add.at(self.cell, (concept_index, cat.country), 1)
        per_country = np.bincount(cat.country, minlength=n_countries)
        shows = self.cell.copy()  # images of each country that show concept c: its own, tags, copies
        for image, concepts in cat.extra.items():
            for c in concepts:
                at = np.searchsorted(self.concepts, c)
                if at < k and self.concepts[at] == c:
                    shows[at, cat.country[image]] += 1
        self.not_showing = per_country[None, :] - shows  # per concept and country
        to_group = np.zeros((n_countries, n_groups), dtype=np.int64)
        to_group[np.arange(n_countries), cat.country_group] = 1
        self.concept_by_group = self.cell @ to_group
        self.not_showing_by_group = self.not_showing @ to_group

    def index_of(self, concept: int) -> int:
        return int(np.searchsorted(self.concepts, concept))

    def rq2_empty_slot(self, c: int, x: int, x_group: int | None = None) -> str | None:
        """The first RQ2 slot (in column order) with no candidate for a query of concept c from country x, in the
        language of group `x_group` (default: x's one)."""
        cat, k = self.catalog, self.index_of(c)
        outside = ~cat.signature_member[:, cat.country_queries[x][0][1] if x_group is None else x_group]
        sizes = {
            "correct": self.concept_by_group[k][outside].sum(),
            "language_biased": self.not_showing[k, x],
            "irrelevant": self.not_showing_by_group[k][outside].sum(),
        }
        return next((slot.name for slot in RQ2_RULES if sizes[slot.name] == 0), None)

    def descriptor_countries(self, c: int, x: int, x_group: int | None = None) -> npt.NDArray[np.intp]:
        """The countries Y outside the query's language group for which all six RQ3 slots have a candidate, in
        country order."""
        cat, k = self.catalog, self.index_of(c)
        gx = cat.country_queries[x][0][1] if x_group is None else x_group
        outside = ~cat.signature_member[:, gx]  # per signature
        # Z: per Y, the signatures outside the query's group that share no group with Y
        pools = outside[:, None] & cat.disjoint[:, cat.country_group]
        same = cat.signature_member[cat.country_group, gx]  # Y speaks a language of the query's group
        ok = (
            ~same
            & (self.cell[k] > 0)  # correct: the concept from Y
            & (self.cell[k, x] > 0)  # the concept from X
            & (self.concept_by_group[k] @ pools > 0)  # the concept from Z
            & (self.not_showing[k] > 0)  # from Y, not the concept
            & (self.not_showing[k, x] > 0)  # from X, not the concept
            & (self.not_showing_by_group[k] @ pools > 0)  # neither
        )
        return np.flatnonzero(ok)


class DescriptorBalance:
    """How often each RQ3 descriptor country Y was chosen: per query concept first, then overall.

    Balancing per concept spreads the queries of one concept over the countries whose images of that concept
    serve as the correct answer, so no small pool is reused much more than the others.
    """

    def __init__(self, countries: int) -> None:
        self.countries = countries
        self.per_concept: dict[int, npt.NDArray[np.int64]] = {}
        self.overall = np.zeros(countries, dtype=np.int64)

    def _counts(self, concept: int) -> npt.NDArray[np.int64]:
        return self.per_concept.get(concept, np.zeros(self.countries, dtype=np.int64))

    def choose(self, concept: int, eligible: npt.NDArray[np.integer], priority: npt.NDArray[np.int64]) -> int:
        """The eligible country used least for this concept, then least overall, then first in seeded order."""
        order = np.lexsort((priority[eligible], self.overall[eligible], self._counts(concept)[eligible]))
        return int(eligible[order[0]])

    def is_least_used(self, concept: int, y: int, eligible: npt.NDArray[np.integer]) -> bool:
        counts = self._counts(concept)
        keys = counts[eligible] * (self.overall.max() + 2) + self.overall[eligible]
        return bool(counts[y] * (self.overall.max() + 2) + self.overall[y] == keys.min())

    def record(self, concept: int, y: int) -> None:
        self.per_concept.setdefault(concept, np.zeros(self.countries, dtype=np.int64))[y] += 1
        self.overall[y] += 1


def seeded_priority(n: int, seed: int) -> npt.NDArray[np.int64]:
    """The tie-break order of the least-used choice: a seeded permutation, so a seed always gives one benchmark."""
    return np.random.default_rng(seed).permutation(n).astype(np.int64)
