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
    timeframe = rai.get("rai:dataCollectionTimeframe")
    parts: dict[str, list[str | list[str]]] = {
        "Motivation": [facts.motivation],
        "Composition": [
            _bullets(facts.composition),
            "Personal and sensitive information:",
            _bullets(rai.get("rai:personalSensitiveInformation")),
        ],
        "Collection": [
            str(rai.get("rai:dataCollection", "")),
            "Collection type: " + "; ".join(_list(rai.get("rai:dataCollectionType"))) + ".",
            f"Timeframe: {timeframe}." if timeframe else "Timeframe: not recorded (see above).",
            "Annotation:",
            _bullets([*_list(rai.get("rai:dataAnnotationProtocol")), *_list(rai.get("rai:dataAnnotationAnalysis"))]),
            "Annotation platform: " + " ".join(_list(rai.get("rai:dataAnnotationPlatform"))),
        ],
        "Preprocessing": [
            _bullets(rai.get("rai:dataPreprocessingProtocol")),
            f"Manipulation: {rai.get('rai:dataManipulationProtocol', 'none recorded')}",
        ],
        "Uses": [
            _bullets(rai.get("rai:dataUseCases")),
            "Biases:",
            _bullets(rai.get("rai:dataBiases")),
            "Limitations:",
            _bullets(rai.get("rai:dataLimitations")),
        ],
        "Distribution": [
            f"Licence: {LICENSE_URLS.get(LICENSE, LICENSE)}. Record sets (Parquet and CSV; every file's sha256 is "
            f"in `{FILE}` and `manifest.json`):",
            _bullets([f"`{spec.name}`: {spec.rows} records (`{spec.pattern}`)" for spec in facts.record_sets]),
            f"`{FILE}` describes them in Croissant 1.1 with the RAI vocabulary; "
            f'`mlcroissant.Dataset(jsonld="{FILE}").records(record_set=...)` reads them.',
        ],
        "Maintenance": [str(rai.get("rai:dataReleaseMaintenancePlan", ""))],
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
