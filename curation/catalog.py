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

import pyarrow as pa

from data import reference
from data.image_sources import declared_license
from data.schemas import IMAGE_METADATA, STATUS_OK, from_rows


def build_catalog(
    concepts: pa.Table,
    search_hits: pa.Table,
    images: pa.Table,
    review: pa.Table,
    tags: pa.Table,
    translations: pa.Table,
    copies: pa.Table,
    public_url: Callable[[str], str] = lambda url: url,
) -> pa.Table:
    """`public_url` turns a fetch location into what the release records (local paths become relative)."""
    names = dict(zip(concepts["concept_id"].to_pylist(), concepts["concept"].to_pylist(), strict=True))
    hits = {r["image_id"]: r for r in search_hits.to_pylist() if r["status"] == STATUS_OK}
    kept = {r["image_id"] for r in review.to_pylist() if r["keep"]}
    tag_rows = {r["image_id"]: r for r in tags.to_pylist()}
    copy_rows = {r["image_id"]: r for r in copies.to_pylist()}
    shown_by_group: dict[str, set[int]] = defaultdict(set)  # every concept any copy was found for or tagged with
    for image_id, row in copy_rows.items():
        shown_by_group[row["copy_group"]].add(hits[image_id]["concept_id"])
        shown_by_group[row["copy_group"]].update(tag_rows[image_id]["concept_ids"] if image_id in tag_rows else ())
    native = {(r["concept_id"], r["language_code"]): r["text"] for r in translations.to_pylist()}
    country_order = {c.name: i for i, c in enumerate(reference.countries())}

    records = []
    for image in images.to_pylist():
        if image["status"] != STATUS_OK or image["image_id"] not in kept:
            continue
        hit = hits[image["image_id"]]
        country = reference.country_by_name()[hit["country"]]
        concept = names[hit["concept_id"]]
        tag = tag_rows[image["image_id"]]
        copy = copy_rows[image["image_id"]]
        own_tags = list(tag["concept_ids"])
        records.append(
            {
                "image_id": image["image_id"],
                "concept_id": hit["concept_id"],
                "concept": concept,
                "concept_in_native": native[(hit["concept_id"], country.language_code)],
                "concept_country": f"{concept} {country.name}",
                "country": country.name,
                "language_code": country.language_code,
                "language_group": country.language_group,
                "title": hit["title"],
                "query": hit["query"],
                "query_lang": hit["query_lang"],
                "rank": hit["rank"],
                "url": hit.get("origin_url") or public_url(hit["url"]),
                "source_page": hit["source_page"],
                "sha256": image["sha256"],
                "pixel_sha256": copy["pixel_sha256"],
                "num_bytes": image["num_bytes"],
                "width": image["width"],
                "height": image["height"],
                "format": image["format"],
                "tags": own_tags + sorted(shown_by_group[copy["copy_group"]] - set(own_tags)),
                "tagger": tag["tagger"],
                "engine": hit.get("searcher"),
                "region": hit.get("region"),
                "final_url": image.get("final_url"),
                # Declared by a local corpus's manifest, else when the downloader fetched it (`images.retrieved_at`);
                # tables written before these columns existed have none of them.
                "retrieved_at": hit.get("retrieved_at") or image.get("retrieved_at"),
                "http_status": image.get("http_status"),
                "content_type": image.get("content_type"),
                "license": declared_license(hit.get("license")),
                "license_filter": hit.get("license_filter"),
            }
        )
    records.sort(key=lambda r: (r["concept_id"], country_order[r["country"]], r["query_lang"] != "eng", r["rank"]))
    for index, record in enumerate(records):
        record["index_in_dataset"] = index
    return from_rows(records, IMAGE_METADATA)
