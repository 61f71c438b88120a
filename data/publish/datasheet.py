"""The card's datasheet section (after *Datasheets for Datasets*): the same facts as `croissant.json`, in Markdown.

Pure, like `data/publish/croissant.py`: a rebuild writes the same text.
"""

from __future__ import annotations

from collections.abc import Iterable

from data.publish.card import LICENSE
from data.publish.croissant import FILE, LICENSE_URLS, ReleaseFacts

HEADINGS = ("Motivation", "Composition", "Collection", "Preprocessing", "Uses", "Distribution", "Maintenance")


def datasheet_section(facts: ReleaseFacts) -> str:
    """`## Datasheet` with the seven subsections, to append at the end of a card."""
    rai = facts.rai
    timeframe = rai.data_collection_timeframe
    parts: dict[str, list[str | list[str]]] = {
        "Motivation": [facts.motivation],
        "Composition": [
            _bullets(facts.composition),
            "Personal and sensitive information:",
            _bullets(rai.personal_sensitive_information),
        ],
        "Collection": [
            str(rai.data_collection),
            "Collection type: " + "; ".join(_list(rai.data_collection_type)) + ".",
            f"Timeframe: {timeframe}." if timeframe else "Timeframe: not recorded (see above).",
            "Annotation:",
            _bullets([*_list(rai.data_annotation_protocol), *_list(rai.data_annotation_analysis)]),
            "Annotation platform: " + " ".join(_list(rai.data_annotation_platform)),
        ],
        "Preprocessing": [
            _bullets(rai.data_preprocessing_protocol),
            f"Manipulation: {rai.data_manipulation_protocol}",
        ],
        "Uses": [
            _bullets(rai.data_use_cases),
            "Biases:",
            _bullets(rai.data_biases),
            "Limitations:",
            _bullets(rai.data_limitations),
        ],
        "Distribution": [
            f"Licence: {LICENSE_URLS.get(LICENSE, LICENSE)}. Record sets (Parquet and CSV; every file's sha256 is "
            f"in `{FILE}` and `manifest.json`):",
            _bullets([f"`{spec.name}`: {spec.rows} records (`{spec.pattern}`)" for spec in facts.record_sets]),
            f"`{FILE}` describes them in Croissant 1.1 with the RAI vocabulary; "
            f'`mlcroissant.Dataset(jsonld="{FILE}").records(record_set=...)` reads them.',
        ],
        "Maintenance": [str(rai.data_release_maintenance_plan)],
    }
    body = "".join(f"\n### {heading}\n\n" + _blocks(parts[heading]) for heading in HEADINGS)
    return f"\n## Datasheet\n{body}"


def _blocks(blocks: list[str | list[str]]) -> str:
    """Paragraphs and bullet lists, a blank line between blocks."""
    rendered = ["\n".join(b) if isinstance(b, list) else b for b in blocks]
    return "\n\n".join(r for r in rendered if r) + "\n"


def _list(value: object) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value] if isinstance(value, Iterable) else [str(value)]


def _bullets(value: object) -> list[str]:
    return [f"* {line}" for line in _list(value)]
