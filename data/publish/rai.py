"""Helpers the benchmarks' RAI texts (`rai:*` in `croissant.json`, and the card's datasheet) share: counts as text,
a stage's line from the build's stage statistics, a review round's agreement, the annotation platforms, the
maintenance plan, the deviations from the paper, and the sources and licences of a table's images.

Pure, like `data/publish/croissant.py`: the same provenance and tables give the same text.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from data.publish.manifest import Provenance
from data.review_labels import AUTO_ACCEPT

Text = str | list[str]


class RaiTexts(BaseModel):
    """The RAI properties every release states (Croissant's RAI vocabulary), in this order: `croissant.json` writes
    them by their `rai:` names (`as_jsonld`), the datasheet reads the same fields. Each benchmark's facts fill every
    one; an empty text is left out of `croissant.json`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    data_collection: Text = ""
    data_collection_type: Text = ""
    data_collection_timeframe: Text = ""
    data_preprocessing_protocol: Text = ""
    data_manipulation_protocol: Text = ""
    data_annotation_protocol: Text = ""
    data_annotation_platform: Text = ""
    data_annotation_analysis: Text = ""
    annotations_per_item: Text = ""
    machine_annotation_tools: Text = ""
    personal_sensitive_information: Text = ""
    data_biases: Text = ""
    data_limitations: Text = ""
    data_use_cases: Text = ""
    data_release_maintenance_plan: Text = ""

    @staticmethod
    def property_name(field: str) -> str:
        """`data_collection` -> `rai:dataCollection`."""
        return f"rai:{to_camel(field)}"

    @classmethod
    def property_names(cls) -> tuple[str, ...]:
        return tuple(cls.property_name(field) for field in cls.model_fields)

    def as_jsonld(self) -> dict[str, Text]:
        """The properties by their `rai:` names, in field order, the empty ones left out."""
        return {self.property_name(k): v for k, v in self.model_dump().items() if v not in ("", [])}


def source_lines(table: pa.Table, what: str) -> tuple[str, str]:
    """Which engines returned the images and the licences their sources declare (from the `engine` and `license`
    columns, where the table has them), and a limitation when some declare none."""
    parts: list[str] = []
    limitation = ""
    if "engine" in table.column_names:
        parts.append(f"{what} per search engine: {counts(Counter(e or 'none' for e in table['engine'].to_pylist()))}.")
    if "license" in table.column_names:
        licenses = Counter(lic or "unknown" for lic in table["license"].to_pylist())
        parts.append(f"Licences as the sources declare them: {counts(licenses)}.")
        if licenses.get("unknown"):
            limitation = (
                f"{licenses['unknown']} of {table.num_rows} {what.lower()} declare no licence (`license` is `unknown`)."
            )
    return " ".join(parts), limitation


def stage_stats(provenance: Provenance) -> dict[str, dict[str, Any]]:
    """The manifest's `stage_stats`, by stage."""
    return {s["stage"]: s for s in provenance.stage_stats}


def reason_counts(reasons: Mapping[str, int]) -> str:
    return ", ".join(f"{reason} {n}" for reason, n in sorted(reasons.items())) or "none"


def counts(counter: Mapping[str, int]) -> str:
    """`name n, ...`, the most frequent first (ties by name)."""
    return ", ".join(f"{name} {n}" for name, n in sorted(counter.items(), key=lambda kv: (-kv[1], str(kv[0]))))


def stage_line(stats: Mapping[str, Mapping[str, Any]], stage: str, what: str) -> str:
    """One stage's rows in, kept and dropped (by reason), or that the build did not record it."""
    s = stats.get(stage)
    if s is None:
        return f"{what}: not recorded."
    dropped = f"; dropped {s['dropped']} ({reason_counts(s.get('dropped_by_reason', {}))})" if s.get("dropped") else ""
    return f"{what} (`{stage}`): {s.get('rows_in', 0)} in, {s.get('kept', 0)} kept{dropped}."


def _fmt(value: float | None, digits: int = 4) -> str:
    return "undefined" if value is None else f"{value:.{digits}f}"


def review_analysis(review: Mapping[str, Any], what: str) -> str:
    """How one review round's votes became decisions, with its agreement, or that no human voted."""
    reviewer = review.get("reviewer", "unknown")
    if "tasks" not in review:
        if reviewer == AUTO_ACCEPT:
            return (
                f"{what}: no human annotations were collected (the auto-accept policy decided), so no agreement "
                "was measured."
            )
        return f"{what}: reviewer `{reviewer}`; no annotations were collected, so no agreement was measured."
    agreement = review.get("agreement") or {}
    closed = " The review was closed before every item had all its annotations." if review.get("closed_early") else ""
    return (
        f"{what} (`{reviewer}`): {review['tasks']} items, {review.get('decided', 0)} decided by a strict majority of "
        f"the votes cast, {review.get('undecided', 0)} undecided. Fleiss' kappa {_fmt(agreement.get('fleiss_kappa'))} "
        f"over {agreement.get('tasks_rated', 0)} fully annotated items; unanimous share "
        f"{_fmt(agreement.get('unanimous_share'), 3)}; {agreement.get('disagreements', 0)} items with disagreement."
        f"{closed}"
    )


def platforms(reviewers: Sequence[str]) -> list[str]:
    """The RAI annotation platforms of the review rounds' reviewers."""
    out: list[str] = []
    for reviewer in reviewers:
        if reviewer == AUTO_ACCEPT:
            out.append("None: no human annotated; the auto-accept policy decided in the reviewers' place.")
        elif reviewer.startswith("label_studio"):
            how = (
                "tasks exported as files and a completed export imported" if reviewer.endswith("files") else "a server"
            )
            out.append(f"Label Studio (`{reviewer}`: {how}).")
        else:
            out.append(f"`{reviewer}`.")
    return out


def maintenance_plan(benchmark: str, version: str) -> str:
    """What the build can say of a release's maintenance: its immutability, and that the rest is the publisher's."""
    return (
        f"Version {version} is immutable: writing it again is accepted only when every file is byte-identical, and "
        "any change needs a new semantic version (semver 2.0.0). Each release's manifest.json records the config, "
        "code version, seeds, stage fingerprints and the sha256 of every file, so a version can be rebuilt and "
        f"checked. The build records no maintainer, update schedule or deprecation date for `{benchmark}` releases: "
        "those are for the publisher to state."
    )


def deviation_lines(provenance: Provenance) -> list[str]:
    """The build's deviations from the paper (`deviations` in the manifest) as RAI limitations."""
    deviations = list(provenance.deviations)
    if not deviations:
        return ["Every stage ran on the paper's backend with the paper's settings."]
    return [f"Differs from the paper: {d}" for d in deviations]


def url_only_line(mode: str, what: str) -> str:
    """The limitation of a URL-only release (`mode` `urls`); nothing for a release with its images."""
    if mode != "urls":
        return ""
    return (
        f"URL-only release: each {what} is named by its URL, sha256 and pHash, without its bytes; what a source "
        "removed or changed since the build is gone (`culturebench fetch-release` reports it)."
    )
