"""The indexed assembler chooses exactly what a mask over the whole catalog per query would choose, and the
columnar validator agrees with it, on random catalogs, on countries the reference data does not know, and with
queries kept as they were."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import curation.pool_index as pool_index
from curation.assemble import AssemblyConfig, QueryTexts, assemble_catalog, run_assembly
from curation.pool_index import NO_IMAGE, SKIP_LIMIT, PoolIndex
from curation.rules import RQ2_RULES, Catalog, seeded_priority
from curation.validate import validate_benchmark
from data.reference import default_pack
from data.schemas import CATALOG, RQ2_SLOTS
from tests.curation.test_assembly import catalogs, translations_for
from tests.support.assembly_oracle import RQ3, Oracle

COUNTRY_ORDER = [c.name for c in default_pack().countries]


def _chosen(result) -> tuple[dict, dict]:
    rq2 = {r["query_index"]: tuple(r[f"{p}index"] for _, p in RQ2_SLOTS) for r in result.benchmark.to_pylist()}
    rq3 = {
        r["query_index"]: (r["descriptor_country"], tuple(r[f"{s}_candidate_index"] for s in RQ3))
        for r in result.benchmark_cd.to_pylist()
    }
    return rq2, rq3


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(catalogs(), st.integers(0, 3))
def test_the_index_chooses_what_a_mask_per_query_chooses(catalog: pa.Table, seed: int) -> None:
    result = run_assembly(AssemblyConfig(seed=seed), catalog, translations_for(catalog), default_pack())
    assert _chosen(result) == Oracle(catalog).assemble(seed)


SHARED_GROUP = {f"Synthland {k}": "en" for k in "ABCDEFGHIJKL"} | {"USA": "en", "Spain": "es", "Japan": "ja"}


@pytest.mark.parametrize(
    ("groups", "skip_limit"),
    [
        ({"USA": "en", "UK": "en", "Spain": "es", "Argentina": "es", "Japan": "ja", "Kenya": "sw"}, SKIP_LIMIT),
        # Most countries in one group, and walks that switch to the per-group lists at once or never.
        (SHARED_GROUP, 0),
        (SHARED_GROUP, 10**9),
        (SHARED_GROUP, SKIP_LIMIT),
    ],
)
def test_the_index_finds_the_least_used_eligible_image_as_usage_grows(
    groups: dict[str, str], skip_limit: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pool's least-used member, checked against a direct minimum after every use, over thousands of uses."""
    monkeypatch.setattr(pool_index, "SKIP_LIMIT", skip_limit)
    rng = np.random.default_rng(3)
    n, countries = 400, list(groups)
    table = _table(
        [
            (countries[int(rng.integers(len(countries)))], int(rng.integers(5)), [int(rng.integers(5))])
            for _ in range(n)
        ],
        groups,
    )
    catalog = Catalog.from_table(table, COUNTRY_ORDER)
    priority = seeded_priority(n, 1)
    index = PoolIndex(catalog, priority)
    usage = np.zeros(n, dtype=np.int64)
    for step in range(3000):
        slot = RQ2_RULES[step % 3]
        c, x = int(rng.integers(5)), int(rng.integers(len(catalog.country_names)))
        gx = catalog.country_group[x]
        shows = np.array([catalog.concept[i] == c or c in catalog.extra.get(i, ()) for i in range(n)])
        mask = {
            "correct": (catalog.concept == c) & (catalog.group != gx),
            "language_biased": (catalog.country == x) & ~shows,
            "irrelevant": (catalog.group != gx) & ~shows,
        }[slot.name]
        pool = np.flatnonzero(mask)
        got = index.least_used(slot, c, x)
        if len(pool) == 0:
            assert got == NO_IMAGE
            continue
        assert got == int(pool[np.lexsort((priority[pool], usage[pool]))[0]])
        index.use(got)
        usage[got] += 1
        assert index.usage(got) == usage[got]


def _table(images: list[tuple[str, int, list[int]]], groups: dict[str, str]) -> pa.Table:
    """A catalog over any countries (a scale test's synthetic ones included), in catalog order."""
    rows = []
    ordered = sorted(images, key=lambda im: (im[1], im[0]))
    for position, (country, concept, tags) in enumerate(ordered):
        rank = 1 + sum(1 for other in ordered[:position] if other[:2] == (country, concept))
        rows.append(
            {
                "index_in_dataset": position,
                "image_id": f"{country.lower()}-{concept}-{rank}-eng",
                "concept_id": concept,
                "concept": f"concept {concept}",
                "concept_in_native": f"concept {concept} ({country})",
                "concept_country": f"concept {concept} {country}",
                "country": country,
                "language_code": groups[country],
                "language_group": groups[country],
                "title": None,
                "query": f"concept {concept} {country}",
                "query_lang": "eng",
                "rank": rank,
                "url": "x",
                "source_page": None,
                "sha256": f"{position:064x}",
                "pixel_sha256": None,
                "num_bytes": 1,
                "width": 1,
                "height": 1,
                "format": "JPEG",
                "tags": sorted({concept, *tags}),
                "tagger": "test",
            }
        )
    return pa.Table.from_pylist(rows, schema=CATALOG)


def _synthetic_texts(table: pa.Table) -> tuple[pa.Table, QueryTexts]:
    languages = dict(zip(table["country"].to_pylist(), table["language_code"].to_pylist(), strict=True))
    translations = pa.Table.from_pylist(
        [
            {
                "concept_id": c,
                "language_code": code,
                "text": f"c{c}/{code}",
                "descriptor_template": "{concept} of {country}",
            }
            for c in set(table["concept_id"].to_pylist())
            for code in set(languages.values())
        ]
    )
    return translations, QueryTexts(
        translations, languages=languages, descriptor_name=lambda code, country: f"{country}@{code}"
    )


@pytest.mark.slow
def test_countries_outside_the_reference_data_assemble_and_validate() -> None:
    """A scale test's 40 synthetic countries in 25 groups: groups and languages come from the table itself."""
    rng = np.random.default_rng(0)
    groups = {f"Country{k:02d}": f"lang{k % 25:02d}" for k in range(40)}
    names = sorted(groups)
    images = [(names[int(rng.integers(40))], int(rng.integers(30)), [int(rng.integers(30))]) for _ in range(700)]
    table = _table(images, groups)
    translations, texts = _synthetic_texts(table)
    result = assemble_catalog(AssemblyConfig(seed=2), Catalog.from_table(table, COUNTRY_ORDER), texts)
    assert result.benchmark.num_rows > 500 and result.benchmark_cd.num_rows > 500
    assert _chosen(result) == Oracle(table).assemble(2)
    report = validate_benchmark(
        table,
        result.benchmark,
        result.benchmark_cd,
        translations,
        unassembled=result.unassembled,
        texts=texts,
        pack=default_pack(),
    )
    assert report.ok, report.summary()
    assert result.benchmark["query_text"][0].as_py().startswith("c")


def test_kept_queries_stay_and_count_towards_every_later_choice() -> None:
    groups = {"USA": "en", "Spain": "es", "Japan": "ja", "Kenya": "sw"}
    rng = np.random.default_rng(5)
    images = [(list(groups)[int(rng.integers(4))], int(rng.integers(4)), []) for _ in range(200)]
    table = _table(images, groups)
    catalog = Catalog.from_table(table, COUNTRY_ORDER)
    _, texts = _synthetic_texts(table)
    free = assemble_catalog(AssemblyConfig(seed=0, rq3=False), catalog, texts)
    first = free.benchmark.slice(0, 5).to_pylist()
    keep = {
        row["query_index"]: tuple(row[f"{prefix}index"] for _, prefix in RQ2_SLOTS) for row in first
    }  # rows as they were
    # Keep a row with other (still valid) candidates: the later rows must see those images as used.
    swapped = dict(keep)
    q0 = first[0]["query_index"]
    swapped[q0] = (keep[q0][0], keep[q0][1], first[1]["non_relevant_candidate_index"])
    result = assemble_catalog(AssemblyConfig(seed=0, rq3=False), catalog, texts, keep=swapped)
    rows = {r["query_index"]: r for r in result.benchmark.to_pylist()}
    assert tuple(rows[q0][f"{p}index"] for _, p in RQ2_SLOTS) == swapped[q0]
    usage = np.bincount(
        np.concatenate([result.benchmark[f"{p}index"].to_numpy() for _, p in RQ2_SLOTS]), minlength=len(catalog)
    )
    assert result.reuse["rq2"]["max_reuse"] == usage.max()
