"""Assembly: the image table, the RQ2 triplets and the RQ3 sextets (3XCM paper §3.2.2-3.2.3).

Each kept image yields one RQ2 query (its concept, in its country's language) and one RQ3 query ("{concept} of
{Y}" in that language). Every candidate is the least-used image of its eligible pool at the moment it is chosen,
ties broken by a seeded permutation, so reuse stays balanced and a seed always gives the same benchmark.
A query that cannot be filled is recorded in the `unassembled` table with the slot that had no candidate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from curation.rules import (
    RQ2_RULES,
    RQ3_RULES,
    Catalog,
    DescriptorBalance,
    PoolCache,
    eligible_descriptor_countries,
    least_used,
)
from data import reference
from data.schemas import BENCHMARK, BENCHMARK_CD, RQ2_SLOTS, UNASSEMBLED, from_rows


class AssemblyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seed: int = Field(default=0, description="Seed of the tie-break order; the same seed gives the same benchmark.")
    rq3: bool = Field(default=True, description="Also assemble the RQ3 cultural-descriptor sextets.")
    max_candidate_reuse: int | None = Field(
        default=None,
        ge=1,
        description="When set, the validator fails a build whose candidate reuse exceeds it.",
    )


@dataclass
class Assembly:
    benchmark: pa.Table
    benchmark_cd: pa.Table
    unassembled: pa.Table
    reuse: dict[str, dict[str, float]]


class QueryTexts:
    """Query strings in the query country's language, from the translations table."""

    def __init__(self, translations: pa.Table) -> None:
        self._text: dict[tuple[int, str], str] = {}
        self._template: dict[tuple[int, str], str] = {}
        for row in translations.to_pylist():
            key = (row["concept_id"], row["language_code"])
            self._text[key] = row["text"]
            self._template[key] = row["descriptor_template"]

    def rq2(self, concept_id: int, country: str) -> tuple[str, str]:
        code = reference.country_by_name()[country].language_code
        return code, self._text[(concept_id, code)]

    def rq3(self, concept_id: int, country: str, descriptor_country: str) -> tuple[str, str]:
        code = reference.country_by_name()[country].language_code
        y_form = reference.language_pack(code).countries[descriptor_country].descriptor_country
        return code, self._template[(concept_id, code)].format(concept=self._text[(concept_id, code)], country=y_form)


def seeded_priority(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).permutation(n).astype(np.int64)


def candidate_columns(catalog: Catalog, prefix: str, index: int) -> dict:
    return {
        f"{prefix}index": index,
        f"{prefix}image_id": catalog.image_id[index],
        f"{prefix}concept": catalog.concept_name[index],
        f"{prefix}country": catalog.country_names[int(catalog.country[index])],
    }


def query_columns(catalog: Catalog, index: int) -> dict:
    return {
        "query_index": index,
        "query_image_id": catalog.image_id[index],
        "query_concept": catalog.concept_name[index],
        "query_country": catalog.country_names[int(catalog.country[index])],
    }


def reuse_summary(usage: np.ndarray) -> dict[str, float]:
    used = usage[usage > 0]
    return {
        "candidates_used": len(used),
        "max_reuse": int(used.max()) if len(used) else 0,
        "mean_reuse": float(used.mean()) if len(used) else 0.0,
    }


def assemble_rq2(catalog: Catalog, texts: QueryTexts, seed: int) -> tuple[list[dict], list[dict], np.ndarray]:
    priority = seeded_priority(len(catalog), seed)
    usage = np.zeros(len(catalog), dtype=np.int64)
    cache = PoolCache(catalog, RQ2_RULES)
    rows, missing = [], []
    for q_index in range(len(catalog)):
        query = catalog.query_for(q_index)
        pools = {slot: cache.pool(slot, query) for slot, _ in RQ2_SLOTS}
        empty = [slot for slot, pool in pools.items() if len(pool) == 0]
        if empty:
            missing.append(_missing("rq2", catalog, q_index, f"no_{empty[0]}_candidate"))
            continue
        row = query_columns(catalog, q_index)
        for slot, prefix in RQ2_SLOTS:
            chosen = least_used(pools[slot], usage, priority)
            usage[chosen] += 1
            row.update(candidate_columns(catalog, prefix, chosen))
        language, text = texts.rq2(query.concept, row["query_country"])
        row.update(query_concept_id=query.concept, query_language=language, query_text=text)
        rows.append(row)
    return rows, missing, usage


def assemble_rq3(catalog: Catalog, texts: QueryTexts, seed: int) -> tuple[list[dict], list[dict], np.ndarray]:
    priority = seeded_priority(len(catalog), seed + 1)
    country_priority = seeded_priority(len(catalog.country_names), seed + 2)
    usage = np.zeros(len(catalog), dtype=np.int64)
    balance = DescriptorBalance(len(catalog.country_names))
    cache = PoolCache(catalog, RQ3_RULES)
    rows, missing = [], []
    for q_index in range(len(catalog)):
        base = catalog.query_for(q_index)
        eligible = np.array(eligible_descriptor_countries(cache, base), dtype=np.int64)
        if len(eligible) == 0:
            missing.append(_missing("rq3", catalog, q_index, "no_descriptor_country"))
            continue
        y = balance.choose(base.concept, eligible, country_priority)
        balance.record(base.concept, y)
        query = catalog.query_for(q_index, descriptor_country=y)
        row = query_columns(catalog, q_index)
        row["descriptor_country"] = catalog.country_names[y]
        for slot in RQ3_RULES:
            chosen = least_used(cache.pool(slot, query), usage, priority)
            usage[chosen] += 1
            row.update(candidate_columns(catalog, f"{slot}_candidate_", chosen))
        language, text = texts.rq3(query.concept, row["query_country"], row["descriptor_country"])
        row.update(query_concept_id=query.concept, query_language=language, query_text=text)
        rows.append(row)
    return rows, missing, usage


def _missing(task: str, catalog: Catalog, index: int, reason: str) -> dict:
    return {"task": task, "query_index": index, "query_image_id": catalog.image_id[index], "reason": reason}


def run_assembly(config: AssemblyConfig, image_table: pa.Table, translations: pa.Table) -> Assembly:
    catalog = Catalog.from_table(image_table)
    texts = QueryTexts(translations)
    rq2_rows, rq2_missing, rq2_usage = assemble_rq2(catalog, texts, config.seed)
    if config.rq3:
        rq3_rows, rq3_missing, rq3_usage = assemble_rq3(catalog, texts, config.seed)
    else:
        rq3_rows, rq3_missing, rq3_usage = [], [], np.zeros(0, dtype=np.int64)
    return Assembly(
        benchmark=from_rows(rq2_rows, BENCHMARK),
        benchmark_cd=from_rows(rq3_rows, BENCHMARK_CD),
        unassembled=from_rows(rq2_missing + rq3_missing, UNASSEMBLED),
        reuse={"rq2": reuse_summary(rq2_usage), "rq3": reuse_summary(rq3_usage)},
    )
