"""One CATALOG row built from the reference data, shared by the assembly and tagging tests."""

from __future__ import annotations

from typing import Any

from data.reference import default_pack


def catalog_row(
    index: int, image_id: str, country: str, concept_id: int, rank: int, tags: list[int], tagger: str, **fields: Any
) -> dict[str, Any]:
    names = {c.concept_id: c.concept for c in default_pack().concepts}
    c = default_pack().country_by_name()[country]
    row = {
        "index_in_dataset": index,
        "image_id": image_id,
        "concept_id": concept_id,
        "concept": names[concept_id],
        "concept_in_native": default_pack().language_pack(c.language_code).concepts[concept_id].text,
        "concept_country": f"{names[concept_id]} {country}",
        "country": country,
        "language_code": c.language_code,
        "language_group": c.language_group,
        "title": None,
        "query": f"{names[concept_id]} {country}",
        "query_lang": "eng",
        "rank": rank,
        "url": f"x/{index}.jpg",
        "source_page": None,
        "sha256": f"{index:064x}",
        "pixel_sha256": None,
        "num_bytes": 1000,
        "width": 100,
        "height": 100,
        "format": "JPEG",
        "tags": tags,
        "tagger": tagger,
    }
    unknown = set(fields) - set(row)
    if unknown:
        raise KeyError(f"not catalog columns: {sorted(unknown)}")
    return {**row, **fields}
