"""Paper-scale assembly: 11,724 images, 137 concepts, 16 countries (3XCM paper §3.2.1, App. K).

30% of the images carry an extra concept tag, and 1% are byte copies of an image of another concept (filed under
their own concept with their own tags), which the rules keep out of that concept's distractors.

Times the balanced assembler and the validator, and compares candidate reuse, in the same run, with the obvious
peer: a uniform random choice from the same eligible pools (how a benchmark ends up reusing an image 20 times).
Prints medians over --repeats runs and ends with one JSON line of the figures.

    .venv/bin/python benchmarks/assembly_scale.py [--images 11724] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections import Counter

import numpy as np
import pyarrow as pa

from collectors.concepts import ShippedConceptsConfig, run_concepts
from collectors.translations import ShippedTranslationsConfig, run_translations
from curation.assemble import AssemblyConfig, run_assembly
from curation.rules import RQ2_RULES, Catalog, PoolCache
from curation.validate import validate_benchmark
from data import reference
from data.schemas import CATALOG, RQ2_SLOTS


def synthetic_catalog(n: int, seed: int, copy_share: float = 0.01) -> pa.Table:
    """Images spread like Table 9/10: every concept in every country, some with an extra concept tag, and a share of
    byte copies of an earlier image (any concept)."""
    rng = random.Random(seed)
    countries = list(reference.countries())
    concepts = list(reference.concepts())
    picks = sorted(
        ((rng.randrange(len(concepts)), rng.randrange(len(countries))) for _ in range(n)),
    )
    ranks: Counter = Counter()
    rows = []
    for concept_index, country_index in picks:
        concept, country = concepts[concept_index], countries[country_index]
        rank = ranks[(concept_index, country_index)]
        ranks[(concept_index, country_index)] += 1
        extra = [rng.randrange(len(concepts))] if rng.random() < 0.3 else []
        rows.append(
            {
                "index_in_dataset": len(rows),
                "image_id": f"{country.slug}-{concept.concept_id}-{rank}-eng",
                "concept_id": concept.concept_id,
                "concept": concept.concept,
                "concept_in_native": reference.language_pack(country.language_code).concepts[concept.concept_id].text,
                "concept_country": f"{concept.concept} {country.name}",
                "country": country.name,
                "language_code": country.language_code,
                "language_group": country.language_group,
                "title": None,
                "query": f"{concept.concept} {country.name}",
                "query_lang": "eng",
                "rank": rank,
                "url": "x",
                "source_page": None,
                "sha256": rows[rng.randrange(len(rows))]["sha256"]
                if rows and rng.random() < copy_share
                else f"{len(rows):064x}",
                "pixel_sha256": None,
                "num_bytes": 1,
                "width": 1,
                "height": 1,
                "format": "JPEG",
                "tags": [concept.concept_id, *[e for e in extra if e != concept.concept_id]],
                "tagger": "synthetic",
            }
        )
    return pa.Table.from_pylist(rows, schema=CATALOG)


def random_choice_reuse(catalog_table: pa.Table, seed: int) -> dict[str, float]:
    """The peer: each RQ2 slot filled by a uniform random member of the same eligible pool."""
    catalog = Catalog.from_table(catalog_table)
    cache = PoolCache(catalog, RQ2_RULES)
    rng = np.random.default_rng(seed)
    usage = np.zeros(len(catalog), dtype=np.int64)
    for index in range(len(catalog)):
        query = catalog.query_for(index)
        pools = [cache.pool(slot, query) for slot, _ in RQ2_SLOTS]
        if all(len(p) for p in pools):
            for pool in pools:
                usage[rng.choice(pool)] += 1
    used = usage[usage > 0]
    return {"max_reuse": int(used.max()), "mean_reuse": float(used.mean())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=11_724)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    catalog = synthetic_catalog(args.images, seed=0)
    concepts = run_concepts(ShippedConceptsConfig())
    translations = run_translations(
        ShippedTranslationsConfig(), concepts, sorted(set(catalog["language_code"].to_pylist()))
    ).translations
    assemble_s, validate_s = [], []
    for repeat in range(args.repeats):
        start = time.perf_counter()
        result = run_assembly(AssemblyConfig(seed=repeat), catalog, translations)
        assemble_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        report = validate_benchmark(
            catalog, result.benchmark, result.benchmark_cd, translations, unassembled=result.unassembled
        )
        validate_s.append(time.perf_counter() - start)
        assert report.ok, report.summary()
    peer = random_choice_reuse(catalog, seed=0)
    ours = result.reuse["rq2"]
    figures = {
        "images": args.images,
        "triplets": result.benchmark.num_rows,
        "sextets": result.benchmark_cd.num_rows,
        "assemble_s_median": round(statistics.median(assemble_s), 3),
        "validate_s_median": round(statistics.median(validate_s), 3),
        "rq2_max_reuse_balanced": ours["max_reuse"],
        "rq2_max_reuse_random": peer["max_reuse"],
        "rq2_max_reuse_ratio_random_over_balanced": round(peer["max_reuse"] / ours["max_reuse"], 2),
        "rq2_mean_reuse_balanced": round(ours["mean_reuse"], 3),
        "rq2_mean_reuse_random": round(peer["mean_reuse"], 3),
        "rq3_max_reuse_balanced": result.reuse["rq3"]["max_reuse"],
    }
    print(f"{args.images} images -> {figures['triplets']} triplets, {figures['sextets']} sextets")
    print(
        f"assembly (RQ2+RQ3) median {figures['assemble_s_median']} s, validator median {figures['validate_s_median']} s"
    )
    print(
        f"RQ2 candidate reuse: balanced max {ours['max_reuse']} (mean {ours['mean_reuse']:.2f}) vs random choice "
        f"max {peer['max_reuse']} (mean {peer['mean_reuse']:.2f})"
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
