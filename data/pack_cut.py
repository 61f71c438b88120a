"""A new pack from another, cut down to the countries and concepts a researcher names (`reference init DIR --from
PACK --countries A,B --concepts x,y`), and a skeleton to fill by hand (`reference init DIR --empty`).

The cut keeps, of the source: the named countries' rows, the named concepts' rows (a name the source lacks becomes
a new concept, its id from 1000 up, as accepted concepts are numbered, with no translation yet), the languages those
countries speak (and English, where the source has it) with only their entries for the kept countries and concepts,
MixCuBe's cultures of the kept countries (its file only where two or more remain), and the audit prompts of the kept
languages. What it leaves out is listed, so nothing is dropped unsaid.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

from data.reference_files import (
    AUDIT_PROMPTS_FILE,
    CONCEPTS_FILE,
    COUNTRIES_FILE,
    LANGUAGE_DIR,
    LANGUAGE_FILE,
    MIXCUBE_FILE,
    PACK_FILE,
    README_FILE,
)
from data.reference_models import ENGLISH, ReferencePack
from data.reference_parse import CONCEPT_COLUMNS, COUNTRY_COLUMNS
from data.text_safety import csv_bytes

#: Ids of concepts a cut adds: from here up, as the accepted concepts of a concept review are (data/authors).
NEW_CONCEPT_IDS = 1000


class CutError(ValueError):
    """A selection the source pack cannot give: one line naming what and why."""


@dataclass
class Cut:
    """The files of the new pack, and what the cut added and left out (for the command's summary)."""

    files: dict[str, bytes]
    countries: list[str]
    concepts: list[str]
    new_concepts: list[str] = field(default_factory=list)
    languages: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)


def _rows(data: bytes) -> tuple[list[str], list[list[str]]]:
    rows = [r for r in csv.reader(io.StringIO(data.decode("utf-8-sig"), newline="")) if any(c.strip() for c in r)]
    return (rows[0], rows[1:]) if rows else ([], [])


def _filtered(data: bytes, column: str, keep: set[str]) -> bytes:
    header, body = _rows(data)
    at = header.index(column)
    return csv_bytes(header, [r for r in body if r[at] in keep])


def cut_pack(
    source: ReferencePack,
    countries: Sequence[str],
    concepts: Sequence[str],
    name: str,
    from_label: str,
) -> Cut:
    """The pack of `countries` (names, slugs or ISO codes of `source`) and `concepts` (names; new ones added)."""
    files = source.files.files
    kept = []
    for given in countries:
        try:
            kept.append(source.resolve_country(given))
        except KeyError:
            raise CutError(
                f"--countries: {given!r} is not a country of {from_label} (its countries: "
                f"{', '.join(c.name for c in source.countries)}); examples/packs/globalrg holds 49, or add the row to "
                f"{COUNTRIES_FILE} by hand"
            ) from None
    if len({c.name for c in kept}) != len(kept):
        raise CutError(f"--countries: a country is named twice ({', '.join(countries)})")
    by_name = source.concept_by_name()
    wanted = list(dict.fromkeys(" ".join(c.split()) for c in concepts))
    next_id = max([NEW_CONCEPT_IDS - 1, *(c.concept_id for c in source.concepts)]) + 1
    new_rows: list[tuple[int, str]] = []
    for concept in wanted:
        if concept not in by_name:
            new_rows.append((next_id, concept))
            next_id += 1
    kept_ids = {str(by_name[c].concept_id) for c in wanted if c in by_name}
    isos = {c.iso2 for c in kept}
    names = {c.name for c in kept}
    languages = list(dict.fromkeys(code for c in kept for code in c.language_codes))
    folders = [*languages, *([ENGLISH] if ENGLISH in source.files.languages() and ENGLISH not in languages else [])]
    out: dict[str, bytes] = {}
    out[COUNTRIES_FILE] = _filtered(files[COUNTRIES_FILE], "name", names)
    header, body = _rows(files[CONCEPTS_FILE])
    rows = [r for r in body if r[header.index("concept_id")] in kept_ids]
    rows += [[str(cid) if col == "concept_id" else text if col == "concept" else "" for col in header]
             for cid, text in new_rows]  # fmt: skip
    out[CONCEPTS_FILE] = csv_bytes(header, rows)
    for code in folders:
        folder = f"{LANGUAGE_DIR}/{code}"
        if f"{folder}/{LANGUAGE_FILE}" not in files:
            continue  # the source lacks the language: the cut's check names it
        out[f"{folder}/{LANGUAGE_FILE}"] = files[f"{folder}/{LANGUAGE_FILE}"]
        if f"{folder}/{COUNTRIES_FILE}" in files:
            out[f"{folder}/{COUNTRIES_FILE}"] = _filtered(files[f"{folder}/{COUNTRIES_FILE}"], "iso2", isos)
        if f"{folder}/{CONCEPTS_FILE}" in files:
            out[f"{folder}/{CONCEPTS_FILE}"] = _filtered(files[f"{folder}/{CONCEPTS_FILE}"], "concept_id", kept_ids)
    dropped = []
    if source.mixcube_reference is not None:
        mixcube = _cut_mixcube(json.loads(files[MIXCUBE_FILE]), isos)
        if mixcube is None:
            dropped.append(f"{MIXCUBE_FILE} (fewer than 2 of its cultures are among the countries)")
        else:
            out[MIXCUBE_FILE] = _json(mixcube)
    if source.audit_prompts is not None:
        prompts = json.loads(files[AUDIT_PROMPTS_FILE])
        prompts["translations"] = {k: v for k, v in prompts["translations"].items() if k in folders}
        out[AUDIT_PROMPTS_FILE] = _json(prompts)
    all_concepts = [c for c in wanted]
    out[PACK_FILE] = _json(_pack_info(source, name, from_label, [c.name for c in kept], all_concepts))
    out[README_FILE] = _readme(name, from_label, [c.name for c in kept], all_concepts, [c for _, c in new_rows])
    return Cut(out, [c.name for c in kept], all_concepts, [c for _, c in new_rows], languages, dropped)


def _cut_mixcube(data: dict[str, Any], isos: set[str]) -> dict[str, Any] | None:
    cultures = [c for c in data["cultures"] if c["iso2"] in isos]
    if len(cultures) < 2:
        return None
    names = {c["name"] for c in cultures}
    data["cultures"] = cultures
    data["food_label_examples"] = {k: v for k, v in data.get("food_label_examples", {}).items() if k in names}
    return data


class DemoJson(TypedDict):
    concepts: list[str]
    countries: list[str]


class PackJson(TypedDict):
    """The cut's `pack.json` (`data.reference_models.PackInfo` reads it)."""

    name: str
    version: str
    licence: str
    description: str
    sources: dict[str, str]
    demo: NotRequired[DemoJson]


def _pack_info(
    source: ReferencePack, name: str, from_label: str, countries: list[str], concepts: list[str]
) -> PackJson:
    sources = dict(source.info.sources)
    sources["cut"] = (
        f"cut from {source.info.name} {source.info.version} ({from_label}) by culturebench reference init --from"
    )
    info: PackJson = {
        "name": name,
        "version": "0.1.0",
        "licence": source.info.licence,
        "description": f"{len(countries)} countries and {len(concepts)} concepts, cut from {source.info.name} "
        f"{source.info.version}.",
        "sources": sources,
    }
    if len(concepts) >= 2:
        info["demo"] = {"concepts": concepts[:6], "countries": countries}
    return info


def _readme(name: str, from_label: str, countries: list[str], concepts: list[str], new: list[str]) -> bytes:
    lines = [
        f"# {name}",
        "",
        f"A reference pack of {len(countries)} countries ({', '.join(countries)}) and {len(concepts)} concepts "
        f"({', '.join(concepts)}), cut from {from_label} by `culturebench reference init --from`.",
        "",
    ]
    if new:
        lines += [
            f"New concepts, not in the source and not translated yet: {', '.join(new)}. "
            "`culturebench reference sheet` lists what is missing; `culturebench reference fill` merges it back.",
            "",
        ]
    return "\n".join(lines).encode("utf-8")


def _json(data: Mapping[str, object]) -> bytes:
    return (json.dumps(data, ensure_ascii=False, indent=2) + "\n").encode("utf-8")


# -- the skeleton ------------------------------------------------------------------------------------------------

#: A row of a CSV that starts with `#` is a comment: the skeleton's examples, which the reader skips.
SKELETON_COUNTRY = ["# Japan", "JP", "japan", "ja", "Japanese", "ja", "jp-jp", "East Asia"]
SKELETON_CONCEPT = ["# 1000", "train"]


def skeleton(name: str) -> dict[str, bytes]:
    """Every file a pack needs, each with its header and one commented example; the README shows the rest."""
    info = {
        "name": name,
        "version": "0.1.0",
        "licence": "write the licence of your data here",
        "description": "",
        "sources": {"countries": "where the rows of countries.csv come from", "concepts": "and concepts.csv"},
    }
    readme = f"""# {name}

A reference pack skeleton: fill `countries.csv` and `concepts.csv` (each holds its header and one example row,
commented out with `#`), then one folder per language under `i18n/<code>/`:

- `i18n/<code>/language.json`: `{{"code": "ja", "name": "Japanese", "native_name": "日本語",
  "descriptor_template": "{{country}}の{{concept}}"}}`
- `i18n/<code>/countries.csv`: `iso2,country,name,descriptor_country` (e.g. `JP,Japan,日本,日本`)
- `i18n/<code>/concepts.csv`: `concept_id,concept,text,descriptor_template,review_status`
  (e.g. `1000,train,列車,,awaiting_native_review`)

`culturebench reference translate {name} --languages ja` writes what CLDR knows; `culturebench reference sheet` lists
every entry still missing, to fill in a spreadsheet and merge back with `culturebench reference fill`. See
docs/reference-packs.md.
"""
    return {
        PACK_FILE: _json(info),
        COUNTRIES_FILE: csv_bytes(list(COUNTRY_COLUMNS), [SKELETON_COUNTRY]),
        CONCEPTS_FILE: csv_bytes(list(CONCEPT_COLUMNS), [SKELETON_CONCEPT]),
        README_FILE: readme.encode("utf-8"),
    }


def pruned(files: dict[str, bytes]) -> tuple[dict[str, bytes], dict[str, int]]:
    """The `i18n/` tables without the rows that name a country or concept `countries.csv` or `concepts.csv` no
    longer holds (left behind when rows were removed by hand), and how many each file lost. Only those rows go:
    every other problem of the pack stays for `reference check` to name."""
    header, body = _rows(files[COUNTRIES_FILE])
    isos = {r[header.index("iso2")] for r in body if "iso2" in header and not r[0].lstrip().startswith("#")}
    header, body = _rows(files[CONCEPTS_FILE])
    ids = {r[header.index("concept_id")] for r in body if "concept_id" in header and not r[0].lstrip().startswith("#")}
    changed: dict[str, bytes] = {}
    lost: dict[str, int] = {}
    for name, data in sorted(files.items()):
        parts = name.split("/")
        if len(parts) != 3 or parts[0] != LANGUAGE_DIR or parts[2] not in (COUNTRIES_FILE, CONCEPTS_FILE):
            continue
        column, keep = ("iso2", isos) if parts[2] == COUNTRIES_FILE else ("concept_id", ids)
        header, body = _rows(data)
        if column not in header:
            continue
        kept = [r for r in body if len(r) <= header.index(column) or r[header.index(column)].strip() in keep]
        if len(kept) < len(body):
            changed[name] = csv_bytes(header, kept)
            lost[name] = len(body) - len(kept)
    return changed, lost
