"""Assembly and validation at scale: the paper's 11,724 images, or a million over 1,000 concepts x 100 countries.

    .venv/bin/python perf/assembly_scale.py [--images 11724] [--repeats 3]
    .venv/bin/python perf/assembly_scale.py --images 1000000 --repeats 1
    .venv/bin/python perf/assembly_scale.py --images 1000000 --repeats 1 --seed 1 --concepts 500 --countries 200
    .venv/bin/python perf/assembly_scale.py --images 100000 --repeats 1 --one-group 60  # 60 countries, one language

Up to 50,000 images the catalog is the paper's: the 139 shipped concepts and the 16 countries (3XCM paper §3.2.1,
App. K). Past that it is synthetic, 1,000 concepts x 100 countries in language groups shaped like the paper's (a
group of 3, two of 2, the rest alone, repeated), with the skew of the authors' release: each concept's and each
country's weight is drawn from the image counts per concept and per country in `data/authors/xcm-bench.csv`, and
each (concept, country) cell holds a Poisson count around their product. Everywhere, 30% of the images carry an
extra concept tag and 1% are byte copies of an image of another concept.

It times the assembler (RQ2 + RQ3) and the full validator (every rule, the least-used replay and completeness), and
reports peak RSS. In the same run it compares candidate reuse with the obvious peer, a uniform random choice from
the same eligible pools (how a benchmark ends up reusing an image 20 times); the peer needs a mask per query, so it
runs only on catalogs of 50,000 images or fewer. Prints medians over --repeats runs and ends with one JSON line.
"""

from __future__ import annotations

import argparse
import csv
import json
import resource
import statistics
import time
from collections import Counter
from importlib import resources
from io import StringIO

import numpy as np
import pyarrow as pa

from collectors.concepts import ShippedConceptsConfig, run_concepts
from collectors.translations import ShippedTranslationsConfig, run_translations
from curation.assemble import AssemblyConfig, QueryTexts, assemble_catalog
from curation.rules import RQ2_RULES, Catalog, PoolCounts, in_pool
from curation.validate import validate_benchmark
from data.reference import default_pack
from data.schemas import CATALOG

PAPER_SCALE_LIMIT = 50_000
TAG_SHARE, COPY_SHARE = 0.3, 0.01


def _table(rows: dict[str, list]) -> pa.Table:
    return pa.table({name: pa.array(rows[name], CATALOG.field(name).type) for name in CATALOG.names}, schema=CATALOG)


def _rows(concept_ids: np.ndarray, countries: list[str], country_of: np.ndarray, concept_name, languages, groups,
          slugs, rng: np.random.Generator) -> dict[str, list]:  # fmt: skip
    """CATALOG columns for images given as (concept id, country position) pairs, sorted into catalog order."""
    order = np.lexsort((country_of, concept_ids))
    concept_ids, country_of = concept_ids[order], country_of[order]
    n = len(order)
    cell = concept_ids.astype(np.int64) * len(countries) + country_of
    starts = np.r_[0, np.flatnonzero(np.diff(cell)) + 1]
    rank = np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n])) + 1  # 1-based within each cell
    sha = np.array([f"{i:064x}" for i in range(n)], dtype=object)
    copies = np.flatnonzero(rng.random(n) < COPY_SHARE)
    sha[copies] = sha[rng.integers(0, n, len(copies))]
    extra = np.where(rng.random(n) < TAG_SHARE, rng.choice(np.unique(concept_ids), n), -1)
    names = [countries[x] for x in country_of.tolist()]
    concepts = [concept_name(c) for c in concept_ids.tolist()]
    return {
        "index_in_dataset": np.arange(n),
        "image_id": [
            f"{slugs[x]}-{c}-{r}-eng"
            for x, c, r in zip(country_of.tolist(), concept_ids.tolist(), rank.tolist(), strict=True)
        ],
        "concept_id": concept_ids,
        "concept": concepts,
        "concept_in_native": concepts,
        "concept_country": [f"{c} {x}" for c, x in zip(concepts, names, strict=True)],
        "country": names,
        "language_code": [languages[x] for x in country_of.tolist()],
        "language_group": [groups[x] for x in country_of.tolist()],
        "title": [None] * n,
        "query": concepts,
        "query_lang": ["eng"] * n,
        "rank": rank,
        "url": ["x"] * n,
        "source_page": [None] * n,
        "sha256": sha.tolist(),
        "pixel_sha256": [None] * n,
        "num_bytes": np.ones(n, dtype=np.int64),
        "width": np.ones(n, dtype=np.int64),
        "height": np.ones(n, dtype=np.int64),
        "format": ["JPEG"] * n,
        "tags": [
            [c] if e < 0 or e == c else [c, int(e)]
            for c, e in zip(concept_ids.tolist(), extra.tolist(), strict=True)
        ],
        "tagger": ["synthetic"] * n,
    }  # fmt: skip


def paper_catalog(n: int, seed: int) -> tuple[pa.Table, QueryTexts, pa.Table]:
    """The shipped concepts and countries, images spread uniformly over them."""
    rng = np.random.default_rng(seed)
    countries = list(default_pack().countries)
    concepts = {c.concept_id: c.concept for c in default_pack().concepts}
    ids = np.array(sorted(concepts))
    rows = _rows(
        ids[rng.integers(0, len(ids), n)],
        [c.name for c in countries],
        rng.integers(0, len(countries), n),
        concepts.__getitem__,
        [c.language_code for c in countries],
        [c.language_group for c in countries],
        [c.slug for c in countries],
        rng,
    )
    table = _table(rows)
    shipped = run_concepts(ShippedConceptsConfig())
    translations = run_translations(
        ShippedTranslationsConfig(), shipped, sorted({c.language_code for c in countries})
    ).translations
    return table, QueryTexts(translations), translations


def _release_skew() -> tuple[np.ndarray, np.ndarray]:
    """Images per concept and per country in the authors' release (data/authors/xcm-bench.csv)."""
    text = resources.files("data").joinpath("authors", "xcm-bench.csv").read_text(encoding="utf-8")
    images: dict[str, tuple[str, str]] = {}
    for row in csv.DictReader(StringIO(text)):
        for prefix in ("query_", "semantically_relevant_candidate_", "culturally_relevant_candidate_",
                       "non_relevant_candidate_"):  # fmt: skip
            image_id = row[f"{prefix}image_id"]
            images[image_id] = (image_id.rsplit("-", 3)[1], row[f"{prefix}country"])
    per_concept = Counter(concept for concept, _ in images.values())
    per_country = Counter(country for _, country in images.values())
    return np.array(list(per_concept.values()), float), np.array(list(per_country.values()), float)


def synthetic_catalog(
    n: int, seed: int, concepts: int = 1000, countries: int = 100, one_group: int = 0
) -> tuple[pa.Table, QueryTexts, pa.Table]:
    """`one_group`: that many countries share one language group (one language spoken in most of the catalog's
    countries, the case that made a query walk past every cell of its own group)."""
    rng = np.random.default_rng(seed)
    concept_skew, country_skew = _release_skew()
    concept_weight = rng.choice(concept_skew, concepts) * rng.uniform(0.8, 1.2, concepts)
    country_weight = rng.choice(country_skew, countries) * rng.uniform(0.8, 1.2, countries)
    expected = np.outer(concept_weight, country_weight)
    counts = rng.poisson(expected * n / expected.sum())
    concept_ids, country_of = np.nonzero(counts)
    repeats = counts[concept_ids, country_of]
    names = [f"Country{x:03d}" for x in range(countries)]
    sizes = [3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1]  # the paper's 16 countries in 11 language groups
    groups, group = [], 0
    while len(groups) < countries:
        for size in sizes:
            groups += [f"g{group:03d}"] * size
            group += 1
    groups = ["g-shared"] * one_group + groups[: countries - one_group]
    rows = _rows(
        np.repeat(concept_ids, repeats),
        names,
        np.repeat(country_of, repeats),
        lambda c: f"concept {c}",
        groups,
        groups,
        [name.lower() for name in names],
        rng,
    )
    table = _table(rows)
    translations = pa.table(
        {
            "concept_id": pa.array(np.repeat(np.arange(concepts), len(set(groups))), pa.int32()),
            "language_code": sorted(set(groups)) * concepts,
            "text": [f"concept {c} ({g})" for c in range(concepts) for g in sorted(set(groups))],
            "descriptor_template": ["{concept} of {country}"] * (concepts * len(set(groups))),
        }
    )
    texts = QueryTexts(translations, dict(zip(names, groups, strict=True)), lambda code, country: country)
    return table, texts, translations


def random_choice_reuse(table: pa.Table, seed: int) -> dict[str, float]:
    """The peer: each RQ2 slot filled by a uniform random member of the same eligible pool (a mask per query)."""
    catalog = Catalog.from_table(table)
    counts = PoolCounts(catalog)
    rng = np.random.default_rng(seed)
    usage = np.zeros(len(catalog), dtype=np.int64)
    everything = np.arange(len(catalog))
    for q in range(len(catalog)):
        c, x = int(catalog.concept[q]), int(catalog.country[q])
        if counts.rq2_empty_slot(c, x) is not None:
            continue
        same_c, same_x = np.full(len(catalog), c), np.full(len(catalog), x)
        for slot in RQ2_RULES:
            usage[rng.choice(np.flatnonzero(in_pool(catalog, slot, everything, same_c, same_x)))] += 1
    used = usage[usage > 0]
    return {"max_reuse": int(used.max()), "mean_reuse": float(used.mean())}


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # ru_maxrss is in KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=11_724)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0, help="Seed of the synthetic catalog.")
    parser.add_argument("--concepts", type=int, default=1000, help="Concepts of a synthetic catalog.")
    parser.add_argument("--countries", type=int, default=100, help="Countries of a synthetic catalog.")
    parser.add_argument(
        "--one-group", type=int, default=0, help="Countries of a synthetic catalog that share one language group."
    )
    args = parser.parse_args()

    start = time.perf_counter()
    paper = args.images <= PAPER_SCALE_LIMIT
    if paper:
        table, texts, translations = paper_catalog(args.images, args.seed)
    else:
        table, texts, translations = synthetic_catalog(
            args.images, args.seed, args.concepts, args.countries, args.one_group
        )
    catalog_s = time.perf_counter() - start
    assemble_s, validate_s = [], []
    for repeat in range(args.repeats):
        start = time.perf_counter()
        result = assemble_catalog(AssemblyConfig(seed=repeat), Catalog.from_table(table), texts)
        assemble_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        report = validate_benchmark(
            table, result.benchmark, result.benchmark_cd, translations, unassembled=result.unassembled, texts=texts
        )
        validate_s.append(time.perf_counter() - start)
        assert report.ok, report.summary()
    ours = result.reuse["rq2"]
    figures = {
        "images": table.num_rows,
        "concepts": len(set(table["concept_id"].to_pylist())),
        "countries": len(set(table["country"].to_pylist())),
        "catalog_s": round(catalog_s, 1),
        "triplets": result.benchmark.num_rows,
        "sextets": result.benchmark_cd.num_rows,
        "assemble_s_median": round(statistics.median(assemble_s), 2),
        "validate_s_median": round(statistics.median(validate_s), 2),
        "assemble_plus_validate_s": round(statistics.median(assemble_s) + statistics.median(validate_s), 2),
        "peak_rss_gib": round(peak_rss_gib(), 2),
        "rq2_max_reuse_balanced": ours["max_reuse"],
        "rq2_mean_reuse_balanced": round(ours["mean_reuse"], 3),
        "rq3_max_reuse_balanced": result.reuse["rq3"]["max_reuse"],
    }
    if paper:
        peer = random_choice_reuse(table, seed=0)
        figures |= {
            "rq2_max_reuse_random": peer["max_reuse"],
            "rq2_max_reuse_ratio_random_over_balanced": round(peer["max_reuse"] / ours["max_reuse"], 2),
            "rq2_mean_reuse_random": round(peer["mean_reuse"], 3),
        }
    print(
        f"{figures['images']} images ({figures['concepts']} concepts x {figures['countries']} countries) -> "
        f"{figures['triplets']} triplets, {figures['sextets']} sextets"
    )
    print(
        f"assembly (RQ2+RQ3) median {figures['assemble_s_median']} s, validator median {figures['validate_s_median']}"
        f" s, peak RSS {figures['peak_rss_gib']} GiB"
    )
    if paper:
        print(
            f"RQ2 candidate reuse: balanced max {ours['max_reuse']} (mean {ours['mean_reuse']:.2f}) vs random choice "
            f"max {figures['rq2_max_reuse_random']} (mean {figures['rq2_mean_reuse_random']:.2f})"
        )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
