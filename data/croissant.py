"""`croissant.json`: Croissant 1.1 metadata, with the Croissant RAI vocabulary, for every release.

Pure: everything comes from the release's tables (their schemas and rows), the sha256 and size the `ReleaseWriter`
recorded for each file it wrote, and the build's provenance (what the manifest holds: backends, deviations, stage
counts, review agreement). Nothing reads the clock, the disk or the code version, so an identical rebuild writes
identical bytes, and a fact the build did not record is said to be unknown, never guessed.

- `xcm_facts` / `mixcube_facts`: the facts of one release (`ReleaseFacts`): its record sets, the RAI texts and the
  datasheet's composition notes.
- `croissant_jsonld(facts, files, sizes)`: the JSON-LD document; `to_bytes` serializes it.
- `data/datasheet.py` renders the same facts as the card's datasheet section.

Each Parquet config is one record set read from its Parquet files (a FileObject per file, with its sha256); the
images are `sc:ImageObject` fields read from the HF `Image` struct's `bytes`. CSV files are record sets of their
own; the WebDataset shards are listed as FileObjects, and MixCuBe's masks as a FileSet.
"""

from __future__ import annotations

import fnmatch
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from data.card import LICENSE
from data.review_labels import AUTO_ACCEPT
from data.schemas import XCM_BENCH_CSV_COLUMNS

FILE = "croissant.json"
CONFORMS_TO = ["http://mlcommons.org/croissant/1.1", "http://mlcommons.org/croissant/RAI/1.0"]
LICENSE_URLS = {"cc-by-nc-sa-4.0": "https://creativecommons.org/licenses/by-nc-sa/4.0/"}
PARQUET, CSV, TAR, PNG = "application/x-parquet", "text/csv", "application/x-tar", "image/png"
UNKNOWN_TIMEFRAME = "not recorded"

# The JSON-LD context of Croissant 1.1, as mlcroissant writes it (a different one draws a warning from its validator).
CONTEXT: dict[str, Any] = {
    "@language": "en",
    "@vocab": "https://schema.org/",
    "arrayShape": "cr:arrayShape",
    "citeAs": "cr:citeAs",
    "column": "cr:column",
    "conformsTo": "dct:conformsTo",
    "containedIn": "cr:containedIn",
    "cr": "http://mlcommons.org/croissant/",
    "rai": "http://mlcommons.org/croissant/RAI/",
    "data": {"@id": "cr:data", "@type": "@json"},
    "dataType": {"@id": "cr:dataType", "@type": "@vocab"},
    "dct": "http://purl.org/dc/terms/",
    "description": {"@container": "@language"},
    "equivalentProperty": "cr:equivalentProperty",
    "examples": {"@id": "cr:examples", "@type": "@json"},
    "extract": "cr:extract",
    "field": "cr:field",
    "fileProperty": "cr:fileProperty",
    "fileObject": "cr:fileObject",
    "fileSet": "cr:fileSet",
    "format": "cr:format",
    "includes": "cr:includes",
    "isArray": "cr:isArray",
    "isLiveDataset": "cr:isLiveDataset",
    "jsonPath": "cr:jsonPath",
    "key": "cr:key",
    "md5": "cr:md5",
    "name": {"@container": "@language"},
    "parentField": "cr:parentField",
    "path": "cr:path",
    "recordSet": "cr:recordSet",
    "references": "cr:references",
    "regex": "cr:regex",
    "repeated": "cr:repeated",
    "replace": "cr:replace",
    "samplingRate": "cr:samplingRate",
    "sc": "https://schema.org/",
    "separator": "cr:separator",
    "source": "cr:source",
    "subField": "cr:subField",
    "transform": "cr:transform",
}

#: The RAI properties every release states, in this order (the datasheet and the tests read the same list).
RAI_FIELDS = (
    "rai:dataCollection",
    "rai:dataCollectionType",
    "rai:dataCollectionTimeframe",
    "rai:dataPreprocessingProtocol",
    "rai:dataManipulationProtocol",
    "rai:dataAnnotationProtocol",
    "rai:dataAnnotationPlatform",
    "rai:dataAnnotationAnalysis",
    "rai:annotationsPerItem",
    "rai:machineAnnotationTools",
    "rai:personalSensitiveInformation",
    "rai:dataBiases",
    "rai:dataLimitations",
    "rai:dataUseCases",
    "rai:dataReleaseMaintenancePlan",
)


@dataclass(frozen=True)
class RecordSetSpec:
    """One record set: a config's files (matched by `pattern` among the release's files), their column types and
    its key. `image_column` is an HF `Image` struct column (`bytes`, `path`), published as `sc:ImageObject`."""

    name: str
    description: str
    pattern: str
    schema: pa.Schema
    rows: int
    encoding: str = PARQUET
    key: tuple[str, ...] = ()
    image_column: str | None = None
    #: A URL-only release (`release.mode: urls`): the `image` field is this column's URL (`sc:URL`), not bytes.
    image_url_column: str | None = None
    columns: Mapping[str, str] = field(default_factory=dict)  # column -> description


@dataclass(frozen=True)
class FileGroup:
    """Other files of the release: each one a FileObject with its sha256 (`as_set=False`), or one FileSet."""

    id: str
    description: str
    pattern: str
    encoding: str
    as_set: bool = False


@dataclass(frozen=True)
class ReleaseFacts:
    name: str
    benchmark: str
    version: str
    description: str
    motivation: str
    keywords: tuple[str, ...]
    cite_as: str
    languages: tuple[str, ...]
    record_sets: tuple[RecordSetSpec, ...]
    file_groups: tuple[FileGroup, ...]
    composition: tuple[str, ...]  # datasheet lines: what the rows are, per country and category
    rai: dict[str, str | list[str]]


# --- the JSON-LD ---------------------------------------------------------------------------------------------------


def croissant_jsonld(facts: ReleaseFacts, files: Mapping[str, str], sizes: Mapping[str, int] | None = None) -> dict:
    """The Croissant document of a release whose files (release path -> sha256) are `files`."""
    sizes = sizes or {}
    distribution: list[dict[str, Any]] = []
    record_sets = []
    for spec in facts.record_sets:
        matched = _matching(files, spec.pattern, spec.name)
        what = f"A file of `{spec.name}`."
        distribution += [_file_object(path, files[path], sizes.get(path), spec.encoding, what) for path in matched]
        if len(matched) == 1:
            source = {"fileObject": {"@id": matched[0]}}
        else:  # several shards: one FileSet over them, the FileObjects keep each shard's sha256
            set_id = f"{spec.name}-files"
            distribution.append(
                {
                    "@type": "cr:FileSet",
                    "@id": set_id,
                    "name": set_id,
                    "description": f"The {len(matched)} files of `{spec.name}` (each listed with its sha256).",
                    "encodingFormat": spec.encoding,
                    "includes": spec.pattern,
                }
            )
            source = {"fileSet": {"@id": set_id}}
        record_sets.append(_record_set(spec, source))
    for group in facts.file_groups:
        matched = _matching(files, group.pattern, group.id, required=False)
        if not matched:
            continue
        if group.as_set:
            distribution.append(
                {
                    "@type": "cr:FileSet",
                    "@id": group.id,
                    "name": group.id,
                    "description": f"{group.description} ({len(matched)} files)",
                    "encodingFormat": group.encoding,
                    "includes": group.pattern,
                }
            )
        else:
            distribution += [
                _file_object(path, files[path], sizes.get(path), group.encoding, group.description) for path in matched
            ]
    doc: dict[str, Any] = {
        "@context": CONTEXT,
        "@type": "sc:Dataset",
        "conformsTo": CONFORMS_TO,
        "name": facts.name,
        "description": facts.description,
        "version": facts.version,
        "license": LICENSE_URLS.get(LICENSE, LICENSE),
        "keywords": list(facts.keywords),
        "citeAs": facts.cite_as,
        "inLanguage": list(facts.languages),
        "isAccessibleForFree": True,
        "distribution": distribution,
        "recordSet": record_sets,
    }
    doc.update({key: value for key, value in facts.rai.items() if value not in (None, "", [])})
    return doc


def to_bytes(doc: dict) -> bytes:
    return (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode()


def _matching(files: Mapping[str, str], pattern: str, what: str, required: bool = True) -> list[str]:
    matched = sorted(path for path in files if fnmatch.fnmatchcase(path, pattern))
    if required and not matched:
        raise ValueError(f"{what}: no file of the release matches {pattern!r}")
    return matched


def _file_object(path: str, sha256: str, size: int | None, encoding: str, description: str) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "@type": "cr:FileObject",
        "@id": path,
        "name": path,
        "description": description,
        "contentUrl": path,
        "encodingFormat": encoding,
        "sha256": sha256,
    }
    if size is not None:
        entry["contentSize"] = f"{size} B"
    return entry


def _record_set(spec: RecordSetSpec, source: dict[str, Any]) -> dict[str, Any]:
    fields = [_field(spec, column.name, column.type, source) for column in spec.schema]
    if spec.image_column:
        fields.append(
            {
                "@type": "cr:Field",
                "@id": f"{spec.name}/{spec.image_column}",
                "name": spec.image_column,
                "description": spec.columns.get(spec.image_column, "The image (JPEG bytes)."),
                "dataType": "sc:ImageObject",
                "source": {**source, "extract": {"column": spec.image_column}, "transform": {"jsonPath": "bytes"}},
            }
        )
    if spec.image_url_column:
        fields.append(
            {
                "@type": "cr:Field",
                "@id": f"{spec.name}/image",
                "name": "image",
                "description": "Where to download the image (this release holds no image bytes; check the download "
                "against `sha256`).",
                "dataType": "sc:URL",
                "source": {**source, "extract": {"column": spec.image_url_column}},
            }
        )
    out: dict[str, Any] = {
        "@type": "cr:RecordSet",
        "@id": spec.name,
        "name": spec.name,
        "description": f"{spec.description} {spec.rows} records.",
        "field": fields,
    }
    if spec.key:
        keys = [{"@id": f"{spec.name}/{k}"} for k in spec.key]
        out["key"] = keys[0] if len(keys) == 1 else keys
    return out


def _field(spec: RecordSetSpec, column: str, arrow_type: pa.DataType, source: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "@type": "cr:Field",
        "@id": f"{spec.name}/{column}",
        "name": column,
        "description": spec.columns.get(column) or _slot_description(column),
    }
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        entry["dataType"] = data_type(arrow_type.value_type)
        entry["isArray"] = True
        entry["arrayShape"] = "-1"
    else:
        entry["dataType"] = data_type(arrow_type)
    entry["source"] = {**source, "extract": {"column": column}}
    return entry


def _slot_description(column: str) -> str:
    """`query_image_id`, `correct_candidate_index`, ...: a benchmark slot's image and what of it the column holds."""
    for suffix, what in SLOT_SUFFIXES.items():
        if column.endswith(suffix) and column != suffix.lstrip("_"):
            slot = column[: -len(suffix)].replace("_", " ")
            return what.format(slot=slot)
    return f"The `{column}` column."


def data_type(arrow_type: pa.DataType) -> str:
    """The Croissant data type of a Parquet column's type."""
    checks = (
        (pa.types.is_boolean, "sc:Boolean"),
        (pa.types.is_integer, "sc:Integer"),
        (pa.types.is_floating, "sc:Float"),
        (pa.types.is_timestamp, "sc:DateTime"),
        (pa.types.is_date, "sc:Date"),
        (lambda t: pa.types.is_string(t) or pa.types.is_large_string(t), "sc:Text"),
    )
    for check, name in checks:
        if check(arrow_type):
            return name
    raise ValueError(f"no Croissant data type for the Parquet type {arrow_type}")


SLOT_SUFFIXES = {
    "_index": "Row position in `image_metadata` of the {slot} image.",
    "_image_id": "`image_id` of the {slot} image.",
    "_concept": "Concept (English) of the {slot} image.",
    "_country": "Country of the {slot} image.",
}


# --- shared facts ----------------------------------------------------------------------------------------------------


def collection_timeframe(table: pa.Table, column: str = "retrieved_at") -> tuple[str | None, str]:
    """The ISO 8601 interval (`start/end`) of `column` and a sentence about it; None with the reason when the
    table has no such column or no value in it."""
    if column not in table.column_names:
        return None, (
            f"The collection timeframe is not recorded: the released table has no `{column}` column, and the build "
            "records no time of its own."
        )
    values = [_as_datetime(v) for v in table[column].to_pylist() if v is not None]
    values = [v for v in values if v is not None]
    missing = table.num_rows - len(values)
    if not values:
        return None, f"The collection timeframe is not recorded: `{column}` is empty for every row."
    start, end = _iso(min(values)), _iso(max(values))
    note = f" ({missing} of {table.num_rows} rows have no `{column}`)" if missing else ""
    return f"{start}/{end}", f"Images were retrieved between {start} and {end} (`{column}`){note}."


def _as_datetime(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    try:
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def source_lines(table: pa.Table, what: str) -> tuple[str, str]:
    """Which engines returned the images and the licences their sources declare (from the `engine` and `license`
    columns, where the table has them), and a limitation when some declare none."""
    parts, limitation = [], ""
    if "engine" in table.column_names:
        parts.append(f"{what} per search engine: {_counts(Counter(e or 'none' for e in table['engine'].to_pylist()))}.")
    if "license" in table.column_names:
        licenses = Counter(lic or "unknown" for lic in table["license"].to_pylist())
        parts.append(f"Licences as the sources declare them: {_counts(licenses)}.")
        if licenses.get("unknown"):
            limitation = (
                f"{licenses['unknown']} of {table.num_rows} {what.lower()} declare no licence (`license` is `unknown`)."
            )
    return " ".join(parts), limitation


def _stats(provenance: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["stage"]: s for s in provenance.get("stage_stats", [])}


def _reasons(reasons: Mapping[str, int]) -> str:
    return ", ".join(f"{reason} {n}" for reason, n in sorted(reasons.items())) or "none"


def _counts(counter: Mapping[str, int]) -> str:
    return ", ".join(f"{name} {n}" for name, n in sorted(counter.items(), key=lambda kv: (-kv[1], str(kv[0]))))


def _stage_line(stats: Mapping[str, Mapping[str, Any]], stage: str, what: str) -> str:
    s = stats.get(stage)
    if s is None:
        return f"{what}: not recorded."
    dropped = f"; dropped {s['dropped']} ({_reasons(s.get('dropped_by_reason', {}))})" if s.get("dropped") else ""
    return f"{what} (`{stage}`): {s.get('rows_in', 0)} in, {s.get('kept', 0)} kept{dropped}."


def _fmt(value: float | None, digits: int = 4) -> str:
    return "undefined" if value is None else f"{value:.{digits}f}"


def review_analysis(review: Mapping[str, Any], what: str) -> str:
    """How one review round's votes became decisions, with its agreement, or that no human voted."""
    reviewer = review.get("reviewer", "unknown")
    if "tasks" not in review:
        if reviewer == AUTO_ACCEPT:
            return (
                f"{what}: no human annotations were collected (the auto-accept policy decided), so no agreement "
                "was measured."
            )
        return f"{what}: reviewer `{reviewer}`; no annotations were collected, so no agreement was measured."
    agreement = review.get("agreement") or {}
    closed = " The review was closed before every item had all its annotations." if review.get("closed_early") else ""
    return (
        f"{what} (`{reviewer}`): {review['tasks']} items, {review.get('decided', 0)} decided by a strict majority of "
        f"the votes cast, {review.get('undecided', 0)} undecided. Fleiss' kappa {_fmt(agreement.get('fleiss_kappa'))} "
        f"over {agreement.get('tasks_rated', 0)} fully annotated items; unanimous share "
        f"{_fmt(agreement.get('unanimous_share'), 3)}; {agreement.get('disagreements', 0)} items with disagreement."
        f"{closed}"
    )


def _platform(reviewers: Sequence[str]) -> list[str]:
    out = []
    for reviewer in reviewers:
        if reviewer == AUTO_ACCEPT:
            out.append("None: no human annotated; the auto-accept policy decided in the reviewers' place.")
        elif reviewer.startswith("label_studio"):
            how = (
                "tasks exported as files and a completed export imported" if reviewer.endswith("files") else "a server"
            )
            out.append(f"Label Studio (`{reviewer}`: {how}).")
        else:
            out.append(f"`{reviewer}`.")
    return out


def _maintenance(benchmark: str, version: str) -> str:
    return (
        f"Version {version} is immutable: writing it again is accepted only when every file is byte-identical, and "
        "any change needs a new semantic version (semver 2.0.0). Each release's manifest.json records the config, "
        "code version, seeds, stage fingerprints and the sha256 of every file, so a version can be rebuilt and "
        f"checked. The build records no maintainer, update schedule or deprecation date for `{benchmark}` releases: "
        "those are for the publisher to state."
    )


def _deviation_lines(provenance: Mapping[str, Any]) -> list[str]:
    deviations = list(provenance.get("deviations", []))
    if not deviations:
        return ["Every stage ran on the paper's backend with the paper's settings."]
    return [f"Differs from the paper: {d}" for d in deviations]


# --- 3XCM ------------------------------------------------------------------------------------------------------------

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


def xcm_facts(
    version: str,
    images: pa.Table,
    benchmark: pa.Table,
    benchmark_cd: pa.Table,
    unassembled: pa.Table,
    provenance: Mapping[str, Any],
    mode: str = "images",
) -> ReleaseFacts:
    """The facts of a 3XCM release: `images` is `image_metadata` without the image column. `mode` is the
    release's (`urls`: no image bytes, the `image` field is the image's URL)."""
    stats, backends = _stats(provenance), provenance.get("backends", {})
    config, review = provenance.get("config", {}), provenance.get("review", {})
    reviewer = review.get("reviewer", backends.get("review", "unknown"))
    demo = config.get("demo_corpus") is not None
    n = images.num_rows
    countries = Counter(images["country"].to_pylist())
    concepts = sorted(set(zip(images["concept_id"].to_pylist(), images["concept"].to_pylist(), strict=True)))
    languages = Counter(images["language_code"].to_pylist())
    query_langs = Counter(images["query_lang"].to_pylist())
    formats = Counter(images["format"].to_pylist())
    taggers = Counter(images["tagger"].to_pylist())
    converted = n - formats.get("JPEG", 0)
    timeframe, timeframe_note = collection_timeframe(images)
    search, dedup = config.get("search", {}), config.get("image_dedup", {})
    reuse = provenance.get("reuse", {})
    left = Counter(zip(unassembled["task"].to_pylist(), unassembled["reason"].to_pylist(), strict=True))
    demo_note = (
        "This is a demonstration build: its images are the generated pictures of the offline demo corpus, not photos."
        if demo
        else ""
    )
    search_stats = stats.get("search", {})
    sources, unlicensed = source_lines(images, "Images")
    collection = " ".join(
        s
        for s in (
            f"{len(concepts)} concepts from the `{backends.get('concepts', '?')}` concept list (concept dedup "
            f"`{backends.get('concept_dedup', '?')}`), translated by `{backends.get('translations', '?')}`.",
            f"{search_stats.get('rows_in', 'an unrecorded number of')} queries (each concept per country, in English "
            f"and in the country's language) went to the `{backends.get('search', '?')}` search backend, "
            f"{search.get('max_results', '?')} results each at most: {search_stats.get('extra', {}).get('hits', '?')} "
            f"hits, {search_stats.get('extra', {}).get('queries_failed', 0)} failed queries.",
            f"The `{backends.get('images', '?')}` downloader fetched them: " + _stage_line(stats, "images", "download"),
            f"Released: {n} images from {len(countries)} countries.",
            sources,
            demo_note,
            timeframe_note,
        )
        if s
    )
    collection_type = (
        ["Others: generated pictures of the offline demo corpus (software), not collected data"]
        if demo
        else _collection_type_3xcm(backends.get("search", ""))
    )
    preprocessing = [
        _stage_line(stats, "images", "Download checks (size, decoding, decompression bombs)"),
        _stage_line(stats, "concept_dedup", f"Concept deduplication by `{backends.get('concept_dedup', '?')}`"),
        _stage_line(
            stats,
            "image_dedup",
            f"Near-duplicate removal (tiers `{backends.get('image_dedup', '?')}`, per {dedup.get('scope', '?')})",
        )
        + f" {stats.get('image_dedup', {}).get('extra', {}).get('review_queue', 0)} ambiguous pairs were queued "
        "for review.",
        _stage_line(stats, "review", f"Near-duplicate review (`{reviewer}`)"),
        f"Tagging (`{backends.get('tagging', '?')}`): images per tagger: {_counts(taggers)}.",
        f"Image format: {_counts(formats)}; "
        + (f"{converted} images not in JPEG were converted once to JPEG (quality 95)." if converted else "all JPEG."),
        f"Assembly (seed {provenance.get('seeds', {}).get('assembly', '?')}): {benchmark.num_rows} RQ2 triplets, "
        f"{benchmark_cd.num_rows} RQ3 sextets; candidate reuse RQ2 max {reuse.get('rq2', {}).get('max_reuse', '?')}, "
        f"RQ3 max {reuse.get('rq3', {}).get('max_reuse', '?')}; {unassembled.num_rows} query slots unassembled"
        + (f" ({', '.join(f'{t} {r} {k}' for (t, r), k in sorted(left.items()))})." if left else "."),
        f"Validation against the benchmark rules: {provenance.get('validation', {}).get('summary', 'not run')}.",
    ]
    manipulation = "No image was edited or synthesized. " + (
        f"{converted} images not in JPEG ({_counts({k: v for k, v in formats.items() if k != 'JPEG'})}) were "
        "re-encoded once as JPEG (quality 95) at release; `sha256` keeps the hash of the bytes as downloaded, "
        "`format` their format."
        if converted
        else "Every image is published byte for byte as downloaded (all were JPEG)."
    )
    annotators = config.get("review", {}).get("annotators", "?")
    annotation_protocol = [
        "Near-duplicate review (3XCM App. J): each ambiguous pair is shown side by side with the guideline, the "
        f"automatic scores and a prediction; {annotators} annotators per pair choose same scene, different or "
        "unsure. A choice wins with more than half of the votes cast; an undecided pair keeps one image and holds "
        "the other back.",
        (
            "In this build no human reviewed the pairs: the auto-accept policy accepted the automatic decisions."
            if reviewer == AUTO_ACCEPT
            else f"In this build the pairs were reviewed through `{reviewer}`."
        ),
        f"Concept tags: tagger `{backends.get('tagging', '?')}`"
        + (" (each image is tagged with its own concept only)." if backends.get("tagging") == "none" else "."),
        f"Translations: `{backends.get('translations', '?')}`.",
    ]
    analysis = review_analysis(review, "Near-duplicate review")
    if review.get("scenes_fully_held_back"):
        analysis += f" {review['scenes_fully_held_back']} scenes have no image because each of theirs was held back."
    biases = [
        f"Images per country range from {min(countries.values(), default=0)} to {max(countries.values(), default=0)} "
        f"({_counts(countries)}).",
        f"Images per language: {_counts(languages)}; per query language: {_counts(query_langs)}.",
        (
            "The images are generated demo pictures: they carry none of a search engine's cultural or regional "
            "skew, and measure nothing about it."
            if demo
            else f"Each country's images are the top results of the `{backends.get('search', '?')}` search backend for "
            "its queries: the engine's ranking, index and regional defaults shape what a concept looks like for "
            "each country."
        ),
    ]
    limitations = [
        *_deviation_lines(provenance),
        _url_only_line(mode, "image"),
        f"{unassembled.num_rows} query slots could not be assembled (no eligible candidate).",
        timeframe_note,
        unlicensed,
    ]
    if demo:
        limitations.append(demo_note + " It checks the pipeline; it measures no model.")
    sensitive = [
        "Geography, language and culture: every image is labelled with a country, its language and a culturally "
        "inclusive concept.",
        (
            "The demo corpus is generated pictures, which show no real people."
            if demo
            else "The images are search results and may show identifiable people and places; the build applies no "
            "face detection, blurring or removal of personal data. `url` and `source_page` name each image's origin."
        ),
    ]
    uses = [
        f"Testing text-to-image retrieval models for perspectival (language and cultural) bias: {benchmark.num_rows} "
        f"RQ2 triplets (`benchmark`) and {benchmark_cd.num_rows} RQ3 sextets (`benchmark_cd`), scored by "
        "`culturebench evaluate 3xcm` or the authors' evaluator (`benchmarks/xcm-bench.csv`).",
        "The split is named `train` because the authors' evaluator expects it; it is a test set.",
        "Research use only (CC BY-NC-SA 4.0); ethical review is required for production use.",
    ]
    if demo:
        uses.append("This demo build is for checking the pipeline, not for measuring models.")
    tools = [
        f"Concept deduplication: `{backends.get('concept_dedup', '?')}`.",
        f"Near-duplicates: `{backends.get('image_dedup', '?')}`.",
    ]
    if backends.get("tagging") not in (None, "none"):
        tools.append(f"Multi-label concept tagging: `{backends['tagging']}`.")
    rai: dict[str, str | list[str]] = {
        "rai:dataCollection": collection,
        "rai:dataCollectionType": collection_type,
        "rai:dataCollectionTimeframe": timeframe or "",
        "rai:dataPreprocessingProtocol": preprocessing,
        "rai:dataManipulationProtocol": manipulation,
        "rai:dataAnnotationProtocol": annotation_protocol,
        "rai:dataAnnotationPlatform": _platform([reviewer]),
        "rai:dataAnnotationAnalysis": [analysis],
        "rai:annotationsPerItem": (
            "0: no human labels (auto-accept)." if reviewer == AUTO_ACCEPT else f"{annotators} per ambiguous pair."
        ),
        "rai:machineAnnotationTools": tools,
        "rai:personalSensitiveInformation": sensitive,
        "rai:dataBiases": biases,
        "rai:dataLimitations": [line for line in limitations if line],
        "rai:dataUseCases": uses,
        "rai:dataReleaseMaintenancePlan": _maintenance("3xcm", version),
    }
    ordered_langs = tuple(sorted(set(languages) | {"en"}))
    record_sets = (
        RecordSetSpec(
            "image_metadata",
            "The images, one per row: the authors' fields, ours, and the image. The `*_index` columns of the other "
            "record sets are row positions in this one.",
            "image_metadata/*.parquet",
            images.schema,
            n,
            key=("image_id",),
            image_column=None if mode == "urls" else "image",
            image_url_column="url" if mode == "urls" else None,
            columns=XCM_COLUMNS,
        ),
        RecordSetSpec(
            "benchmark",
            "RQ2 triplets: a query in the query country's language, with a correct, a language-biased and an "
            "irrelevant candidate.",
            "benchmark/*.parquet",
            benchmark.schema,
            benchmark.num_rows,
            key=("query_index",),
            columns=XCM_COLUMNS,
        ),
        RecordSetSpec(
            "benchmark_cd",
            "RQ3 sextets: `{concept} of {Y}` in the language of country X, with six candidates.",
            "benchmark_cd/*.parquet",
            benchmark_cd.schema,
            benchmark_cd.num_rows,
            key=("query_index",),
            columns=XCM_COLUMNS,
        ),
        RecordSetSpec(
            "unassembled",
            "Each image that is not the query of a triplet (`rq2`) or a sextet (`rq3`), with the slot that had no "
            "eligible candidate.",
            "unassembled/*.parquet",
            unassembled.schema,
            unassembled.num_rows,
            key=("task", "query_index"),
            columns=XCM_COLUMNS,
        ),
        RecordSetSpec(
            "xcm_bench",
            "`benchmarks/xcm-bench.csv`: the RQ2 triplets with the exact columns of the authors' evaluator.",
            "benchmarks/xcm-bench.csv",
            _select(benchmark.schema, XCM_BENCH_CSV_COLUMNS),
            benchmark.num_rows,
            encoding=CSV,
            key=("query_index",),
            columns=XCM_COLUMNS,
        ),
    )
    countries_text = ", ".join(sorted(countries))
    demo_suffix = f" {demo_note}" if demo else ""
    return ReleaseFacts(
        name="3XCM (culturebench build)",
        benchmark="3xcm",
        version=version,
        description=(
            f"{n} images of {len(concepts)} culturally inclusive concepts from {len(countries)} countries "
            f"({countries_text}), turned into {benchmark.num_rows} RQ2 triplets and {benchmark_cd.num_rows} RQ3 "
            "sextets of forced-choice text-to-image retrieval, following Evaluating Perspectival Biases in "
            f"Cross-Modal Retrieval (3XCM). culturebench build {provenance.get('build_id', '?')}.{demo_suffix}"
        ),
        motivation=(
            "3XCM measures whether text-to-image retrieval models prefer images of the query's own language or "
            "culture over the images that answer the query (RQ2), and how a cultural descriptor in another language "
            "shifts that preference (RQ3). This release rebuilds it with culturebench, under stricter candidate "
            f"rules than the published benchmark.{demo_suffix}"
        ),
        keywords=("cultural bias", "cross-lingual", "text-to-image retrieval", "3XCM"),
        cite_as=(
            "Cite the paper that defines the benchmark, Evaluating Perspectival Biases in Cross-Modal Retrieval "
            f"(3XCM), and this release as: 3XCM, culturebench build {version} "
            f"(build id {provenance.get('build_id', '?')})."
        ),
        languages=ordered_langs,
        record_sets=record_sets,
        file_groups=(
            FileGroup(
                "webdataset",
                "A WebDataset shard: `<image_id>.jpg` and `<image_id>.json` per image.",
                "images/*.tar",
                TAR,
            ),
        ),
        composition=(
            f"{n} images (`image_metadata`), {benchmark.num_rows} RQ2 triplets (`benchmark`), "
            f"{benchmark_cd.num_rows} RQ3 sextets (`benchmark_cd`), {unassembled.num_rows} unassembled query slots "
            "(`unassembled`).",
            f"{len(countries)} countries: {_counts(countries)} images.",
            f"{len(concepts)} concepts: "
            + ", ".join(f"{name} ({cid})" for cid, name in concepts[:40])
            + (f", and {len(concepts) - 40} more (see `image_metadata`)." if len(concepts) > 40 else "."),
            f"Languages: {_counts(languages)} images; query languages: {_counts(query_langs)}.",
        ),
        rai=rai,
    )


def _url_only_line(mode: str, what: str) -> str:
    if mode != "urls":
        return ""
    return (
        f"URL-only release: each {what} is named by its URL, sha256 and pHash, without its bytes; what a source "
        "removed or changed since the build is gone (`culturebench fetch-release` reports it)."
    )


def _select(schema: pa.Schema, names: Sequence[str]) -> pa.Schema:
    return pa.schema([schema.field(name) for name in names])


def _collection_type_3xcm(search_backend: str) -> list[str]:
    if search_backend == "local":
        return ["Others: images from a local folder; their origin before that folder is not recorded by the build"]
    return ["Web Scraping", f"Web API (image search: `{search_backend}`)"]


# --- MixCuBe ---------------------------------------------------------------------------------------------------------

MIXCUBE_COLUMNS = {
    "country": "The culture, as an adjective.",
    "category": "Food, Festival or Clothes.",
    "ethnicity": "`original`, or the ethnicity the people were inpainted into.",
    "sample_id": "This image's id (`<original_id>-<ethnicity>`).",
    "original_id": "The original photo's id.",
    "attempt_id": "The accepted synthesis attempt (null for the original).",
    "mask_sha256": "The inpainting mask, `masks/<sha256>.png`.",
    "prompt": "The inpainting prompt (App. B.1, or the reviewers' retry prompt).",
    "seed": "The inpainting seed.",
    "model_id": "The inpainting model.",
    "brisque": "BRISQUE score (null when the filter was off).",
    "clip_similarity": "CLIP image-image similarity to the original (null when the filter was off).",
    "review_decision": "The synthesis QA decision.",
    "reviewer": "Who decided (`auto_accept`: no human).",
    "placeholder": "True when the offline placeholder painted the mask instead of a synthesis.",
    "food_label": "The food's name (Food images).",
    "sha256": "sha256 of the image bytes before the release's JPEG encoding.",
    "phash": "64-bit perceptual hash (imagehash pHash) of the image, 16 hex digits (URL-only releases).",
    "num_bytes": "Size of those bytes.",
    "image": "The image, JPEG bytes (an HF `Image` feature).",
    "synthesized": "True for a swap (its source columns are its original's).",
    "engine": "The search engine that returned the original.",
    "query": "The search query that returned the original.",
    "query_language": "The query's language code.",
    "region": "The search engine's region code.",
    "rank": "The original's rank among the query's results (1 is the top hit).",
    "source_page": "The page the original was found on.",
    "url": "The original's URL (a local file: its path relative to its folder).",
    "final_url": "The original's URL after redirects.",
    "retrieved_at": "When the original was retrieved (ISO 8601, UTC).",
    "http_status": "The HTTP status of the download.",
    "content_type": "The content type the server declared.",
    "license": "The original's licence as its source declares it (`unknown` when it declares none).",
    "license_filter": "The search engine's licence filter, when one was on.",
    "image_file": "`<sample_id>.jpg`.",
    "label": "The food's name.",
}


def mixcube_facts(version: str, rows: pa.Table, provenance: Mapping[str, Any], mode: str = "images") -> ReleaseFacts:
    """The facts of a MixCuBe release: `rows` is the `default` config without the image column. In a URL-only
    release (`mode` `urls`) only the swaps carry bytes; an original is its `url`, `sha256` and `phash`."""
    stats, backends = _stats(provenance), provenance.get("backends", {})
    config, models = provenance.get("config", {}), provenance.get("models", {})
    demo = bool(provenance.get("demo"))
    n = rows.num_rows
    ethnicity = Counter(rows["ethnicity"].to_pylist())
    originals = ethnicity.get("original", 0)
    swaps = n - originals
    cultures = Counter(
        c for c, e in zip(rows["country"].to_pylist(), rows["ethnicity"].to_pylist(), strict=True) if e == "original"
    )
    categories = Counter(
        c for c, e in zip(rows["category"].to_pylist(), rows["ethnicity"].to_pylist(), strict=True) if e == "original"
    )
    placeholders = sum(bool(p) for p in rows["placeholder"].to_pylist())
    reviewers = Counter(r for r in rows["reviewer"].to_pylist() if r)
    decisions = Counter(d for d in rows["review_decision"].to_pylist() if d)
    food = rows.filter(pa.compute.equal(rows["category"], "Food")).num_rows
    originals_only = rows.filter(pa.compute.equal(rows["ethnicity"], "original"))  # a swap repeats its source
    timeframe, timeframe_note = collection_timeframe(originals_only)
    sources, unlicensed = source_lines(originals_only, "Originals")
    qa_rounds = sorted((s for s in stats.values() if s["stage"].startswith("qa_")), key=lambda s: int(s["stage"][4:]))
    synthesis = [s for s in stats.values() if s["stage"].startswith("synthesis_")]
    attempts = sum(s.get("rows_in", 0) for s in synthesis)
    incomplete = provenance.get("incomplete", [])
    left = provenance.get("left_over_by_outcome", {})
    short = provenance.get("cells_below_target", [])
    originals_backend = backends.get("originals", "?")
    demo_note = (
        "This is a demonstration build: the originals are composed from a stock portrait, not collected photos."
        if demo
        else ""
    )
    collection = " ".join(
        s
        for s in (
            f"Originals from the `{originals_backend}` backend: " + _stage_line(stats, "originals", "originals"),
            _stage_line(stats, "faces", f"Faces (`{models.get('faces', backends.get('faces', '?'))}`)"),
            f"Released: {originals} originals from {len(cultures)} cultures ({_counts(cultures)}) and "
            f"{len(categories)} categories ({_counts(categories)}), each followed by its swaps: {n} images.",
            sources,
            demo_note,
            timeframe_note,
        )
        if s
    )
    if demo:
        collection_type = ["Others: composed from a stock portrait (demonstration), not collected photos"]
    elif originals_backend == "search":
        collection_type = ["Web Scraping", "Web API (image search per culture and category)"]
    elif originals_backend == "local":
        collection_type = ["Manual Human Curator (a labelled folder of photos, curated by people)"]
    else:
        collection_type = [f"Others: originals backend `{originals_backend}`"]
    collection_type.append("Others: synthetic images, the people inpainted into other ethnicities")
    inpaint_config = config.get("inpaint", {})
    settings = ", ".join(
        f"{k} {inpaint_config[k]}" for k in ("num_inference_steps", "guidance_scale", "strength") if k in inpaint_config
    )
    filters = config.get("filters", {})
    brisque, clip = filters.get("brisque"), filters.get("clip")
    manipulation = " ".join(
        s
        for s in (
            f"Each original's people are inpainted into {len(ethnicity) - 1} ethnicities "
            f"({', '.join(sorted(e for e in ethnicity if e != 'original'))}).",
            f"Faces: `{models.get('faces', '?')}`; masks: `{models.get('masks', '?')}` "
            "(stored as `masks/<sha256>.png`).",
            f"Inpainting: `{backends.get('inpaint', '?')}`, models {', '.join(models.get('inpaint', [])) or 'none'}"
            + (f" ({settings})" if settings else "")
            + ", the App. B.1 prompt per category and ethnicity, one seed per (original, ethnicity, attempt).",
            (
                f"{placeholders} of {swaps} swaps are placeholders: the offline stand-in painted the mask instead "
                "of synthesizing."
                if placeholders
                else ""
            ),
            "Filters: BRISQUE "
            + (f"keeps a score <= {brisque.get('max_score')}" if brisque else "off")
            + "; CLIP similarity "
            + (f"keeps [{clip.get('min_similarity')}, {clip.get('max_similarity')}]" if clip else "off")
            + ".",
            f"{attempts} synthesis attempts in {len(synthesis)} rounds (at most "
            f"{config.get('max_attempts', '?')} attempts per pair); a rejected attempt is drawn again, nothing is "
            "overwritten.",
            "Originals are stored upright: a photo's EXIF orientation is applied once at ingest.",
        )
        if s
    )
    preprocessing = [
        _stage_line(stats, "originals", "Ingest (labels, paths, decoding, minimum size)"),
        _stage_line(stats, "faces", "Face detection (an original needs a face)"),
        _stage_line(stats, "masks", "Masks"),
        *[
            _stage_line(stats, s["stage"], "Automatic filters")
            for s in sorted(stats.values(), key=lambda s: s["stage"])
            if s["stage"].startswith("filters_") and s.get("rows_in")
        ],
        f"Quintets: each original followed by its latest accepted swap per ethnicity; {len(incomplete)} originals "
        "left out for lack of an accepted swap"
        + (f"; swaps never accepted, by last outcome: {_reasons(left)}." if left else "."),
        "Images are published as JPEG (quality 95 for those that were not JPEG); `sha256` keeps the hash of the "
        "stored bytes.",
    ]
    annotators = config.get("qa", {}).get("annotators", "?")
    round_reviewers = [
        s.get("extra", {}).get("review", {}).get("reviewer", "unknown") for s in qa_rounds if s.get("rows_in")
    ]
    human = [r for r in round_reviewers if r != AUTO_ACCEPT]
    annotation_protocol = [
        "Synthesis QA (MixCuBe §2): the original (with a brush to fix the mask), the synthesized image and the mask "
        f"are shown side by side with the filter scores; {annotators} annotators per attempt accept it, reject it "
        "for artifacts or for a changed cultural marker, ask for a retry with a prompt, or fix the mask. A choice "
        "wins with more than half of the votes cast.",
        (
            "In this build no human reviewed the synthesized images: the auto-accept policy accepted them."
            if not human
            else f"In this build the attempts were reviewed through {', '.join(f'`{r}`' for r in sorted(set(human)))}."
        ),
        f"Released swaps by decision: {_counts(decisions) or 'none'}; by reviewer: {_counts(reviewers) or 'none'}.",
    ]
    analysis = [
        review_analysis(s.get("extra", {}).get("review", {}), f"Synthesis QA round {s['stage'][4:]}")
        for s in qa_rounds
        if s.get("rows_in")
    ] or ["No attempt reached synthesis QA, so no agreement was measured."]
    biases = [
        f"Originals per culture: {_counts(cultures)}; per category: {_counts(categories)}.",
        f"Swaps use {len(ethnicity) - 1} coarse ethnicity labels, rendered by the inpainting model from a prompt: "
        "the model's own associations shape how each is drawn."
        if placeholders < swaps
        else f"Swaps use {len(ethnicity) - 1} coarse ethnicity labels; in this build no model drew them (every swap is "
        "a placeholder).",
    ]
    if short:
        biases.append(
            f"Cells short of {short[0]['target']} originals: "
            + ", ".join(f"{c['country']} {c['category']} {c['originals']}" for c in short)
            + "."
        )
    limitations = [*_deviation_lines(provenance)]
    if placeholders:
        limitations.append(f"{placeholders} images are placeholders, not syntheses (`placeholder=true`).")
    if incomplete:
        limitations.append(
            f"{len(incomplete)} originals are left out for lack of an accepted swap (manifest `incomplete`)."
        )
    limitations += [timeframe_note, unlicensed, _url_only_line(mode, "original")]
    if demo:
        limitations.append(demo_note + " It checks the pipeline; it measures no model.")
    sensitive = [
        "Ethnicity (perceived, and altered by inpainting), culture and geography: every image is labelled with a "
        "culture and an ethnicity.",
        (
            "The demo originals are composed from one stock portrait."
            if demo
            else "Every original shows at least one person (the face stage requires a face); faces are not blurred."
        ),
        (
            "The swaps show synthetic people who do not exist, placed in real scenes."
            if placeholders < swaps
            else "The swaps are placeholders: the masked people are painted over, no person is drawn."
        ),
    ]
    uses = [
        f"Testing vision-language models for cultural and ethnic bias: {originals} quintets, questions about an "
        "image's culture (and its food's name) asked of the original and of its swaps (`culturebench evaluate "
        "mixcube`).",
        "Research use only (CC BY-NC-SA 4.0); ethical review is required for production use. Swapped images are "
        "synthetic and must not be presented as photos of real people.",
    ]
    if demo:
        uses.append("This demo build is for checking the pipeline, not for measuring models.")
    tools = [
        f"Face detection: `{models.get('faces', '?')}`.",
        f"Masks: `{models.get('masks', '?')}`.",
        f"Inpainting: {', '.join(models.get('inpaint', [])) or 'none'}.",
        f"BRISQUE: `{backends.get('brisque', '?')}`; CLIP: `{backends.get('clip', '?')}`.",
    ]
    rai: dict[str, str | list[str]] = {
        "rai:dataCollection": collection,
        "rai:dataCollectionType": collection_type,
        "rai:dataCollectionTimeframe": timeframe or "",
        "rai:dataPreprocessingProtocol": preprocessing,
        "rai:dataManipulationProtocol": manipulation,
        "rai:dataAnnotationProtocol": annotation_protocol,
        "rai:dataAnnotationPlatform": _platform(sorted(set(round_reviewers)) or [AUTO_ACCEPT]),
        "rai:dataAnnotationAnalysis": analysis,
        "rai:annotationsPerItem": (
            "0: no human labels (auto-accept)." if not human else f"{annotators} per synthesis attempt."
        ),
        "rai:machineAnnotationTools": tools,
        "rai:personalSensitiveInformation": sensitive,
        "rai:dataBiases": biases,
        "rai:dataLimitations": [line for line in limitations if line],
        "rai:dataUseCases": uses,
        "rai:dataReleaseMaintenancePlan": _maintenance("mixcube", version),
    }
    labels_schema = pa.schema([pa.field("image_file", pa.string()), pa.field("label", pa.string())])
    demo_suffix = f" {demo_note}" if demo else ""
    return ReleaseFacts(
        name="MixCuBe (culturebench build)",
        benchmark="mixcube",
        version=version,
        description=(
            f"{originals} photos of food, festivals and clothing from {len(cultures)} cultures, each followed by "
            f"{len(ethnicity) - 1} copies whose people were inpainted into another ethnicity ({n} images), following "
            f"When Tom Eats Kimchi (MixCuBe). culturebench build {provenance.get('build_id', '?')}.{demo_suffix}"
        ),
        motivation=(
            "MixCuBe measures whether vision-language models recognize a culture (its food, festivals and clothing) "
            "as well when the people in the picture are of another ethnicity: each original is paired with swaps "
            f"that change only the people.{demo_suffix}"
        ),
        keywords=("cultural bias", "inpainting", "vision-language models", "MixCuBe"),
        cite_as=(
            "Cite the paper that defines the benchmark, When Tom Eats Kimchi (MixCuBe), and this release as: "
            f"MixCuBe, culturebench build {version} (build id {provenance.get('build_id', '?')})."
        ),
        languages=("en",),
        record_sets=(
            RecordSetSpec(
                "default",
                "Each original followed by its swaps, one image per row.",
                "default/*.parquet",
                rows.schema,
                n,
                key=("sample_id",),
                image_column="image",
                columns=MIXCUBE_COLUMNS,
            ),
            RecordSetSpec(
                "food_label",
                "`food_label.csv`: the food images with their food's name.",
                "food_label.csv",
                labels_schema,
                food,
                encoding=CSV,
                key=("image_file",),
                columns=MIXCUBE_COLUMNS,
            ),
        ),
        file_groups=(
            FileGroup(
                "webdataset",
                "A WebDataset shard: `<sample_id>.jpg` and `<sample_id>.json` per image.",
                "images/*.tar",
                TAR,
            ),
            FileGroup(
                "masks",
                "The inpainting masks, each named by its sha256 (`mask_sha256`)",
                "masks/*.png",
                PNG,
                as_set=True,
            ),
        ),
        composition=(
            f"{n} images: {originals} originals and {swaps} swaps ({_counts(ethnicity)}).",
            f"Cultures: {_counts(cultures)} originals; categories: {_counts(categories)} originals.",
            f"{food} Food images carry a food name (`food_label.csv`).",
        ),
        rai=rai,
    )
