"""3XCM's Croissant facts: what `croissant.json` and the card's datasheet state of a 3XCM release (its record sets,
the RAI texts and the composition notes), from the release's tables and the build's provenance.

Pure (`data/publish/croissant.py` turns the facts into JSON-LD): an identical rebuild states the same facts.
`xcm_facts` composes one builder per section of the datasheet (`_collection`, `_preprocessing`, ..., `_uses`,
`_record_sets`, `_composition`), each reading a `_Release`: the tables, the provenance and the counts taken once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from data.publish.card import backend_text
from data.publish.croissant import CSV, RecordSetSpec, ReleaseFacts, collection_timeframe, webdataset_groups
from data.publish.manifest import Provenance, validation_summary
from data.publish.rai import (
    RaiTexts,
    counts,
    deviation_lines,
    maintenance_plan,
    platforms,
    review_analysis,
    source_lines,
    stage_line,
    stage_stats,
    url_only_line,
)
from data.review_labels import AUTO_ACCEPT
from data.schemas import XCM_BENCH_CSV, XCM_BENCH_CSV_COLUMNS
from data.text_safety import code_span

XCM_COLUMNS = {
    "concept_id": "The concept's id (the authors' numbering).",
    "concept_in_native": "The concept in the country's language.",
    "image_id": "`{country}-{concept_id}-{rank}-{eng|nav}`, the authors' format.",
    "index_in_dataset": "The row position in `image_metadata`.",
    "concept": "The concept in English.",
    "concept_country": "The concept followed by the country, as the authors write it.",
    "country": "The country whose search returned the image.",
    "title": "The search result's title.",
    "language_code": "The country's language (ISO 639-1).",
    "language_group": "The country's language group.",
    "query": "The search query that returned the image.",
    "query_lang": "`eng`: the English query; `nav`: the query in the country's language.",
    "rank": "The image's rank among the query's results (1 is the top hit).",
    "url": "Where the image was fetched from (a local image: its path under the searched folder).",
    "source_page": "The page the image was found on, when known.",
    "sha256": "sha256 of the image bytes as downloaded (before any conversion to JPEG).",
    "phash": "64-bit perceptual hash (imagehash pHash) of the image, 16 hex digits (URL-only releases).",
    "pixel_sha256": "sha256 of the decoded pixels, where the near-duplicate stage computed one.",
    "num_bytes": "Size of the downloaded image in bytes.",
    "width": "Width in pixels.",
    "height": "Height in pixels.",
    "format": "The downloaded image's format (images not in JPEG were converted to JPEG at release).",
    "tags": "Concept ids the image shows, in priority order: its own first.",
    "tagger": "What tagged the image (`none`: its own concept only).",
    "retrieved_at": "When the image was retrieved (ISO 8601, UTC).",
    "engine": "The search engine that returned the image.",
    "region": "The search engine's region code.",
    "final_url": "The image URL after redirects.",
    "http_status": "The HTTP status of the download.",
    "content_type": "The content type the server declared.",
    "license": "The image's licence as its source declares it (`unknown` when it declares none).",
    "license_filter": "The search engine's licence filter, when one was on.",
    "image": "The image, JPEG bytes (an HF `Image` feature).",
    "query_index": "The query image's row position in `image_metadata`.",
    "query_language": "The language of the query text.",
    "query_text": "The query text.",
    "query_concept_id": "The query image's concept id.",
    "descriptor_country": "The country Y of the descriptor `{concept} of {Y}`.",
    "task": "`rq2` (triplets) or `rq3` (sextets).",
    "reason": "The slot that had no eligible candidate.",
}

SLOT_SUFFIXES = {
    "_index": "Row position in `image_metadata` of the {slot} image.",
    "_image_id": "`image_id` of the {slot} image.",
    "_concept": "Concept (English) of the {slot} image.",
    "_country": "Country of the {slot} image.",
}


def slot_description(column: str) -> str:
    """`query_image_id`, `correct_candidate_index`, ...: a benchmark slot's image and what of it the column holds."""
    for suffix, what in SLOT_SUFFIXES.items():
        if column.endswith(suffix) and column != suffix.lstrip("_"):
            slot = column[: -len(suffix)].replace("_", " ")
            return what.format(slot=slot)
    return f"The `{column}` column."


def column_descriptions(schema: pa.Schema) -> dict[str, str]:
    """Each column of `schema` described: `XCM_COLUMNS`, else as a benchmark slot's column (`slot_description`)."""
    return {**{name: slot_description(name) for name in schema.names}, **XCM_COLUMNS}


def _record_set(name: str, description: str, pattern: str, schema: pa.Schema, rows: int, **more: Any) -> RecordSetSpec:
    return RecordSetSpec(name, description, pattern, schema, rows, columns=column_descriptions(schema), **more)


def is_demo(provenance: Provenance) -> bool:
    """A build of the offline demo corpus (its config names one)."""
    return provenance.config.get("demo_corpus") is not None


@dataclass(frozen=True)
class _Release:
    """A 3XCM release as the card's sections read it: its tables, its provenance, and what is counted from them once."""

    version: str
    images: pa.Table  # `image_metadata` without the image column
    benchmark: pa.Table
    benchmark_cd: pa.Table
    unassembled: pa.Table
    provenance: Provenance
    mode: str
    stats: dict[str, dict[str, Any]]
    reviewer: str
    countries: Counter[str]
    concepts: list[tuple[int, str]]
    languages: Counter[str]
    query_langs: Counter[str]
    formats: Counter[str]
    timeframe: str | None
    timeframe_note: str
    sources: str  # where the images came from (`source_lines`)
    unlicensed: str  # the images that declare no licence, if any

    @property
    def backends(self) -> dict[str, Any]:
        return self.provenance.backends

    @property
    def config(self) -> dict[str, Any]:
        return self.provenance.config

    @property
    def demo(self) -> bool:
        return is_demo(self.provenance)

    @property
    def demo_note(self) -> str:
        return (
            "This is a demonstration build: its images are the generated pictures of the offline demo corpus, not "
            "photos."
            if self.demo
            else ""
        )

    @property
    def demo_suffix(self) -> str:
        return f" {self.demo_note}" if self.demo else ""

    @property
    def converted(self) -> int:
        """Images not downloaded as JPEG, re-encoded once at release."""
        return self.images.num_rows - self.formats.get("JPEG", 0)

    @property
    def annotators(self) -> Any:
        return self.config.get("review", {}).get("annotators", "?")


def _release(
    version: str,
    images: pa.Table,
    benchmark: pa.Table,
    benchmark_cd: pa.Table,
    unassembled: pa.Table,
    provenance: Provenance,
    mode: str,
) -> _Release:
    timeframe, timeframe_note = collection_timeframe(images)
    sources, unlicensed = source_lines(images, "Images")
    return _Release(
        version=version,
        images=images,
        benchmark=benchmark,
        benchmark_cd=benchmark_cd,
        unassembled=unassembled,
        provenance=provenance,
        mode=mode,
        stats=stage_stats(provenance),
        reviewer=provenance.review.get("reviewer", provenance.backends.get("review", "unknown")),
        countries=Counter(images["country"].to_pylist()),
        concepts=sorted(set(zip(images["concept_id"].to_pylist(), images["concept"].to_pylist(), strict=True))),
        languages=Counter(images["language_code"].to_pylist()),
        query_langs=Counter(images["query_lang"].to_pylist()),
        formats=Counter(images["format"].to_pylist()),
        timeframe=timeframe,
        timeframe_note=timeframe_note,
        sources=sources,
        unlicensed=unlicensed,
    )


def xcm_facts(
    version: str,
    images: pa.Table,
    benchmark: pa.Table,
    benchmark_cd: pa.Table,
    unassembled: pa.Table,
    provenance: Provenance,
    mode: str = "images",
) -> ReleaseFacts:
    """The facts of a 3XCM release: `images` is `image_metadata` without the image column. `mode` is the
    release's (`urls`: no image bytes, the `image` field is the image's URL)."""
    r = _release(version, images, benchmark, benchmark_cd, unassembled, provenance, mode)
    n, countries, concepts = images.num_rows, r.countries, r.concepts
    return ReleaseFacts(
        name="3XCM (culturebench build)",
        benchmark="3xcm",
        version=version,
        description=(
            f"{n} images of {len(concepts)} culturally inclusive concepts from {len(countries)} countries "
            f"({', '.join(sorted(countries))}), turned into {benchmark.num_rows} RQ2 triplets and "
            f"{benchmark_cd.num_rows} RQ3 sextets of forced-choice text-to-image retrieval, following Evaluating "
            "Perspectival Biases in Cross-Modal Retrieval (3XCM). culturebench build "
            f"{provenance.build_id or '?'}.{r.demo_suffix}"
        ),
        motivation=(
            "3XCM measures whether text-to-image retrieval models prefer images of the query's own language or "
            "culture over the images that answer the query (RQ2), and how a cultural descriptor in another language "
            "shifts that preference (RQ3). This release rebuilds it with culturebench, under stricter candidate "
            f"rules than the published benchmark.{r.demo_suffix}"
        ),
        keywords=("cultural bias", "cross-lingual", "text-to-image retrieval", "3XCM"),
        cite_as=(
            "Cite the paper that defines the benchmark, Evaluating Perspectival Biases in Cross-Modal Retrieval "
            f"(3XCM), and this release as: 3XCM, culturebench build {version} "
            f"(build id {provenance.build_id or '?'})."
        ),
        languages=tuple(sorted(set(r.languages) | {"en"})),
        record_sets=_record_sets(r),
        file_groups=webdataset_groups("image_id"),
        composition=_composition(r),
        rai=_rai(r),
    )


def _rai(r: _Release) -> RaiTexts:
    """The datasheet's RAI texts, one builder per property."""
    return RaiTexts(
        data_collection=_collection(r),
        data_collection_type=_collection_types(r),
        data_collection_timeframe=r.timeframe or "",
        data_preprocessing_protocol=_preprocessing(r),
        data_manipulation_protocol=_manipulation(r),
        data_annotation_protocol=_annotation_protocol(r),
        data_annotation_platform=platforms([r.reviewer]),
        data_annotation_analysis=[_annotation_analysis(r)],
        annotations_per_item=(
            "0: no human labels (auto-accept)." if r.reviewer == AUTO_ACCEPT else f"{r.annotators} per ambiguous pair."
        ),
        machine_annotation_tools=_tools(r),
        personal_sensitive_information=_sensitive(r),
        data_biases=_biases(r),
        data_limitations=_limitations(r),
        data_use_cases=_uses(r),
        data_release_maintenance_plan=maintenance_plan("3xcm", r.version),
    )


def _collection(r: _Release) -> str:
    """How the images were found and fetched: concepts, queries, search, download, what was released."""
    backends, search_stats = r.backends, r.stats.get("search", {})
    search, downloaded = r.config.get("search", {}), stage_line(r.stats, "images", "download")
    return " ".join(
        s
        for s in (
            f"{len(r.concepts)} concepts from {_concept_list(r)} (concept dedup "
            f"`{backends.get('concept_dedup', '?')}`), translated by {_backend(r, 'translations')}.",
            f"{search_stats.get('rows_in', 'an unrecorded number of')} queries (each concept per country, in English "
            f"and in the country's language) went to the `{backends.get('search', '?')}` search backend, "
            f"{search.get('max_results', '?')} results each at most: {search_stats.get('extra', {}).get('hits', '?')} "
            f"hits, {search_stats.get('extra', {}).get('queries_failed', 0)} failed queries.",
            f"The `{backends.get('images', '?')}` downloader fetched them: " + downloaded,
            f"Released: {r.images.num_rows} images from {len(r.countries)} countries.",
            r.sources,
            r.demo_note,
            r.timeframe_note,
        )
        if s
    )


def _concept_list(r: _Release) -> str:
    """Where the concepts came from: the backend that gave them, and for a pack of one's own, the pack (issue 57:
    "shipped" is said of the default pack only)."""
    backend, pack = r.backends.get("concepts", "?"), r.provenance.reference
    if pack is None or pack.default or backend != "shipped":
        return f"the `{backend}` concept list"
    return f"the reference pack's concept list (`concepts.csv` of {code_span(pack.name)} {code_span(pack.version)})"


def _backend(r: _Release, stage: str) -> str:
    pack = r.provenance.reference
    return backend_text(r.backends.get(stage, "?"), None if pack is None or pack.default else pack.name)


def _collection_types(r: _Release) -> list[str]:
    if r.demo:
        return ["Others: generated pictures of the offline demo corpus (software), not collected data"]
    return _collection_type(r.backends.get("search", ""))


def _preprocessing(r: _Release) -> list[str]:
    """Each stage that dropped, merged or changed images, then assembly and validation."""
    stats, backends, provenance = r.stats, r.backends, r.provenance
    dedup, reuse, formats = r.config.get("image_dedup", {}), provenance.reuse, r.formats
    left = Counter(zip(r.unassembled["task"].to_pylist(), r.unassembled["reason"].to_pylist(), strict=True))
    return [
        stage_line(stats, "images", "Download checks (size, decoding, decompression bombs)"),
        stage_line(stats, "concept_dedup", f"Concept deduplication by `{backends.get('concept_dedup', '?')}`"),
        stage_line(
            stats,
            "image_dedup",
            f"Near-duplicate removal (tiers `{backends.get('image_dedup', '?')}`, per {dedup.get('scope', '?')})",
        )
        + f" {stats.get('image_dedup', {}).get('extra', {}).get('review_queue', 0)} ambiguous pairs were queued "
        "for review.",
        stage_line(stats, "review", f"Near-duplicate review (`{r.reviewer}`)"),
        f"Tagging (`{backends.get('tagging', '?')}`): images per tagger: "
        f"{counts(Counter(r.images['tagger'].to_pylist()))}.",
        f"Image format: {counts(formats)}; "
        + (
            f"{r.converted} images not in JPEG were converted once to JPEG (quality 95)."
            if r.converted
            else "all JPEG."
        ),
        f"Assembly (seed {provenance.seeds.get('assembly', '?')}): {r.benchmark.num_rows} RQ2 triplets, "
        f"{r.benchmark_cd.num_rows} RQ3 sextets; candidate reuse RQ2 max "
        f"{reuse.get('rq2', {}).get('max_reuse', '?')}, RQ3 max {reuse.get('rq3', {}).get('max_reuse', '?')}; "
        f"{r.unassembled.num_rows} query slots unassembled"
        + (f" ({', '.join(f'{t} {why} {k}' for (t, why), k in sorted(left.items()))})." if left else "."),
        f"Validation against the benchmark rules: {validation_summary(provenance)}.",
    ]


def _manipulation(r: _Release) -> str:
    return "No image was edited or synthesized. " + (
        f"{r.converted} images not in JPEG ({counts({k: v for k, v in r.formats.items() if k != 'JPEG'})}) were "
        "re-encoded once as JPEG (quality 95) at release; `sha256` keeps the hash of the bytes as downloaded, "
        "`format` their format."
        if r.converted
        else "Every image is published byte for byte as downloaded (all were JPEG)."
    )


def _annotation_protocol(r: _Release) -> list[str]:
    """The near-duplicate review (3XCM App. J) as specified and as this build ran it, the tags, the translations."""
    backends = r.backends
    return [
        "Near-duplicate review (3XCM App. J): each ambiguous pair is shown side by side with the guideline, the "
        f"automatic scores and a prediction; {r.annotators} annotators per pair choose same scene, different or "
        "unsure. A choice wins with more than half of the votes cast; an undecided pair keeps one image and holds "
        "the other back.",
        (
            "In this build no human reviewed the pairs: the auto-accept policy accepted the automatic decisions."
            if r.reviewer == AUTO_ACCEPT
            else f"In this build the pairs were reviewed through `{r.reviewer}`."
        ),
        f"Concept tags: tagger `{backends.get('tagging', '?')}`"
        + (" (each image is tagged with its own concept only)." if backends.get("tagging") == "none" else "."),
        f"Translations: {_backend(r, 'translations')}.",
    ]


def _annotation_analysis(r: _Release) -> str:
    review = r.provenance.review
    analysis = review_analysis(review, "Near-duplicate review")
    if review.get("scenes_fully_held_back"):
        analysis += f" {review['scenes_fully_held_back']} scenes have no image because each of theirs was held back."
    return analysis


def _biases(r: _Release) -> list[str]:
    countries = r.countries
    return [
        f"Images per country range from {min(countries.values(), default=0)} to {max(countries.values(), default=0)} "
        f"({counts(countries)}).",
        f"Images per language: {counts(r.languages)}; per query language: {counts(r.query_langs)}.",
        (
            "The images are generated demo pictures: they carry none of a search engine's cultural or regional "
            "skew, and measure nothing about it."
            if r.demo
            else f"Each country's images are the top results of the `{r.backends.get('search', '?')}` search backend "
            "for its queries: the engine's ranking, index and regional defaults shape what a concept looks like for "
            "each country."
        ),
    ]


def _limitations(r: _Release) -> list[str]:
    limitations = [
        *deviation_lines(r.provenance),
        url_only_line(r.mode, "image"),
        f"{r.unassembled.num_rows} query slots could not be assembled (no eligible candidate).",
        r.timeframe_note,
        r.unlicensed,
    ]
    if r.demo:
        limitations.append(r.demo_note + " It checks the pipeline; it measures no model.")
    return [line for line in limitations if line]


def _sensitive(r: _Release) -> list[str]:
    return [
        "Geography, language and culture: every image is labelled with a country, its language and a culturally "
        "inclusive concept.",
        (
            "The demo corpus is generated pictures, which show no real people."
            if r.demo
            else "The images are search results and may show identifiable people and places; the build applies no "
            "face detection, blurring or removal of personal data. `url` and `source_page` name each image's origin."
        ),
    ]


def _uses(r: _Release) -> list[str]:
    uses = [
        "Testing text-to-image retrieval models for perspectival (language and cultural) bias: "
        f"{r.benchmark.num_rows} RQ2 triplets (`benchmark`) and {r.benchmark_cd.num_rows} RQ3 sextets "
        "(`benchmark_cd`), scored by `culturebench evaluate 3xcm` or the authors' evaluator "
        "(`benchmarks/xcm-bench.csv`).",
        "The split is named `train` because the authors' evaluator expects it; it is a test set.",
        "Research use only (CC BY-NC-SA 4.0); ethical review is required for production use.",
    ]
    if r.demo:
        uses.append("This demo build is for checking the pipeline, not for measuring models.")
    return uses


def _tools(r: _Release) -> list[str]:
    backends = r.backends
    tools = [
        f"Concept deduplication: `{backends.get('concept_dedup', '?')}`.",
        f"Near-duplicates: `{backends.get('image_dedup', '?')}`.",
    ]
    if backends.get("tagging") not in (None, "none"):
        tools.append(f"Multi-label concept tagging: `{backends['tagging']}`.")
    return tools


def _record_sets(r: _Release) -> tuple[RecordSetSpec, ...]:
    urls = r.mode == "urls"
    benchmark, benchmark_cd, unassembled = r.benchmark, r.benchmark_cd, r.unassembled
    return (
        _record_set(
            "image_metadata",
            "The images, one per row: the authors' fields, ours, and the image. The `*_index` columns of the other "
            "record sets are row positions in this one.",
            "image_metadata/*.parquet",
            r.images.schema,
            r.images.num_rows,
            key=("image_id",),
            image_column=None if urls else "image",
            image_url_column="url" if urls else None,
        ),
        _record_set(
            "benchmark",
            "RQ2 triplets: a query in the query country's language, with a correct, a language-biased and an "
            "irrelevant candidate.",
            "benchmark/*.parquet",
            benchmark.schema,
            benchmark.num_rows,
            key=("query_index",),
        ),
        _record_set(
            "benchmark_cd",
            "RQ3 sextets: `{concept} of {Y}` in the language of country X, with six candidates.",
            "benchmark_cd/*.parquet",
            benchmark_cd.schema,
            benchmark_cd.num_rows,
            key=("query_index",),
        ),
        _record_set(
            "unassembled",
            "Each image that is not the query of a triplet (`rq2`) or a sextet (`rq3`), with the slot that had no "
            "eligible candidate.",
            "unassembled/*.parquet",
            unassembled.schema,
            unassembled.num_rows,
            key=("task", "query_index"),
        ),
        _record_set(
            "xcm_bench",
            f"`{XCM_BENCH_CSV}`: the RQ2 triplets with the exact columns of the authors' evaluator.",
            XCM_BENCH_CSV,
            _select(benchmark.schema, XCM_BENCH_CSV_COLUMNS),
            benchmark.num_rows,
            encoding=CSV,
            key=("query_index",),
        ),
    )


def _composition(r: _Release) -> tuple[str, ...]:
    concepts, countries = r.concepts, r.countries
    return (
        f"{r.images.num_rows} images (`image_metadata`), {r.benchmark.num_rows} RQ2 triplets (`benchmark`), "
        f"{r.benchmark_cd.num_rows} RQ3 sextets (`benchmark_cd`), {r.unassembled.num_rows} unassembled query slots "
        "(`unassembled`).",
        f"{len(countries)} countries: {counts(countries)} images.",
        f"{len(concepts)} concepts: "
        + ", ".join(f"{name} ({cid})" for cid, name in concepts[:40])
        + (f", and {len(concepts) - 40} more (see `image_metadata`)." if len(concepts) > 40 else "."),
        f"Languages: {counts(r.languages)} images; query languages: {counts(r.query_langs)}.",
    )


def _select(schema: pa.Schema, names: Sequence[str]) -> pa.Schema:
    return pa.schema([schema.field(name) for name in names])


def _collection_type(search_backend: str) -> list[str]:
    if search_backend == "local":
        return ["Others: images from a local folder; their origin before that folder is not recorded by the build"]
    return ["Web Scraping", f"Web API (image search: `{search_backend}`)"]
