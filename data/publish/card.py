"""Dataset cards: YAML front matter that `datasets` reads (configs, licence) and a readable body's primitives
(tables, notices, the account of how a build differs from its paper)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import NotRequired, TypedDict

import yaml

from data.publish.format import WEBDATASET_FEATURES
from data.reference import ReferencePack
from data.review_labels import AUTO_ACCEPT
from data.text_safety import code_span, markdown_text

LICENSE = "cc-by-nc-sa-4.0"


#: The Hub's `size_categories` buckets, by a config's number of rows (the upper bound of each).
SIZE_CATEGORIES = (
    (1_000, "n<1K"),
    (10_000, "1K<n<10K"),
    (100_000, "10K<n<100K"),
    (1_000_000, "100K<n<1M"),
    (10_000_000, "1M<n<10M"),
    (100_000_000, "10M<n<100M"),
    (1_000_000_000, "100M<n<1B"),
)


def size_category(rows: int) -> str:
    return next((label for bound, label in SIZE_CATEGORIES if rows < bound), "n>1T")


class HubMetadata(TypedDict):
    """The card fields the Hub lists a dataset by (`hub_metadata`)."""

    language: list[str]
    multilinguality: str
    size_categories: list[str]
    task_categories: list[str]


def hub_metadata(languages: Sequence[str], rows: int, task_categories: Sequence[str]) -> HubMetadata:
    """The card fields the Hub lists a dataset by: its languages (ISO 639-1), whether it is multilingual, its size
    bucket (`rows`: the default config's) and its task categories (names from the Hub's list)."""
    return {
        "language": list(languages),
        "multilinguality": "multilingual" if len(languages) > 1 else "monolingual",
        "size_categories": [size_category(rows)],
        "task_categories": list(task_categories),
    }


@dataclass(frozen=True)
class CardConfig:
    """A table of a folder as the card's `configs` declare it; `path` defaults to `<name>/train-*.parquet`."""

    name: str
    rows: int
    default: bool = False
    path: str = ""
    split: str = "train"


class DataFiles(TypedDict):
    split: str
    path: str


class ConfigEntry(TypedDict):
    """A `configs` entry of the front matter, as `datasets` reads it."""

    config_name: str
    default: NotRequired[bool]
    data_files: list[DataFiles]


def card_configs(configs: Sequence[CardConfig]) -> list[ConfigEntry]:
    """The `configs` entries of the tables that have rows. `datasets` cannot load an empty Parquet file (with one
    empty row group or none: datasets 5.2), so an empty table is not declared; `empty_configs_note` says so."""
    out: list[ConfigEntry] = []
    for config in configs:
        if config.rows == 0:
            continue
        path = config.path or f"{config.name}/train-*.parquet"
        data_files: list[DataFiles] = [{"split": config.split, "path": path}]
        if config.default:  # `default` before `data_files`, as the cards have always had it
            out.append({"config_name": config.name, "default": True, "data_files": data_files})
        else:
            out.append({"config_name": config.name, "data_files": data_files})
    return out


def empty_configs_note(configs: Sequence[CardConfig]) -> str:
    """The card's line on the tables with no rows (not declared as configs), or nothing."""
    empty = [f"`{c.name}`" for c in configs if c.rows == 0]
    if not empty:
        return ""
    names = ", ".join(empty)
    return (
        f"{names} {'has' if len(empty) == 1 else 'have'} no rows in this release: the card declares no config for "
        f"{'it' if len(empty) == 1 else 'them'} (`datasets` cannot load an empty table); the Parquet file is kept, "
        "with its schema, for readers such as pyarrow and Croissant.\n\n"
    )


def webdataset_loading(tars: Sequence[str]) -> str:
    """How to load the WebDataset tars with `datasets`, and where the rest of each row is; nothing without tars."""
    if not tars:
        return ""
    return f"""
The WebDataset shards load with `datasets` as they are. Each sample's JSON holds the row's columns that are never
null; the nullable ones are in the Parquet table only, which the sample's `__key__` joins (a column null in the first
samples would make the `webdataset` builder guess the wrong type). `{WEBDATASET_FEATURES}` gives the exact types, for
`features=`:

```python
from datasets import load_dataset
samples = load_dataset("webdataset", data_files="<this folder>/images/*.tar", split="train")
```
"""


def front_matter(
    configs: list[ConfigEntry], pretty_name: str, tags: list[str], extra: HubMetadata | None = None
) -> str:
    """`configs` entries: {"config_name", "data_files": [{"split", "path"}], optional "default": True}."""
    meta = {"license": LICENSE, "pretty_name": pretty_name, "tags": tags, **(extra or {}), "configs": configs}
    return "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True) + "---\n"


def markdown_table(rows: Sequence[Mapping[str, object]]) -> str:
    if not rows:
        return "_(none)_\n"
    headers = list(rows[0])
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(row.get(h, "")) for h in headers) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def deviations_section(deviations: list[str]) -> str:
    """The card's account of how the build differs from the paper; the claim of a faithful build only when none."""
    if not deviations:
        return "Every stage ran on the paper's backend with the paper's settings."
    return "**This build differs from the paper:**\n\n" + "\n".join(f"* {d}" for d in deviations)


def review_deviation(what: str, reviewers: list[str], annotators: int | None, paper_annotators: int) -> list[str]:
    """How a human review differs from the paper's (`paper_annotators` people per item): nobody reviewed (the
    auto-accept policy decided), or another number of annotators. Nothing when it ran as the paper's did."""
    if AUTO_ACCEPT in reviewers:
        return [f"No human reviewed the {what}: the auto-accept policy accepted them as they were."]
    if annotators is not None and annotators != paper_annotators:
        return [f"The {what} had {annotators} annotators per item, not {paper_annotators}."]
    return []


def url_only_notice(mode: str, command: str) -> str:
    """First lines of a URL-only release's card (`release.mode: urls`); nothing for a release with its images."""
    if mode != "urls":
        return ""
    return (
        "> **Release mode: `urls`.** This release holds each image's URL, sha256 and pHash, not the image: "
        f"`{command}` downloads the images and checks each against its sha256.\n\n"
    )


def demo_notice(why: str) -> str:
    """The first line of a demonstration release's card: it is not the benchmark, and `why`."""
    return f"**This is a pipeline demonstration, not the benchmark**: {why}"


def auto_accept_notice(what: str) -> str:
    """First lines of a card whose human review was replaced by the auto-accept policy."""
    return (
        f"> **No human reviewed the {what}.** The auto-accept policy decided in the reviewers' place, so this "
        "release is not human-reviewed as the paper's is.\n"
    )


def pack_country_rows(pack: ReferencePack, countries: Collection[str]) -> list[dict[str, str]]:
    """The pack's rows of the countries a release holds, in the pack's order, escaped for a card."""
    return [
        {
            "country": markdown_text(c.name),
            "ISO 3166": markdown_text(c.iso2),
            "language": markdown_text(", ".join(f"{s.name} ({s.code})" for s in c.languages)),
            "language group": markdown_text(", ".join(c.language_groups)),
            "region": markdown_text(c.region),
        }
        for c in pack.countries
        if c.name in countries
    ]


def reference_section(pack: ReferencePack, rows: list[dict[str, str]], what: str) -> str:
    """The card's account of the reference pack the release was built from, then `rows` (escaped by the caller:
    pack text is outside input), which say `what` the release holds of it."""
    which = "the shipped default pack, unchanged" if pack.is_default else "a pack of its own, not the default pack"
    return (
        "\n## Reference pack\n\n"
        f"Built from the reference pack {code_span(pack.info.name)} {code_span(pack.info.version)} ({which}; "
        f"sha256 {code_span(pack.digest)}). The release carries it in `reference/` (its countries, languages, "
        "concepts, translations, cultures and prompts), so every command that reads the release needs nothing else. "
        f"{what}\n\n" + markdown_table(rows) + ("" if pack.is_default else translation_origins(pack))
    )


def backend_text(name: object, pack: str | None) -> str:
    """How a card names a stage's backend: `shipped` (the backend that reads the reference pack) is named by the
    pack when that is one of its own (`pack`: its name; None for the default pack, whose data shipped with us)."""
    if name == "shipped" and pack is not None:
        return f"the reference pack {code_span(pack)}"
    return f"`{name}`"


#: An entry's origin (`data.pack_entries`) by the column a card gives it.
ORIGIN_COLUMNS = {
    "cldr": "CLDR",
    "model": "drafted by a model",
    "sheet": "filled by sheet",
    "hand": "by hand",
    "review": "corrected in review",
}


def translation_origins(pack: ReferencePack) -> str:
    """Where a pack's translations came from, per language: the entries of each origin, the native-reviewed ones
    and the most reviewers any entry had (issue 57: a card says so for a pack of its own; the default pack's are
    the 3XCM authors' drafts, said under Deviations)."""
    from data.pack_entries import provenance_counts

    counts = provenance_counts(pack, sorted(pack.languages))
    rows = []
    for code, c in counts.items():
        other = c["entries"] - c["missing"] - sum(c.get(k, 0) for k in ORIGIN_COLUMNS)
        rows.append(
            {
                "language": markdown_text(code),
                "entries": str(c["entries"]),
                **{label: str(c.get(origin, 0)) for origin, label in ORIGIN_COLUMNS.items()},
                "other or unrecorded": str(other),
                "missing": str(c["missing"]),
                "native-reviewed": str(c["reviewed"]),
                "reviewers": str(c["reviewers"]),
            }
        )
    return (
        "\nWhere its translations came from, per language: each entry is a value of the language's files (a "
        "concept's text, a country's name, a template; `culturebench reference sheet` lists them), counted by who "
        "wrote it; native-reviewed entries were accepted or corrected by native speakers in Label Studio "
        "(`culturebench review translations`), `reviewers` the most any entry had:\n\n" + markdown_table(rows)
    )
