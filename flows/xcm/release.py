"""The 3XCM release: `image_metadata`, `benchmark`, `benchmark_cd`, `unassembled`, the authors' CSV, shards, figures,
`croissant.json`, the card and the manifest, written through the generic release writer (`data/publish/`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa

from data.figures import heatmap_png
from data.progress import StepProgress
from data.publish import croissant
from data.publish.card import (
    CardConfig,
    auto_accept_notice,
    backend_text,
    card_configs,
    demo_notice,
    deviations_section,
    empty_configs_note,
    front_matter,
    hub_metadata,
    markdown_table,
    pack_country_rows,
    reference_section,
    url_only_notice,
    webdataset_loading,
)
from data.publish.datasheet import datasheet_section
from data.publish.folder import ReleaseResult
from data.publish.format import ImageConfig
from data.publish.image_tables import ImageRow, TableImageRows, to_release_jpeg
from data.publish.manifest import Provenance, validated, validation_summary
from data.publish.release import ReleaseConfig, ReleaseWriter
from data.publish.sources import DOMAINS_FIGURE, domains_png, sources_section
from data.publish.tables import table_csv_bytes
from data.reference import ReferencePack
from data.schemas import IMAGE_METADATA, XCM_BENCH_CSV, XCM_BENCH_CSV_COLUMNS
from data.stage_stats import StageStats
from data.workspace import BlobStore
from flows.xcm.release_facts import is_demo, xcm_facts

NAME = "3xcm"
#: Where a 3XCM release keeps its images (`Benchmark.image_config`).
IMAGES = ImageConfig("image_metadata", "image_id")
#: The authors' image_metadata fields first, in their order; ours follow, the image comes last.
AUTHOR_IMAGE_FIELDS = (
    "concept_id",
    "concept_in_native",
    "image_id",
    "index_in_dataset",
    "concept",
    "concept_country",
    "country",
    "title",
)
FIGURE = "figures/images_per_concept_country.png"


def image_metadata_schema(catalog_schema: pa.Schema) -> pa.Schema:
    """The authors' columns first, then ours; each column never null where `IMAGE_METADATA` declares it so, also when
    the catalog comes from a release's Parquet (a patch: the HF schema there marks every column nullable), so that
    the tars' JSON holds the same columns either way (`data.publish.image_tables.sidecar_fields`)."""
    declared = {f.name: f for f in IMAGE_METADATA}

    def field(name: str) -> pa.Field:
        found = catalog_schema.field(name)
        known = declared.get(name)
        return found.with_nullable(known.nullable) if known is not None and known.type == found.type else found

    ours = [f.name for f in catalog_schema if f.name not in AUTHOR_IMAGE_FIELDS]
    return pa.schema([field(n) for n in [*AUTHOR_IMAGE_FIELDS, *ours]])


def concept_country_matrix(catalog: pa.Table, pack: ReferencePack) -> tuple[np.ndarray, list[str], list[str]]:
    countries = [c.name for c in pack.countries if c.name in set(catalog["country"].to_pylist())]
    concepts = sorted(set(zip(catalog["concept_id"].to_pylist(), catalog["concept"].to_pylist(), strict=True)))
    counts = Counter(zip(catalog["concept_id"].to_pylist(), catalog["country"].to_pylist(), strict=True))
    matrix = np.array([[counts[(cid, country)] for country in countries] for cid, _ in concepts], dtype=np.int64)
    return matrix, [name for _, name in concepts], countries


@dataclass(frozen=True)
class _SideFiles:
    csv: bytes
    heatmap: bytes
    domains: bytes
    countries: list[str]


def _side_files(catalog: pa.Table, benchmark: pa.Table, pack: ReferencePack) -> _SideFiles:
    """The release's files that are neither tables nor images: the authors' CSV and the card's two figures."""
    matrix, concept_names, countries = concept_country_matrix(catalog, pack)
    return _SideFiles(
        csv=table_csv_bytes(benchmark, XCM_BENCH_CSV_COLUMNS),
        heatmap=heatmap_png(matrix, concept_names, countries, "Images per concept and country"),
        domains=domains_png(catalog["url"].to_pylist()),
        countries=countries,
    )


def write_3xcm_release(
    config: ReleaseConfig,
    blobs: BlobStore,
    catalog: pa.Table,
    benchmark: pa.Table,
    benchmark_cd: pa.Table,
    unassembled: pa.Table,
    provenance: dict[str, Any],
    pack: ReferencePack,
    *,
    load_image: Callable[[dict[str, Any]], bytes] | None = None,
    changelog: str = "",
    progress: StepProgress | None = None,
    workers: int = 1,
) -> ReleaseResult:
    """`pack`: the reference pack the benchmark was built from, carried in `reference/`. `load_image` and
    `changelog` are for a patch release (`flows/xcm/takedown.py`): the parent's released bytes instead of the converted
    blobs, and the CHANGELOG that ends its card. The image shards are written in up to `workers` processes."""
    # The manifest names the pack that `reference/` carries, whoever built the provenance (release_pack checks it).
    provenance = {**provenance, "reference": pack.record()}
    stated = validated(Provenance, provenance)  # the card and facts read it typed; the manifest writes `provenance`
    writer = ReleaseWriter(config, NAME)
    release_bytes = load_image or (lambda meta: to_release_jpeg(blobs.get(meta["sha256"]), meta["format"]))
    urls = config.mode == "urls"
    if urls and "phash" not in catalog.column_names:
        raise ValueError("a URL-only 3XCM release needs the images' `phash` (16 hex digits) in the catalog")
    try:
        schema = image_metadata_schema(catalog.schema)
        ordered = catalog.select(schema.names)
        rows = TableImageRows(
            ordered,
            lambda meta: ImageRow(
                key=meta["image_id"], metadata=meta, load=partial(release_bytes, meta), embed=not urls
            ),
        )
        with ThreadPoolExecutor(1, thread_name_prefix="release-side-files") as side:
            # Made while the image shards are written (by worker processes, when there are workers): they need
            # nothing from each other. Written after them in the same order as ever, so the folder is the same.
            side_files = side.submit(_side_files, catalog, benchmark, pack)
            # A URL-only release has no `image` column: each row's `url`, `sha256` and `phash` name its image.
            shards = writer.write_images(
                "image_metadata", rows, schema, image_column=not urls, tars=not urls, progress=progress, workers=workers
            )
            writer.write_table("benchmark", benchmark)
            writer.write_table("benchmark_cd", benchmark_cd)
            writer.write_table("unassembled", unassembled)
            made = side_files.result()
        writer.write_bytes(XCM_BENCH_CSV, made.csv)
        writer.write_reference(pack)
        writer.write_bytes(FIGURE, made.heatmap)
        writer.write_bytes(DOMAINS_FIGURE, made.domains)
        countries = made.countries
        # After the data files (their hashes go into it), before the card (its datasheet states the same facts).
        facts = xcm_facts(config.version, ordered, benchmark, benchmark_cd, unassembled, stated, mode=config.mode)
        facts = croissant.with_pack(facts, pack, set(countries))
        jsonld = croissant.croissant_jsonld(facts, writer.files, writer.sizes)
        writer.write_bytes(croissant.FILE, croissant.to_bytes(jsonld))
        card = render_card(
            catalog,
            benchmark,
            benchmark_cd,
            unassembled.num_rows,
            shards,
            stated,
            facts.languages,
            config.version,
            pack,
            config.mode,
        )
        writer.write_bytes("README.md", (card + datasheet_section(facts) + changelog).encode())
        manifest = {"name": NAME, "version": config.version, **provenance, "mode": config.mode}
        return writer.commit(manifest)
    except BaseException:
        writer.abort()
        raise


def render_card(
    catalog: pa.Table,
    benchmark: pa.Table,
    benchmark_cd: pa.Table,
    unassembled_rows: int,
    shards: dict[str, list[str]],
    provenance: Provenance,
    languages: Sequence[str],
    version: str,
    pack: ReferencePack,
    mode: str = "images",
) -> str:
    configs = (
        CardConfig("image_metadata", catalog.num_rows, default=True),
        CardConfig("benchmark", benchmark.num_rows),
        CardConfig("benchmark_cd", benchmark_cd.num_rows),
        CardConfig("unassembled", unassembled_rows),
    )
    head = front_matter(
        card_configs(configs),
        pretty_name="3XCM (culturebench build)",
        tags=["cultural-bias", "cross-lingual", "text-to-image-retrieval"],
        # The Hub's listing: image-to-text and text-to-image are generation tasks there. 3XCM ranks images for a text
        # (retrieval), by the zero-shot image-text similarity of CLIP-style models (our reading of the Hub's list).
        extra=hub_metadata(languages, catalog.num_rows, ["text-retrieval", "zero-shot-image-classification"]),
    )
    backends = provenance.backends
    own_pack = None if pack.is_default else pack.info.name
    warnings = deviations_section(provenance.deviations) + review_note(provenance.review)
    notice = auto_accept_notice("near-duplicate decisions") if backends.get("review") == "auto_accept" else ""
    if is_demo(provenance):  # first thing, as MixCuBe's card
        why = "its images are the generated pictures of the offline demo corpus, not collected photos."
        notice = f"> {demo_notice(why)}\n\n{notice}"
    per_country = Counter(catalog["country"].to_pylist())
    country_rows = [{"country": c.name, "images": per_country[c.name]} for c in pack.countries if per_country[c.name]]
    stage_rows = [
        {"stage": s.stage, "in": s.rows_in, "kept": s.kept, "dropped": s.dropped, "dropped by reason": s.reasons_text()}
        for s in (StageStats(**raw) for raw in provenance.stage_stats)
    ]
    reuse = provenance.reuse
    rq2, rq3 = reuse.get("rq2", {}), reuse.get("rq3", {})
    csv_line = "`benchmarks/xcm-bench.csv` has the exact columns of the authors' evaluator."
    body = (
        f"""
# 3XCM, culturebench build {version}

{url_only_notice(mode, "culturebench fetch-release")}{notice}
A cross-cultural, cross-lingual, cross-modal retrieval benchmark following *Evaluating Perspectival Biases in
Cross-Modal Retrieval* (3XCM). Images of culturally inclusive concepts from {len(country_rows)} countries are
turned into forced-choice text-to-image tests:

* `benchmark` (RQ2 triplets): the concept in the query country's language, with a correct image (the concept,
  from another language group), a language-biased image (the query country, not the concept) and an irrelevant one.
* `benchmark_cd` (RQ3 sextets): "{{concept}} of {{Y}}" in the language of country X, with six candidates.
* `image_metadata`: the images. `query_index` and every `*_candidate_index` are row positions in this table.
* `unassembled`: each image that is not the query of a triplet (`rq2`) or a sextet (`rq3`), with the reason (the
  slot that had no eligible candidate).

This build keeps stricter rules than the published benchmark: the correct and the irrelevant candidates never share
the query's language group, no distractor shows the query concept (among its tags, or as a byte- or pixel-identical
copy of an image of it, whatever concept it was filed under), and candidate reuse is balanced.
Every row was checked by the validator: **{validation_summary(provenance)}**.

Licence: CC BY-NC-SA 4.0. Research use only; ethical review is required for production use.

## How this build was made

{warnings}

| stage | backend |
|---|---|
"""
        + "".join(f"| {stage} | {backend_text(name, own_pack)} |\n" for stage, name in backends.items())
        + f"""
## Loading

```python
from datasets import load_dataset
images = load_dataset("<this folder>", name="image_metadata", split="train")
triplets = load_dataset("<this folder>", name="benchmark", split="train")
sextets = load_dataset("<this folder>", name="benchmark_cd", split="train")
```

{empty_configs_note(configs)}{csv_line} {_where_images(mode, shards)}
{webdataset_loading(shards["webdataset"])}
Concept ids, concept names and image ids follow the authors' published release (their `xcm-bench.csv`): image ids
are `{{country}}-{{concept_id}}-{{rank}}-{{eng|nav}}` with the country name in lower case, spaces kept
(`saudi arabia-0-1-eng`), and ranks start at 1. Releases built by culturebench before this change numbered the
concepts alphabetically (29 was *dance*), ranked from 0 and wrote `saudi_arabia`.

## Statistics

{catalog.num_rows} images, {benchmark.num_rows} triplets, {benchmark_cd.num_rows} sextets.
Candidate reuse: RQ2 max {rq2.get("max_reuse", "-")}, mean {rq2.get("mean_reuse", 0):.2f};
RQ3 max {rq3.get("max_reuse", "-")}, mean {rq3.get("mean_reuse", 0):.2f}.

![Images per concept and country]({FIGURE})

{markdown_table(country_rows)}
### Stages

{markdown_table(stage_rows)}
{_sources(catalog)}
Provenance (config, code version, seeds, per-file sha256) is in `manifest.json`.
"""
        + reference_section(
            pack,
            pack_country_rows(pack, set(per_country)),
            "Its countries, with their languages and regions (the default pack's regions are GlobalRG's Table 1):",
        )
    )
    return head + body


def _where_images(mode: str, shards: dict[str, list[str]]) -> str:
    if mode == "urls":
        return (
            "This release has no image bytes: `image_metadata` names each image by its `url`, `sha256` and `phash`.\n"
            "`culturebench fetch-release <this folder> --out <folder> --write-images` downloads them, checks each\n"
            "against its sha256 and writes `image_metadata` with an `image` column."
        )
    return (
        "The images are also in WebDataset\nshards, `images/NNNNN.tar` (`<image_id>.jpg` + `<image_id>.json`): "
        f"{len(shards['webdataset'])} shard(s)."
    )


def _sources(catalog: pa.Table) -> str:
    """Licences and source domains; the query's language is `query_lang` (eng: English, nav: `language_code`)."""
    # An image table written before images carried their provenance declares no licence: `unknown`.
    licenses = catalog["license"].to_pylist() if "license" in catalog.column_names else [None] * catalog.num_rows
    note = "The query's language is English for `query_lang` `eng`, the country's (`language_code`) for `nav`."
    return sources_section(licenses, catalog["url"].to_pylist(), note=note)


def review_note(review: dict[str, Any]) -> str:
    """What the human duplicate review decided, for the card; nothing when no review round ran."""
    if "tasks" not in review:
        return ""
    kappa = review.get("agreement", {}).get("fleiss_kappa")
    agreement = "n/a" if kappa is None else f"{kappa:.2f}"
    closed = " The review was closed before every pair had all its annotations." if review.get("closed_early") else ""
    return (
        f"\n\n**Human review** (`{review['reviewer']}`): {review['tasks']} ambiguous pairs, "
        f"{review['decided']} decided by majority, {review['undecided']} undecided "
        "(one image of each undecided pair is held back); "
        f"Fleiss' kappa {agreement}.{closed}{_scenes_lost(review)}"
    )


def _scenes_lost(review: dict[str, Any]) -> str:
    lost = review.get("scenes_fully_held_back", 0)
    if not lost:
        return ""
    return (
        f" {lost} scene(s) have no image in this release because each of their images is held back by an undecided"
        " pair."
    )
