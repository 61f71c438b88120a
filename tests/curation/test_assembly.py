"""Assembler and validator invariants, checked on random catalogs by rules restated here in plain Python."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors.concepts import ShippedConceptsConfig, run_concepts
from collectors.translations import ShippedTranslationsConfig, run_translations
from curation.assemble import AssemblyConfig, run_assembly
from curation.rules import RQ3_RULES
from curation.validate import validate_benchmark
from data.reference import default_pack
from data.schemas import CATALOG, RQ2_SLOTS, RQ3_SLOTS
from tests.support.catalog_rows import catalog_row

COUNTRY_NAMES = [c.name for c in default_pack().countries]
AIRLINES, ANCIENT_PAINTING, DANCE, TRAIN = (
    default_pack().concept_by_name()[name].concept_id for name in ("airlines", "ancient painting", "dance", "train")
)
CONCEPT_IDS = [AIRLINES, ANCIENT_PAINTING, DANCE, TRAIN]


def group(country: str) -> str:
    return default_pack().country_by_name()[country].language_group


def make_catalog(
    images: list[tuple[str, int, frozenset[int]]],
    copies: list[tuple[int, int]] = (),  # type: ignore[assignment]
) -> pa.Table:
    """Rows in catalog order from (country, concept_id, extra tags); each (a, b) of `copies` gives row b the bytes
    of row a (a copy filed under whatever concept b has), leaving the tags as they are."""
    order = {name: i for i, name in enumerate(COUNTRY_NAMES)}
    ranks: Counter = Counter()
    rows = []
    for country, concept_id, extra in sorted(images, key=lambda x: (x[1], order[x[0]])):
        ranks[(country, concept_id)] += 1
        rank = ranks[(country, concept_id)]  # 1-based, as the authors' ranks are
        slug = default_pack().country_by_name()[country].slug
        tags = [concept_id, *sorted(extra - {concept_id})]
        image_id = f"{slug}-{concept_id}-{rank}-eng"
        rows.append(catalog_row(len(rows), image_id, country, concept_id, rank, tags, "test"))
    for a, b in copies:
        rows[b % len(rows)]["sha256"] = rows[a % len(rows)]["sha256"]
    return pa.Table.from_pylist(rows, schema=CATALOG)


def shows(image: dict, concept: int, images: list[dict]) -> bool:
    """The image shows the concept: tagged with it, or the same bytes as an image of it."""
    return concept in image["tags"] or any(i["sha256"] == image["sha256"] for i in images if i["concept_id"] == concept)


def translations_for(catalog: pa.Table) -> pa.Table:
    concepts = run_concepts(
        ShippedConceptsConfig(include=[str(c) for c in set(catalog["concept_id"].to_pylist())]), default_pack()
    )
    return run_translations(
        ShippedTranslationsConfig(), default_pack(), concepts, sorted(set(catalog["language_code"].to_pylist()))
    ).translations


@st.composite
def catalogs(draw: st.DrawFn) -> pa.Table:
    countries = draw(st.lists(st.sampled_from(COUNTRY_NAMES), min_size=2, max_size=7, unique=True))
    image = st.tuples(
        st.sampled_from(countries),
        st.sampled_from(CONCEPT_IDS),
        st.frozensets(st.sampled_from(CONCEPT_IDS), max_size=2).filter(lambda _: True),
    )
    extra_tag_rate = draw(st.sampled_from([0.0, 0.3]))
    images = draw(st.lists(image, min_size=1, max_size=60))
    if extra_tag_rate == 0.0:
        images = [(c, k, frozenset()) for c, k, _ in images]
    copies = draw(st.lists(st.tuples(st.integers(0, 59), st.integers(0, 59)), max_size=6))
    return make_catalog(images, copies)


def check_rows_independently(catalog: pa.Table, benchmark: pa.Table, benchmark_cd: pa.Table) -> None:
    images = catalog.to_pylist()
    for row in benchmark.to_pylist():
        q = images[row["query_index"]]
        correct, biased, irrelevant = (images[row[f"{prefix}index"]] for _, prefix in RQ2_SLOTS)
        assert correct["concept_id"] == q["concept_id"] and group(correct["country"]) != group(q["country"])
        assert biased["country"] == q["country"] and not shows(biased, q["concept_id"], images)
        assert not shows(irrelevant, q["concept_id"], images) and group(irrelevant["country"]) != group(q["country"])
        assert row["query_text"] == q["concept_in_native"]
    for row in benchmark_cd.to_pylist():
        q = images[row["query_index"]]
        y = row["descriptor_country"]
        gx, gy = group(q["country"]), group(y)
        c = {slot: images[row[f"{slot}_candidate_index"]] for slot in RQ3_SLOTS}
        assert gy != gx
        assert c["correct"]["concept_id"] == q["concept_id"] and c["correct"]["country"] == y
        assert c["object_relevant_language_biased"]["concept_id"] == q["concept_id"]
        assert c["object_relevant_language_biased"]["country"] == q["country"]
        assert c["object_relevant"]["concept_id"] == q["concept_id"]
        assert group(c["object_relevant"]["country"]) not in (gx, gy)
        assert c["cultural_descriptor_relevant"]["country"] == y
        assert not shows(c["cultural_descriptor_relevant"], q["concept_id"], images)
        assert c["language_biased"]["country"] == q["country"]
        assert not shows(c["language_biased"], q["concept_id"], images)
        assert not shows(c["irrelevant"], q["concept_id"], images) and group(c["irrelevant"]["country"]) not in (gx, gy)
        pack = default_pack().language_pack(q["language_code"])
        assert row["query_text"] == pack.descriptor(q["concept_id"], y)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(catalogs(), st.integers(0, 3))
def test_assembled_benchmarks_satisfy_every_rule(catalog: pa.Table, seed: int) -> None:
    translations = translations_for(catalog)
    result = run_assembly(AssemblyConfig(seed=seed), catalog, translations, default_pack())
    report = validate_benchmark(
        catalog,
        result.benchmark,
        result.benchmark_cd,
        translations,
        unassembled=result.unassembled,
        pack=default_pack(),
    )
    # A catalog too small for any triplet yields an empty benchmark, which is never publishable.
    allowed = {"non_empty"} if result.benchmark.num_rows == 0 else set()
    assert {v.rule for v in report.violations} <= allowed, report.summary()
    check_rows_independently(catalog, result.benchmark, result.benchmark_cd)

    # Every image yields an RQ2 query or a recorded reason, and the reason is true.
    images = catalog.to_pylist()
    queried = set(result.benchmark["query_index"].to_pylist())
    missing = {r["query_index"]: r["reason"] for r in result.unassembled.to_pylist() if r["task"] == "rq2"}
    assert queried.isdisjoint(missing) and queried | set(missing) == set(range(len(images)))
    for index, reason in missing.items():
        q = images[index]
        pools = {
            "no_correct_candidate": [i for i in images if i["concept_id"] == q["concept_id"]
                                     and group(i["country"]) != group(q["country"])],
            "no_language_biased_candidate": [i for i in images if i["country"] == q["country"]
                                             and not shows(i, q["concept_id"], images)],
            "no_irrelevant_candidate": [i for i in images if group(i["country"]) != group(q["country"])
                                        and not shows(i, q["concept_id"], images)],
        }  # fmt: skip
        assert pools[reason] == []

    # The same seed gives the same benchmark.
    again = run_assembly(AssemblyConfig(seed=seed), catalog, translations, default_pack())
    assert again.benchmark.equals(result.benchmark) and again.benchmark_cd.equals(result.benchmark_cd)


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 12), st.integers(0, 5))
def test_reuse_is_balanced_when_pools_are_shared(per_country: int, seed: int) -> None:
    """With one concept queried from one country, every query shares the same pools: reuse differs by <= 1."""
    images = [("Japan", DANCE, frozenset())] * per_country + [("Spain", DANCE, frozenset())] * 3
    images += [("Japan", AIRLINES, frozenset())] * 2 + [("Spain", AIRLINES, frozenset())] * 2
    catalog = make_catalog(images)
    result = run_assembly(AssemblyConfig(seed=seed, rq3=False), catalog, translations_for(catalog), default_pack())
    japan_dance = [
        r for r in result.benchmark.to_pylist() if r["query_country"] == "Japan" and r["query_concept"] == "dance"
    ]
    correct = Counter(r["semantically_relevant_candidate_index"] for r in japan_dance)
    assert len(correct) == min(3, per_country)  # all three Spanish dance images are used before any is reused
    assert max(correct.values()) - min(correct.values()) <= 1
    assert result.reuse["rq2"]["max_reuse"] >= max(correct.values())


@pytest.fixture(scope="module")
def valid_case() -> tuple[pa.Table, pa.Table, pa.Table, pa.Table]:
    countries = ["USA", "UK", "Spain", "Argentina", "Japan", "Kenya"]
    images = [(c, k, frozenset()) for c in countries for k in CONCEPT_IDS for _ in range(2)]
    images.append(("Spain", AIRLINES, frozenset({DANCE})))  # an airlines image that also shows dance
    catalog = make_catalog(images)
    translations = translations_for(catalog)
    result = run_assembly(AssemblyConfig(seed=1), catalog, translations, default_pack())
    assert validate_benchmark(catalog, result.benchmark, result.benchmark_cd, translations, pack=default_pack()).ok
    return catalog, result.benchmark, result.benchmark_cd, translations


def _set(table: pa.Table, row: int, column: str, value: object) -> pa.Table:
    values = table[column].to_pylist()
    values[row] = value
    return table.set_column(
        table.schema.get_field_index(column),
        table.schema.field(column),
        pa.array(values, table.schema.field(column).type),
    )


def _rules(report) -> set[str]:
    return {v.rule for v in report.violations}


def test_validator_names_each_broken_rule(valid_case) -> None:
    catalog, rq2, rq3, translations = valid_case
    images = catalog.to_pylist()
    row = next(
        i for i, r in enumerate(rq2.to_pylist()) if r["query_country"] == "Spain" and r["query_concept"] == "dance"
    )
    spanish_row = rq2.to_pylist()[row]
    # A correct candidate from the query's own language group (an Argentinian dance for a Spanish query).
    same_group = next(i for i, im in enumerate(images) if im["country"] == "Argentina" and im["concept_id"] == DANCE)
    broken = _set(_set(_set(_set(rq2, row, "semantically_relevant_candidate_index", same_group),
                            row, "semantically_relevant_candidate_image_id", images[same_group]["image_id"]),
                       row, "semantically_relevant_candidate_country", "Argentina"),
                  row, "semantically_relevant_candidate_concept", "dance")  # fmt: skip
    report = validate_benchmark(catalog, broken, rq3, translations, pack=default_pack())
    assert _rules(report) >= {"rq2.correct"}
    assert any(v.row == row and "Argentina" in v.detail for v in report.violations)

    # A language-biased distractor that carries the query concept among its tags.
    tagged = next(
        i
        for i, im in enumerate(images)
        if im["country"] == "Spain" and DANCE in im["tags"] and im["concept_id"] != DANCE
    )
    broken = _set(_set(rq2, row, "culturally_relevant_candidate_index", tagged),
                  row, "culturally_relevant_candidate_image_id", images[tagged]["image_id"])  # fmt: skip
    broken = _set(broken, row, "culturally_relevant_candidate_concept", images[tagged]["concept"])
    assert "rq2.language_biased" in _rules(validate_benchmark(catalog, broken, rq3, translations, pack=default_pack()))

    # Columns that disagree with the index, an index out of range, a wrong query text.
    assert "non_relevant_candidate_image_id_matches_index" in _rules(
        validate_benchmark(
            catalog, _set(rq2, row, "non_relevant_candidate_image_id", "nope"), rq3, translations, pack=default_pack()
        )
    )
    assert "semantically_relevant_candidate_index_range" in _rules(
        validate_benchmark(
            catalog,
            _set(rq2, row, "semantically_relevant_candidate_index", 10_000),
            rq3,
            translations,
            pack=default_pack(),
        )
    )
    assert "rq2.query_text" in _rules(
        validate_benchmark(catalog, _set(rq2, row, "query_text", "tren"), rq3, translations, pack=default_pack())
    )
    assert spanish_row["query_text"] == default_pack().language_pack("es").concepts[DANCE].text

    # A descriptor country from the query's own language group.
    cd_row = next(i for i, r in enumerate(rq3.to_pylist()) if r["query_country"] == "Spain")
    assert "rq3.descriptor_country" in _rules(
        validate_benchmark(
            catalog, rq2, _set(rq3, cd_row, "descriptor_country", "Argentina"), translations, pack=default_pack()
        )
    )
    # A benchmark with no rows at all (every source failed) is not a valid release.
    assert "non_empty" in _rules(validate_benchmark(catalog, rq2.slice(0, 0), rq3, translations, pack=default_pack()))
    assert "non_empty" not in _rules(validate_benchmark(catalog, rq2, rq3, translations, pack=default_pack()))
    # A reuse cap below what the build needed.
    assert {"rq2.max_reuse", "rq3.max_reuse"} <= _rules(
        validate_benchmark(catalog, rq2, rq3, translations, max_reuse=1, pack=default_pack())
    )


def test_validator_catches_unbalanced_reuse(valid_case) -> None:
    catalog, rq2, rq3, translations = valid_case
    rows = rq2.to_pylist()
    # Point every Japanese train query's irrelevant candidate at the same image, ignoring the least-used rule.
    target = [i for i, r in enumerate(rows) if r["query_country"] == "Japan"]
    fixed = rows[target[0]]
    broken = rq2
    for i in target[1:]:
        for field in ("index", "image_id", "concept", "country"):
            broken = _set(broken, i, f"non_relevant_candidate_{field}", fixed[f"non_relevant_candidate_{field}"])
    assert "rq2.reuse_balance" in _rules(validate_benchmark(catalog, broken, rq3, translations, pack=default_pack()))


def test_rq3_rule_order_matches_the_release_columns() -> None:
    assert tuple(slot.name for slot in RQ3_RULES) == RQ3_SLOTS


def test_rq3_assembled_in_a_worker_process_is_the_same(valid_case) -> None:
    """`apart` (a large catalog, `task_runner` workers): RQ3 in a process of its own gives the very tables."""
    catalog, _, _, translations = valid_case
    for seed in (1, 7):
        here = run_assembly(AssemblyConfig(seed=seed), catalog, translations, default_pack())
        apart = run_assembly(AssemblyConfig(seed=seed), catalog, translations, default_pack(), apart=True)
        assert here.benchmark_cd.num_rows > 0
        for table in ("benchmark", "benchmark_cd", "unassembled"):
            assert getattr(apart, table).equals(getattr(here, table)), table
        assert apart.reuse == here.reuse
