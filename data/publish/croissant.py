"""`croissant.json`: Croissant 1.1 metadata, with the Croissant RAI vocabulary, as JSON-LD building blocks.

Pure: everything comes from a release's facts (`ReleaseFacts`: its record sets, the RAI texts and the datasheet's
composition notes, which each benchmark states from its tables and provenance), the sha256 and size the writer
recorded for each file it wrote. Nothing reads the clock, the disk or the code version, so an identical rebuild
writes identical bytes, and a fact the build did not record is said to be unknown, never guessed.

- `croissant_jsonld(facts, files, sizes)`: the JSON-LD document; `to_bytes` serializes it.
- `collection_timeframe`: the RAI collection timeframe of a table's `retrieved_at`; `data/publish/rai.py` holds the
  other helpers the benchmarks' RAI texts share.
- `data/publish/datasheet.py` renders the same facts as the card's datasheet section.
- Each benchmark states its facts beside its release writer (`flows/<benchmark>/release_facts.py`).

Each Parquet config is one record set read from its Parquet files (a FileObject per file, with its sha256); the
images are `sc:ImageObject` fields read from the HF `Image` struct's `bytes`. CSV files are record sets of their
own; other files (WebDataset shards, masks) are listed as FileObjects or as a FileSet.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from pydantic import JsonValue

from data.publish.card import LICENSE
from data.publish.rai import RaiTexts
from data.reference import ReferencePack

FILE = "croissant.json"
CONFORMS_TO = ["http://mlcommons.org/croissant/1.1", "http://mlcommons.org/croissant/RAI/1.0"]
LICENSE_URLS = {"cc-by-nc-sa-4.0": "https://creativecommons.org/licenses/by-nc-sa/4.0/"}
PARQUET, CSV, TAR, PNG = "application/x-parquet", "text/csv", "application/x-tar", "image/png"

# The JSON-LD context of Croissant 1.1, as mlcroissant writes it (a different one draws a warning from its validator).
CONTEXT: dict[str, JsonValue] = {
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


def webdataset_groups(key: str) -> tuple[FileGroup, ...]:
    """The WebDataset tars (`<key>.jpg` and `<key>.json` per image) and the features file beside them."""
    return (
        FileGroup(
            "webdataset",
            f"A WebDataset shard: `<{key}>.jpg` and `<{key}>.json` per image.",
            "images/*.tar",
            TAR,
        ),
        FileGroup(
            "webdataset_features",
            'The `datasets` features of the WebDataset samples, for `load_dataset("webdataset", features=...)`.',
            "images/features.json",
            "application/json",
        ),
    )


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
    rai: RaiTexts
    # The reference pack's countries with their regions, as `spatialCoverage` (schema.org Place), and its record.
    coverage: tuple[tuple[str, str], ...] = ()
    reference: str = ""  # one sentence naming the pack the release was built from


# --- the JSON-LD ---------------------------------------------------------------------------------------------------


def croissant_jsonld(
    facts: ReleaseFacts, files: Mapping[str, str], sizes: Mapping[str, int] | None = None
) -> dict[str, JsonValue]:
    """The Croissant document of a release whose files (release path -> sha256) are `files`."""
    sizes = sizes or {}
    distribution: list[JsonValue] = []
    record_sets: list[JsonValue] = []
    for spec in facts.record_sets:
        matched = _matching(files, spec.pattern, spec.name)
        what = f"A file of `{spec.name}`."
        source: dict[str, JsonValue]
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
    doc: dict[str, JsonValue] = {
        "@context": CONTEXT,
        "@type": "sc:Dataset",
        "conformsTo": [*CONFORMS_TO],
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
    if facts.coverage:
        doc["spatialCoverage"] = [
            {"@type": "sc:Place", "name": country, "containedInPlace": {"@type": "sc:Place", "name": region}}
            for country, region in facts.coverage
        ]
    if facts.reference:
        doc["description"] = f"{doc['description']} {facts.reference}"
    doc.update({name: text if isinstance(text, str) else [*text] for name, text in facts.rai.as_jsonld().items()})
    return doc


def with_pack(facts: ReleaseFacts, pack: ReferencePack, countries: Collection[str]) -> ReleaseFacts:
    """`facts` with the reference pack's countries (those the release holds), their regions, and its name."""
    coverage = tuple((c.name, c.region) for c in pack.countries if c.name in countries)
    return replace(facts, coverage=coverage, reference=pack_sentence(pack))


def pack_sentence(pack: ReferencePack) -> str:
    """Which pack a release was built from, in one sentence (for the card and Croissant)."""
    which = "the shipped default reference pack" if pack.is_default else "the reference pack"
    return (
        f"Built from {which} {pack.info.name} {pack.info.version} (sha256 {pack.digest}), which the release "
        "carries in reference/."
    )


def to_bytes(doc: dict[str, JsonValue]) -> bytes:
    return (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode()


def _matching(files: Mapping[str, str], pattern: str, what: str, required: bool = True) -> list[str]:
    matched = sorted(path for path in files if fnmatch.fnmatchcase(path, pattern))
    if required and not matched:
        raise ValueError(f"{what}: no file of the release matches {pattern!r}")
    return matched


def _file_object(path: str, sha256: str, size: int | None, encoding: str, description: str) -> dict[str, JsonValue]:
    entry: dict[str, JsonValue] = {
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


def _record_set(spec: RecordSetSpec, source: dict[str, JsonValue]) -> dict[str, JsonValue]:
    fields: list[JsonValue] = [_field(spec, column.name, column.type, source) for column in spec.schema]
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
    out: dict[str, JsonValue] = {
        "@type": "cr:RecordSet",
        "@id": spec.name,
        "name": spec.name,
        "description": f"{spec.description} {spec.rows} records.",
        "field": fields,
    }
    if spec.key:
        keys: list[JsonValue] = [{"@id": f"{spec.name}/{k}"} for k in spec.key]
        out["key"] = keys[0] if len(keys) == 1 else keys
    return out


def _field(
    spec: RecordSetSpec, column: str, arrow_type: pa.DataType, source: dict[str, JsonValue]
) -> dict[str, JsonValue]:
    entry: dict[str, JsonValue] = {
        "@type": "cr:Field",
        "@id": f"{spec.name}/{column}",
        "name": column,
        "description": spec.columns.get(column) or f"The `{column}` column.",
    }
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        entry["dataType"] = data_type(arrow_type.value_type)
        entry["isArray"] = True
        entry["arrayShape"] = "-1"
    else:
        entry["dataType"] = data_type(arrow_type)
    entry["source"] = {**source, "extract": {"column": column}}
    return entry


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


# --- the collection timeframe ----------------------------------------------------------------------------------------


def collection_timeframe(table: pa.Table, column: str = "retrieved_at") -> tuple[str | None, str]:
    """The ISO 8601 interval (`start/end`) of `column` and a sentence about it; None with the reason when the
    table has no such column or no value in it."""
    if column not in table.column_names:
        return None, (
            f"The collection timeframe is not recorded: the released table has no `{column}` column, and the build "
            "records no time of its own."
        )
    parsed = [_as_datetime(v) for v in table[column].to_pylist() if v is not None]
    values = [v for v in parsed if v is not None]
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
