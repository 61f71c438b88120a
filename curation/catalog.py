"""The image table (`image_metadata`): every stored image that survived dedup and review, in a fixed order.

Row order, and so `index_in_dataset`, is concept id, then the reference country order, then the English query
before the native one, then search rank. The benchmark tables refer to images by these row positions.

An image's tags are the concepts it shows: its own, the tagger's, and those of every exact-byte or exact-pixel copy
of it found under another concept (`curation/copies.py`), kept or not. A copy of a food picture filed under "dance"
therefore shows food too, and is never a "not food" distractor.

Each row carries its provenance (docs/release-managers.md, "Image provenance"): the search hit's engine, query, region,
rank, source page, licence filter and declared licence (`unknown` when the source declares none), and the fetch's final
URL, HTTP status, content type and retrieval time. A local corpus's manifest may declare the image's web URL (published
as `url` instead of the file's path) and its retrieval time, which then stands for the fetch's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from data.image_sources import declared_license
from data.reference import Country, ReferencePack
from data.schemas import IMAGE_METADATA, STATUS_OK


def build_catalog(
    concepts: pa.Table,
    search_hits: pa.Table,
    images: pa.Table,
    review: pa.Table,
    tags: pa.Table,
    translations: pa.Table,
    copies: pa.Table,
    pack: ReferencePack,
    public_url: Callable[[str], str] = lambda url: url,
) -> pa.Table:
    """`public_url` turns a fetch location into what the release records (local paths become relative); `pack`
    names the countries (language, group, order).

    Columnar: the columns are taken with Arrow, and only the derived ones (url, licence, tags) pass
    through Python, one list each; a dict per image of every input table cost about 6 GB at a million images."""
    ok_hits = search_hits.filter(pc.equal(search_hits["status"], STATUS_OK))
    kept = review.filter(review["keep"])["image_id"]
    chosen = images.filter(pc.and_(pc.equal(images["status"], STATUS_OK), pc.is_in(images["image_id"], value_set=kept)))
    ids = chosen["image_id"]
    hit = _rows_of(ok_hits, ids, "search hits")
    tag = _rows_of(tags, ids, "tags")
    copy = _rows_of(copies, ids, "copies")

    def from_hits(name: str) -> pa.ChunkedArray:
        return _column(ok_hits, name).take(hit)

    def from_images(name: str) -> pa.ChunkedArray:
        return _column(chosen, name)

    concept_ids = from_hits("concept_id").to_pylist()
    names = dict(zip(concepts["concept_id"].to_pylist(), concepts["concept"].to_pylist(), strict=True))
    by_name = pack.country_by_name()
    country_names = from_hits("country").to_pylist()
    countries = [by_name[name] for name in country_names]
    native = {(r["concept_id"], r["language_code"]): r["text"] for r in translations.to_pylist()}
    concept = [names[c] for c in concept_ids]
    own_tags = _column(tags, "concept_ids").take(tag).to_pylist()
    shown = _shown_by_copy_group(ok_hits, tags, copies)
    groups = _column(copies, "copy_group").take(copy).to_pylist()
    tag_lists = []
    for own, group, cid in zip(own_tags, groups, concept_ids, strict=True):
        others = shown.get(group, {cid, *own})  # a copy group of one shows its own concept and tags
        tag_lists.append(list(own) + sorted(others - set(own)))
    origin = from_hits("origin_url").to_pylist()
    urls = [o or public_url(u) for o, u in zip(origin, from_hits("url").to_pylist(), strict=True)]
    retrieved = [
        h or i
        for h, i in zip(from_hits("retrieved_at").to_pylist(), from_images("retrieved_at").to_pylist(), strict=True)
    ]
    languages = _image_languages(countries, from_hits("query_lang").to_pylist(), from_hits("language_code").to_pylist())
    columns: dict[str, object] = {
        "image_id": ids,
        "concept_id": concept_ids,
        "concept": concept,
        "concept_in_native": [native[(c, code)] for c, code in zip(concept_ids, languages, strict=True)],
        "concept_country": [f"{n} {k.name}" for n, k in zip(concept, countries, strict=True)],
        "country": [k.name for k in countries],
        "language_code": languages,
        "language_group": ["+".join(sorted(k.language_groups)) for k in countries],
        "title": from_hits("title"),
        "query": from_hits("query"),
        "query_lang": from_hits("query_lang"),
        "rank": from_hits("rank"),
        "url": urls,
        "source_page": from_hits("source_page"),
        "sha256": from_images("sha256"),
        "pixel_sha256": _column(copies, "pixel_sha256").take(copy),
        "num_bytes": from_images("num_bytes"),
        "width": from_images("width"),
        "height": from_images("height"),
        "format": from_images("format"),
        "tags": tag_lists,
        "tagger": _column(tags, "tagger").take(tag),
        "engine": from_hits("searcher"),
        "region": from_hits("region"),
        "final_url": from_images("final_url"),
        # Declared by a local corpus's manifest, else when the downloader fetched it (`images.retrieved_at`);
        # tables written before these columns existed have none of them.
        "retrieved_at": retrieved,
        "http_status": from_images("http_status"),
        "content_type": from_images("content_type"),
        "license": [declared_license(v) for v in from_hits("license").to_pylist()],
        "license_filter": from_hits("license_filter"),
    }
    country_order = {c.name: i for i, c in enumerate(pack.countries)}
    # Python's sort was stable over the images' order; so is lexsort (the last key is the primary one).
    order = np.lexsort(
        (
            np.asarray(from_hits("rank").to_numpy(zero_copy_only=False)),
            np.asarray(pc.not_equal(from_hits("query_lang"), "eng").to_numpy(zero_copy_only=False)),
            np.array([country_order[k.name] for k in countries], dtype=np.int64),
            np.array(concept_ids, dtype=np.int64),
        )
    )
    indices = pa.array(order, pa.int64())
    arrays = [pa.array(range(len(order)), IMAGE_METADATA.field("index_in_dataset").type)]
    for field in list(IMAGE_METADATA)[1:]:
        value = columns[field.name]
        array = value if isinstance(value, pa.Array | pa.ChunkedArray) else pa.array(value, field.type)
        arrays.append(array.cast(field.type).take(indices))
    return pa.Table.from_arrays(
        [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrays], schema=IMAGE_METADATA
    )


def _image_languages(countries: list[Country], query_langs: list[str], hit_languages: list[str | None]) -> list[str]:
    """An image's language: its country's (the primary, for a country of several), or, for an image found by a
    query in one of its country's other languages, that language. A country's group is every group of its languages
    (`es+qu`, as `curation/rules.py` reads it)."""
    out = []
    for country, lang, hit in zip(countries, query_langs, hit_languages, strict=True):
        out.append(hit if lang == "nav" and hit in country.language_codes else country.language_code)
    return out


def _column(table: pa.Table, name: str) -> pa.ChunkedArray:
    """A column, or nulls where the table was written before the column existed."""
    if name in table.column_names:
        return table[name]
    return pa.chunked_array([pa.nulls(table.num_rows)])


def _rows_of(table: pa.Table, image_ids: pa.ChunkedArray, name: str) -> pa.Array:
    """The row of `table` holding each of `image_ids` (ids are unique per table), every one present."""
    rows = pc.index_in(image_ids, value_set=table["image_id"])
    if rows.null_count:
        raise KeyError(f"{name} has no row for image {image_ids.filter(pc.is_null(rows))[0].as_py()}")
    return rows


def _shown_by_copy_group(hits: pa.Table, tags: pa.Table, copies: pa.Table) -> dict[str, set[int]]:
    """Every concept any copy of a group was found for or tagged with, for the groups of more than one image."""
    groups = copies["copy_group"]
    counts = pc.value_counts(groups)
    shared = counts.field("values").filter(pc.greater(counts.field("counts"), 1))
    members = copies.filter(pc.is_in(groups, value_set=shared))
    hit = _rows_of(hits, members["image_id"], "search hits")
    tag = pc.index_in(members["image_id"], value_set=tags["image_id"])
    shown: dict[str, set[int]] = defaultdict(set)
    concept_ids = _column(hits, "concept_id").take(hit).to_pylist()
    tag_ids = _column(tags, "concept_ids").take(tag).to_pylist()
    for group, cid, ids in zip(members["copy_group"].to_pylist(), concept_ids, tag_ids, strict=True):
        shown[group].add(cid)
        shown[group].update(ids or ())
    return shown
