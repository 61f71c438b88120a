"""Assembly: the RQ2 triplets and the RQ3 sextets over the image table (3XCM paper §3.2.2-3.2.3).

Each kept image yields one RQ2 query (its concept, in its country's language) and one RQ3 query ("{concept} of
{Y}" in that language). Every candidate is the least-used image of its eligible pool at the moment it is chosen,
ties broken by a seeded permutation, so reuse stays balanced and a seed always gives the same benchmark. The pools
are the rules of `curation.rules`, searched through `curation.pool_index` (O(log n) per choice). A query that cannot
be filled is recorded in the `unassembled` table with the slot that had no candidate.

Queries can be kept as they are (`keep`: query row -> its candidates, counted as used but not chosen again), which
is how `culturebench reassemble` repairs an existing benchmark while keeping every row that already obeys the rules.
A kept row may leave slots open (`None`): only those are chosen, least-used as any other, which is how
`culturebench takedown` replaces the candidates it removed (`curation/takedown.py`); RQ3 rows are kept with their
descriptor country. The slots of a task draw from disjoint pools, so filling one never changes another's choice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Protocol

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from curation.pool_index import NO_IMAGE, PoolIndex
from curation.rules import (
    RQ2_RULES,
    RQ3_RULES,
    Catalog,
    DescriptorBalance,
    PoolCounts,
    pack_catalog,
    seeded_priority,
)
from data.process_pool import run_apart
from data.progress import StepProgress, ticking
from data.reference import ReferencePack
from data.schemas import BENCHMARK, BENCHMARK_CD, RQ2_SLOTS, UNASSEMBLED

RQ2_PREFIXES = dict(RQ2_SLOTS)  # our slot name -> the authors' column prefix
RQ3_PREFIXES = {slot.name: f"{slot.name}_candidate_" for slot in RQ3_RULES}


class AssemblyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seed: int = Field(default=0, description="Seed of the tie-break order; the same seed gives the same benchmark.")
    rq3: bool = Field(default=True, description="Also assemble the RQ3 cultural-descriptor sextets.")
    max_candidate_reuse: int | None = Field(
        default=None,
        ge=1,
        description="When set, the validator fails a build whose candidate reuse exceeds it.",
    )


class Texts(Protocol):
    """Where the query strings come from: (language code, text) of a query. `QueryTexts` from the translations; a
    takedown's repair reads the texts its release already holds (`curation.takedown.ReleasedTexts`)."""

    def rq2(self, concept_id: int, country: str, language: str) -> tuple[str, str]: ...

    def rq3(self, concept_id: int, country: str, descriptor_country: str, language: str) -> tuple[str, str]: ...


@dataclass
class Assembly:
    benchmark: pa.Table
    benchmark_cd: pa.Table
    unassembled: pa.Table
    reuse: dict[str, dict[str, float]]


class QueryTexts:
    """Query strings in the query country's language, from the translations table.

    `languages` (country -> language code) and `descriptor_name` ((language, country) -> the country's form inside
    the RQ3 template) come from the reference `pack`, or are given (a scale test's synthetic countries)."""

    def __init__(
        self,
        translations: pa.Table,
        pack: ReferencePack | None = None,
        languages: Mapping[str, str] | None = None,
        descriptor_name: Callable[[str, str], str] | None = None,
    ) -> None:
        self._text: dict[tuple[int, str], str] = {}
        self._template: dict[tuple[int, str], str] = {}
        for row in translations.select(["concept_id", "language_code", "text", "descriptor_template"]).to_pylist():
            key = (row["concept_id"], row["language_code"])
            self._text[key] = row["text"]
            self._template[key] = row["descriptor_template"]
        if pack is not None:
            languages = languages or {c.name: c.language_code for c in pack.countries}
            descriptor_name = descriptor_name or (
                lambda code, country: pack.language_pack(code).countries[country].descriptor_country
            )
        if languages is None or descriptor_name is None:
            raise TypeError("QueryTexts needs a reference pack, or both `languages` and `descriptor_name`")
        self._languages = languages
        self._descriptor_name = descriptor_name

    def language(self, country: str) -> str:
        """The country's primary language (a query's own language is given where its country has several)."""
        return self._languages[country]

    def rq2(self, concept_id: int, country: str, language: str | None = None) -> tuple[str, str]:
        code = language or self.language(country)
        return code, self._text[(concept_id, code)]

    def rq3(
        self, concept_id: int, country: str, descriptor_country: str, language: str | None = None
    ) -> tuple[str, str]:
        code = language or self.language(country)
        y_form = self._descriptor_name(code, descriptor_country)
        return code, self._template[(concept_id, code)].format(concept=self._text[(concept_id, code)], country=y_form)


@dataclass
class TaskResult:
    """One task's choices, as arrays: the queries that were assembled, their candidates (one column per slot),
    the RQ3 descriptor country of each, the queries that could not be, and each image's final usage."""

    queries: npt.NDArray[
        np.int64
    ]  # int64 query ids (`Catalog.query_ids`: image rows where each country has one language)
    candidates: npt.NDArray[np.int64]  # int64, (queries, slots)
    descriptors: npt.NDArray[np.int64]  # int64 country positions (RQ3); empty for RQ2
    missing: list[tuple[int, str]]  # (query id, reason)
    usage: npt.NDArray[np.int64]


def assemble_rq2(
    catalog: Catalog,
    counts: PoolCounts,
    seed: int,
    keep: Mapping[int, tuple[int | None, ...]] | None = None,
    queries_of: npt.NDArray[np.integer] | None = None,
    progress: StepProgress | None = None,
    shared: tuple[int, int] | None = None,
) -> TaskResult:
    """`queries_of`: the query ids to assemble (default: every image in each language of its country), in the order
    they are assembled. `keep`: query id -> its candidates, `None` for a slot to choose. `progress` counts queries;
    `shared` (start, of) puts them on a bar both tasks share."""
    index = PoolIndex(catalog, seeded_priority(len(catalog), seed))
    empty_slot: dict[tuple[int, int, int], str | None] = {}
    queries, chosen, missing = [], [], []
    for q in _ticking_queries(catalog, queries_of, progress, shared):
        row = catalog.query_row(q)
        c, x, gx = int(catalog.concept[row]), int(catalog.country[row]), catalog.query_language(q)[1]
        held = keep.get(q) if keep is not None else None
        picks: list[int]
        if held is not None and None not in held:
            picks = [image for image in held if image is not None]  # all of them
            for pick in picks:  # kept as they are, but they count towards every later choice
                index.use(pick)
        else:
            if (c, x, gx) not in empty_slot:
                empty_slot[(c, x, gx)] = counts.rq2_empty_slot(c, x, gx)
            if empty_slot[(c, x, gx)] is not None:
                missing.append((q, f"no_{empty_slot[(c, x, gx)]}_candidate"))
                continue
            picks = []
            for slot, image in zip(RQ2_RULES, held or (None,) * len(RQ2_RULES), strict=True):
                picks.append(index.least_used(slot, c, x, x_group=gx) if image is None else image)
                index.use(picks[-1])
        queries.append(q)
        chosen.append(picks)
    return _result(index, queries, chosen, [], missing, len(RQ2_RULES))


def assemble_rq3(
    catalog: Catalog,
    counts: PoolCounts,
    seed: int,
    queries_of: npt.NDArray[np.integer] | None = None,
    keep: Mapping[int, tuple[int, tuple[int | None, ...]]] | None = None,
    progress: StepProgress | None = None,
    shared: tuple[int, int] | None = None,
) -> TaskResult:
    """`keep`: query id -> (descriptor country position, its candidates with `None` for a slot to choose). A kept
    row whose open slot has no eligible image under its descriptor country is missing (`no_<slot>_candidate`)."""
    index = PoolIndex(catalog, seeded_priority(len(catalog), seed + 1))
    country_priority = seeded_priority(len(catalog.country_names), seed + 2)
    balance = DescriptorBalance(len(catalog.country_names))
    eligible_of: dict[tuple[int, int, int], npt.NDArray[np.intp]] = {}
    queries, chosen, descriptors, missing = [], [], [], []
    for q in _ticking_queries(catalog, queries_of, progress, shared):
        row = catalog.query_row(q)
        c, x, gx = int(catalog.concept[row]), int(catalog.country[row]), catalog.query_language(q)[1]
        if keep is not None and q in keep:
            y, held = keep[q]
            # The pools are disjoint: every open slot is decided before anything is counted as used.
            picks = [index.least_used(slot, c, x, y, gx) if image is None else image
                     for slot, image in zip(RQ3_RULES, held, strict=True)]  # fmt: skip
            empty = [slot.name for slot, image in zip(RQ3_RULES, picks, strict=True) if image == NO_IMAGE]
            if empty:
                missing.append((q, f"no_{empty[0]}_candidate"))
                continue
            balance.record(c, y)
            for image in picks:
                index.use(image)
            queries.append(q)
            chosen.append(picks)
            descriptors.append(y)
            continue
        if (c, x, gx) not in eligible_of:
            eligible_of[(c, x, gx)] = counts.descriptor_countries(c, x, gx)
        eligible = eligible_of[(c, x, gx)]
        if len(eligible) == 0:
            missing.append((q, "no_descriptor_country"))
            continue
        y = balance.choose(c, eligible, country_priority)
        balance.record(c, y)
        picks = []
        for slot in RQ3_RULES:
            image = index.least_used(slot, c, x, y, gx)
            if image == NO_IMAGE:  # cannot happen for an eligible Y; guarded so a bug is loud, not a wrong row
                raise AssertionError(f"rq3 slot {slot.name} empty for an eligible descriptor country")
            index.use(image)
            picks.append(image)
        queries.append(q)
        chosen.append(picks)
        descriptors.append(y)
    return _result(index, queries, chosen, descriptors, missing, len(RQ3_RULES))


def _query_rows(catalog: Catalog, queries_of: npt.NDArray[np.integer] | None) -> list[int]:
    """The query ids to assemble: `queries_of`, or every image's in each language of its country."""
    ids: list[int] = (catalog.query_ids() if queries_of is None else np.asarray(queries_of, dtype=np.int64)).tolist()
    return ids


def _ticking_queries(
    catalog: Catalog,
    queries_of: npt.NDArray[np.integer] | None,
    progress: StepProgress | None,
    shared: tuple[int, int] | None,
) -> Iterator[int]:
    rows = _query_rows(catalog, queries_of)
    start, of = shared or (0, len(rows))
    return ticking(rows, progress, len(rows), start, of)


def _result(
    index: PoolIndex,
    queries: list[int],
    chosen: list[list[int]],
    descriptors: list[int],
    missing: list[tuple[int, str]],
    slots: int,
) -> TaskResult:
    return TaskResult(
        queries=np.array(queries, dtype=np.int64),
        candidates=np.array(chosen, dtype=np.int64).reshape(len(chosen), slots),
        descriptors=np.array(descriptors, dtype=np.int64),
        missing=missing,
        usage=index.usages(),
    )


def _result_of_nothing(slots: int) -> TaskResult:
    none = np.zeros(0, dtype=np.int64)
    return TaskResult(none, np.zeros((0, slots), dtype=np.int64), none, [], none)


def reuse_summary(usage: npt.NDArray[np.integer]) -> dict[str, float]:
    used = usage[usage > 0]
    return {
        "candidates_used": len(used),
        "max_reuse": int(used.max()) if len(used) else 0,
        "mean_reuse": float(used.mean()) if len(used) else 0.0,
    }


def _image_columns(
    catalog: Catalog, prefix: str, rows: npt.NDArray[np.integer], id_column: str | None = None
) -> dict[str, pa.Array]:
    return {
        f"{prefix}index": pa.array(rows, pa.int32()),
        id_column or f"{prefix}image_id": pa.array(catalog.image_id[rows].tolist(), pa.string()),
        f"{prefix}concept": pa.array(catalog.concept_name[rows].tolist(), pa.string()),
        f"{prefix}country": pa.array(
            np.array(catalog.country_names, dtype=object)[catalog.country[rows]].tolist(), pa.string()
        ),
    }


def _texts(
    catalog: Catalog,
    queries: npt.NDArray[np.integer],
    text: Callable[..., tuple[str, str]],
    *extra: npt.NDArray[np.integer],
) -> dict[str, pa.Array]:
    """query_concept_id, query_language and query_text, one lookup per distinct (concept, country[, Y], language)."""
    names = catalog.country_names
    rows = np.asarray(queries, dtype=np.int64) // catalog.languages_per_query
    slot = np.asarray(queries, dtype=np.int64) % catalog.languages_per_query
    keys = [catalog.concept[rows], catalog.country[rows], *extra, slot]
    cache: dict[tuple[int, ...], tuple[str, str]] = {}
    languages, texts = [], []
    for key in zip(*(k.tolist() for k in keys), strict=True):
        if key not in cache:
            language = catalog.country_queries[key[1]][key[-1]][0]
            cache[key] = text(key[0], names[key[1]], *(names[k] for k in key[2:-1]), language)
        languages.append(cache[key][0])
        texts.append(cache[key][1])
    return {
        "query_concept_id": pa.array(catalog.concept[rows], pa.int32()),
        "query_language": pa.array(languages, pa.string()),
        "query_text": pa.array(texts, pa.string()),
    }


def benchmark_table(catalog: Catalog, texts: Texts, result: TaskResult) -> pa.Table:
    columns = _image_columns(catalog, "query_", result.queries // catalog.languages_per_query, "query_image_id")
    for position, slot in enumerate(RQ2_RULES):
        columns |= _image_columns(catalog, RQ2_PREFIXES[slot.name], result.candidates[:, position])
    columns |= _texts(catalog, result.queries, texts.rq2)
    return pa.table(columns, schema=BENCHMARK)


def benchmark_cd_table(catalog: Catalog, texts: Texts, result: TaskResult) -> pa.Table:
    columns = _image_columns(catalog, "query_", result.queries // catalog.languages_per_query, "query_image_id")
    countries = np.array(catalog.country_names, dtype=object)
    columns["descriptor_country"] = pa.array(countries[result.descriptors].tolist(), pa.string())
    for position, slot in enumerate(RQ3_RULES):
        columns |= _image_columns(catalog, RQ3_PREFIXES[slot.name], result.candidates[:, position])
    columns |= _texts(catalog, result.queries, texts.rq3, result.descriptors)
    return pa.table(columns, schema=BENCHMARK_CD)


def unassembled_table(catalog: Catalog, missing: dict[str, list[tuple[int, str]]]) -> pa.Table:
    """One row per query that could not be assembled; the query's language follows its reason in brackets
    (`no_correct_candidate [qu]`) where its country has several."""
    rows = [(task, q, with_language(catalog, q, reason)) for task, items in missing.items() for q, reason in items]
    indexes = np.array([catalog.query_row(q) for _, q, _ in rows], dtype=np.int64)
    return pa.table(
        {
            "task": pa.array([task for task, _, _ in rows], pa.string()),
            "query_index": pa.array(indexes, pa.int32()),
            "query_image_id": pa.array(catalog.image_id[indexes].tolist(), pa.string()),
            "reason": pa.array([reason for _, _, reason in rows], pa.string()),
        },
        schema=UNASSEMBLED,
    )


def with_language(catalog: Catalog, query: int, reason: str) -> str:
    row = catalog.query_row(query)
    if len(catalog.country_queries[int(catalog.country[row])]) < 2:
        return reason
    return f"{reason} [{catalog.query_language(query)[0]}]"


def assemble_catalog(
    config: AssemblyConfig,
    catalog: Catalog,
    texts: QueryTexts,
    keep: Mapping[int, tuple[int, ...]] | None = None,
    queries_of: npt.NDArray[np.integer] | None = None,
    progress: StepProgress | None = None,
    apart: bool = False,
) -> Assembly:
    """Both tasks over `catalog`; `keep` and `queries_of` as in `assemble_rq2` (RQ3 has no rows to keep).
    `progress` counts the queries of both tasks on one bar. `apart`: RQ3 is assembled in a worker process while RQ2
    is here, on the other core (each task has its own index, so neither sees the other's choices); the bar then
    counts RQ2's queries."""
    counts = PoolCounts(catalog)
    n = len(_query_rows(catalog, queries_of))
    of = n * (2 if config.rq3 and not apart else 1)
    rq3_apart = None
    if config.rq3 and apart:
        rq3_apart = run_apart(partial(assemble_rq3, catalog, counts, config.seed, queries_of), "the RQ3 assembly")
    rq2 = assemble_rq2(catalog, counts, config.seed, keep, queries_of, progress=progress, shared=(0, of))
    if rq3_apart is not None:
        rq3 = rq3_apart()
    elif config.rq3:
        rq3 = assemble_rq3(catalog, counts, config.seed, queries_of, progress=progress, shared=(n, of))
    else:
        rq3 = _result_of_nothing(len(RQ3_RULES))
    return Assembly(
        benchmark=benchmark_table(catalog, texts, rq2),
        benchmark_cd=benchmark_cd_table(catalog, texts, rq3),
        unassembled=unassembled_table(catalog, {"rq2": rq2.missing, "rq3": rq3.missing}),
        reuse={"rq2": reuse_summary(rq2.usage), "rq3": reuse_summary(rq3.usage)},
    )


def run_assembly(
    config: AssemblyConfig,
    image_table: pa.Table,
    translations: pa.Table,
    pack: ReferencePack,
    progress: StepProgress | None = None,
    apart: bool = False,
) -> Assembly:
    catalog = pack_catalog(image_table, pack)
    return assemble_catalog(config, catalog, QueryTexts(translations, pack), progress=progress, apart=apart)
