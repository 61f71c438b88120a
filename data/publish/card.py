"""Dataset cards: YAML front matter that `datasets` reads (configs, licence) and a readable body's primitives
(tables, notices, the account of how a build differs from its paper)."""

from __future__ import annotations

from typing import Any

import yaml

from data.review_labels import AUTO_ACCEPT

LICENSE = "cc-by-nc-sa-4.0"


def front_matter(
    configs: list[dict[str, Any]], pretty_name: str, tags: list[str], extra: dict[str, Any] | None = None
) -> str:
    """`configs` entries: {"config_name", "data_files": [{"split", "path"}], optional "default": True}."""
    meta = {"license": LICENSE, "pretty_name": pretty_name, "tags": tags, **(extra or {}), "configs": configs}
    return "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True) + "---\n"


def markdown_table(rows: list[dict[str, Any]]) -> str:
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


def auto_accept_notice(what: str) -> str:
    """First lines of a card whose human review was replaced by the auto-accept policy."""
    return (
        f"> **No human reviewed the {what}.** The auto-accept policy decided in the reviewers' place, so this "
        "release is not human-reviewed as the paper's is.\n"
    )
