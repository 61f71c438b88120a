"""What a 3XCM build needs from its reference pack, found before any stage runs: each build language (the query
countries' own, and English) with its RQ3 template, the concepts' translations into it, and every build country's
name in it (English queries name the country in English; RQ3 descriptors put any build country into the query
language's template).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from data.reference import ENGLISH, ReferencePack


class PackIncomplete(ValueError):
    """The reference pack lacks what the build needs: one line with the counts, naming the file that lists each."""


#: The columns of the file that lists what a build lacks.
MISSING_COLUMNS = ("kind", "language", "concept_id", "concept", "country")


@dataclass(frozen=True)
class MissingEntry:
    kind: Literal["language", "descriptor", "translation", "country_name"]
    language: str
    concept_id: int | None = None
    concept: str | None = None
    country: str | None = None


def missing_for_build(
    pack: ReferencePack, countries: Sequence[str], concepts: Sequence[tuple[int, str]] | None
) -> list[MissingEntry]:
    """Every entry the build lacks; `concepts` (id, name) known before the build runs, None where they are not (a
    review file's accepted candidates are translated by the build's Gemini backend)."""
    by_name = pack.country_by_name()
    languages = sorted({code for c in countries for code in by_name[c].language_codes} | {ENGLISH})
    missing: list[MissingEntry] = []
    for code in languages:
        language = pack.languages.get(code)
        if language is None:
            missing.append(MissingEntry("language", code))
        elif language.language.descriptor_template is None:
            missing.append(MissingEntry("descriptor", code))
        names = language.countries if language is not None else {}
        missing += [MissingEntry("country_name", code, country=c) for c in countries if c not in names]
        if code == ENGLISH:
            continue  # English concepts are the pack's concept names
        have = language.concepts if language is not None else {}
        missing += [
            MissingEntry("translation", code, concept_id=cid, concept=name)
            for cid, name in concepts or ()
            if cid not in have
        ]
    return missing


def missing_summary(missing: Sequence[MissingEntry]) -> str:
    """`N translations (concept, language), N country names, N languages` of what is missing."""
    counts = {m.kind: 0 for m in missing}
    for m in missing:
        counts[m.kind] += 1
    parts = [
        f"{counts.get('translation', 0)} translation(s) (concept, language)",
        f"{counts.get('country_name', 0)} country name(s)",
        f"{counts.get('language', 0)} language(s)",
    ]
    if counts.get("descriptor"):
        parts.append(f"{counts['descriptor']} RQ3 descriptor template(s)")
    return ", ".join(parts)


def missing_csv(missing: Sequence[MissingEntry]) -> bytes:
    """The file that lists what a build lacks (`reference_missing.csv`), one row per entry: the build's pre-flight
    and `reference check` write the same."""
    from data.text_safety import csv_bytes

    return csv_bytes(MISSING_COLUMNS, [[m.kind, m.language, m.concept_id, m.concept, m.country] for m in missing])


def pack_build_problems(pack: ReferencePack, benchmark: str) -> list[str]:
    """Why a build of `benchmark` from the pack's own countries and concepts would be refused for the pack itself,
    besides the entries `missing_for_build` lists: one line each (none when it would build)."""
    if benchmark == "mixcube":
        return [] if pack.mixcube_reference is not None else ["mixcube.json: missing: a MixCuBe build needs it"]
    problems = []
    if len(pack.countries) < 2:
        problems.append(f"countries.csv: {len(pack.countries)} country(ies); a 3XCM build needs at least 2")
    if not pack.concepts:
        problems.append("concepts.csv: holds no concept; a 3XCM build needs at least one")
    return problems


def pack_missing(pack: ReferencePack) -> list[MissingEntry]:
    """What a 3XCM build of every country and concept of the pack lacks (what `build --reference` refuses on)."""
    return missing_for_build(pack, [c.name for c in pack.countries], [(c.concept_id, c.concept) for c in pack.concepts])
