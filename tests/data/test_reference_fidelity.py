"""Our concept ids, image counts and image ids against the 3XCM authors' published release.

Every expectation here is derived from `data/authors/xcm-bench.csv` (the authors' RQ2 file, vendored unchanged;
see data/reference/README.md), never typed in: its image ids are `{country}-{concept_id}-{rank}-{eng|nav}`, and
its `*_concept` columns name the concept of each id.
"""

from __future__ import annotations

import csv
import hashlib
import re
from collections import defaultdict
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from collectors.concept_generation import FIRST_NEW_CONCEPT_ID
from data.reference import default_pack
from flows.xcm.build import build_locally
from flows.xcm.config import Build3XCMConfig

#: data/reference/README.md: the authors' file, copied unchanged.
RELEASE_SHA256 = "fbfc34c3c13e4c3ac1f192da9e1b1d005203c4a0c5e596ec53104251689b652b"
SLOTS = ("query_", "semantically_relevant_candidate_", "culturally_relevant_candidate_", "non_relevant_candidate_")
#: The authors' image id: lower-case country name (spaces kept), their concept id, a 1-based rank, the query language.
AUTHORS_IMAGE_ID = re.compile(
    r"^(?P<country>[a-z]+(?: [a-z]+)*)-(?P<concept>\d+)-(?P<rank>[1-9]\d*)-(?P<lang>eng|nav)$"
)
#: The one known deviation inside the authors' file: some USA images are `america-...` (reported, not copied).
AUTHORS_QUIRKS = {("america", "USA")}


@dataclass(frozen=True)
class Release:
    header: list[str]
    names: dict[int, set[str]]  # concept id -> the names the `*_concept` columns give it
    images: dict[int, set[str]]  # concept id -> its distinct image ids, from any column
    country_parts: dict[tuple[str, str], set[str]]  # (id's country part, `*_country`) -> image ids
    ranks: set[int]


def _release_bytes() -> bytes:
    return resources.files("data").joinpath("authors", "xcm-bench.csv").read_bytes()


@cache
def authors_release() -> Release:
    names: dict[int, set[str]] = defaultdict(set)
    images: dict[int, set[str]] = defaultdict(set)
    parts: dict[tuple[str, str], set[str]] = defaultdict(set)
    ranks: set[int] = set()
    reader = csv.DictReader(_release_bytes().decode("utf-8").splitlines())
    for row in reader:
        for slot in SLOTS:
            image_id = row[f"{slot}image_id"]
            match = AUTHORS_IMAGE_ID.match(image_id)
            assert match, f"authors' image id {image_id!r} outside the documented format"
            concept_id = int(match["concept"])
            names[concept_id].add(row[f"{slot}concept"])
            images[concept_id].add(image_id)
            parts[(match["country"], row[f"{slot}country"])].add(image_id)
            ranks.add(int(match["rank"]))
    return Release(list(reader.fieldnames or []), dict(names), dict(images), dict(parts), ranks)


def authors_concepts() -> dict[int, str]:
    """id -> name, each id naming one concept in every column of the file."""
    names = authors_release().names
    assert all(len(n) == 1 for n in names.values()), {k: v for k, v in names.items() if len(v) > 1}
    return {concept_id: next(iter(n)) for concept_id, n in names.items()}


def test_the_vendored_file_is_the_authors_unchanged() -> None:
    assert hashlib.sha256(_release_bytes()).hexdigest() == RELEASE_SHA256


def test_concept_ids_and_names_are_the_authors() -> None:
    ours = {c.concept_id: c.concept for c in default_pack().concepts}
    assert ours == authors_concepts()
    assert [c.concept_id for c in default_pack().concepts] == sorted(ours)  # shipped in id order
    # Accepted new concepts are numbered from FIRST_NEW_CONCEPT_ID up, clear of every shipped id.
    assert max(ours) < FIRST_NEW_CONCEPT_ID


def test_expected_image_counts_are_the_release_counts() -> None:
    release = authors_release().images
    for concept in default_pack().concepts:
        assert concept.release_image_count == len(release[concept.concept_id]), concept
        # Table 10 agrees with the release wherever it has the concept; the concepts it lacks have no count.
        if concept.paper_image_count is not None:
            assert concept.paper_image_count == concept.release_image_count, concept
    lacking = {c.concept for c in default_pack().concepts if c.paper_image_count is None}
    assert lacking == {"storytelling", "cartoon"}  # in the release, lost from our copy of Table 10
    # Each image the release references is counted once, under its one concept.
    assert sum(c.release_image_count or 0 for c in default_pack().concepts) == sum(map(len, release.values()))


def test_country_slugs_are_the_country_part_of_the_authors_ids() -> None:
    parts = authors_release().country_parts
    for country in default_pack().countries:
        assert country.slug == country.name.lower()
        assert default_pack().resolve_country(country.slug) == country
        assert default_pack().resolve_country(country.slug.replace(" ", "_")) == country  # the old slug form
    mismatched = set()
    for part, name in parts:
        if part != default_pack().resolve_country(name).slug:
            mismatched.add((part, name))
    assert mismatched == AUTHORS_QUIRKS
    assert {name for _, name in parts} == {c.name for c in default_pack().countries}
    assert min(authors_release().ranks) == 1


@pytest.fixture
def demo_with_a_spaced_country(small_demo_config: Build3XCMConfig) -> Build3XCMConfig:
    """The small demo with Saudi Arabia in place of UK, so one country name holds a space."""
    countries = [c if c != "UK" else "Saudi Arabia" for c in small_demo_config.countries]
    return Build3XCMConfig.model_validate(
        {
            **small_demo_config.model_dump(),
            "countries": countries,
            "demo_corpus": {**small_demo_config.demo_corpus.model_dump(), "countries": countries},
        }
    )


@pytest.mark.slow
def test_a_build_writes_image_ids_in_the_authors_format(demo_with_a_spaced_country: Build3XCMConfig) -> None:
    from data.workspace import Workspace

    config = demo_with_a_spaced_country
    summary = build_locally(config)
    release = Path(summary.release_path.removeprefix("file://"))
    concepts = authors_concepts()
    images = pq.read_table(sorted((release / "image_metadata").glob("*.parquet"))).to_pylist()
    assert images and "Saudi Arabia" in {r["country"] for r in images}
    for row in images:
        match = AUTHORS_IMAGE_ID.match(row["image_id"])
        assert match, row["image_id"]
        assert match["country"] == row["country"].lower(), row["image_id"]
        assert int(match["concept"]) == row["concept_id"] and concepts[row["concept_id"]] == row["concept"]
        assert (int(match["rank"]), match["lang"]) == (row["rank"], row["query_lang"])
    # Ranks start at 1 (the top hit) and count up within each query, as the authors' do.
    ranked: dict[tuple[str, int, str], list[int]] = defaultdict(list)
    hits = Workspace(config.workspace_root, config.resolved_build_id()).read_table("search").to_pylist()
    for hit in hits:
        if hit["status"] == "ok":
            ranked[(hit["country"], hit["concept_id"], hit["query_lang"])].append(hit["rank"])
    assert ranked
    assert all(ranks == list(range(1, len(ranks) + 1)) for ranks in ranked.values()), ranked
    # The release's RQ2 file has the authors' columns, and its ids and concepts read as theirs do.
    with (release / "benchmarks" / "xcm-bench.csv").open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
    assert reader.fieldnames == authors_release().header and rows
    for row in rows:
        for slot in SLOTS:
            match = AUTHORS_IMAGE_ID.match(row[f"{slot}image_id"])
            assert match and match["country"] == row[f"{slot}country"].lower(), row[f"{slot}image_id"]
            assert concepts[int(match["concept"])] == row[f"{slot}concept"]
