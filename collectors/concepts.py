"""Concept stage: which concepts a build covers.

Embedded default: the reference pack's concepts (the default pack's are the curated list of the authors' release,
139 concepts with their ids: data/authors/xcm-bench.csv; 137 of them in the paper's Table 10). Generated concepts
(Gemini, App. H) never flow straight into a build; they go to a review file an operator accepts from
(`collectors/concept_generation.py`), and the "reviewed" backend adds only the accepted ones to the pack's list.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NamedTuple, Protocol

import pyarrow as pa
from pydantic import Field

from data.reference import Concept, ReferencePack
from data.schemas import CONCEPTS, from_rows
from data.stage import BackendConfig


class ShippedConceptsConfig(BackendConfig["ConceptSource"]):
    backend: Literal["shipped"] = "shipped"
    include: list[str] | None = Field(
        default=None, description="Concept names or ids of the reference pack to build; all of them when empty."
    )

    def check_include(self, pack: ReferencePack) -> None:
        """Every included concept is one of the pack's, and there is one at least (the build config calls this with
        its pack): a pack's own concepts are all this backend builds."""
        for item in self.include or []:
            resolve_concept(pack, item)
        if not shipped_subset(pack, self.include):
            raise ValueError(f"reference pack {pack.info.name} gives this build no concept; a benchmark needs one")

    def pack_concepts(self, pack: ReferencePack) -> list[Concept] | None:
        """The pack's concepts the build covers, all of them known before it runs."""
        return shipped_subset(pack, self.include)

    def build(self) -> ShippedConcepts:
        return ShippedConcepts(self)

    def fingerprint_settings(self) -> Any:
        """What decides the concepts stage's output: this config."""
        return self


class ReviewedConceptsConfig(BackendConfig["ConceptSource"]):
    """The shipped concepts plus the candidates an operator accepted in a review file (never pending/rejected)."""

    backend: Literal["reviewed"] = "reviewed"
    review_file: str = Field(description="fsspec path of the review CSV written by write_review_file().")
    include_shipped: bool = Field(default=True, description="Start from the pack's list (filtered by `include`).")
    include: list[str] | None = Field(
        default=None, description="The pack's concept names or ids to keep; all of them when empty."
    )

    def check_include(self, pack: ReferencePack) -> None:
        for item in self.include or []:
            resolve_concept(pack, item)

    def pack_concepts(self, pack: ReferencePack) -> list[Concept] | None:
        """The pack's concepts the build covers (the accepted candidates come on top, known only when it runs)."""
        return shipped_subset(pack, self.include) if self.include_shipped else []

    def build(self) -> ReviewedConcepts:
        return ReviewedConcepts(self)

    def fingerprint_settings(self) -> Any:
        """What decides the concepts stage's output: this config and the review file's content, since an operator's
        edits to the file change what the build covers (the path alone stays the same)."""
        from collectors.concept_generation import review_file_sha256  # the review-file format lives there

        return (self, review_file_sha256(self.review_file))


ConceptsConfig = Annotated[ShippedConceptsConfig | ReviewedConceptsConfig, Field(discriminator="backend")]


class SourcedConcept(NamedTuple):
    concept: Concept
    source: str  # shipped | gemini | operator (CONCEPTS.source)


class ConceptSource(Protocol):
    def concepts(self, pack: ReferencePack) -> list[SourcedConcept]: ...


def resolve_concept(pack: ReferencePack, item: str | int) -> Concept:
    key = str(item).strip().lower()
    for concept in pack.concepts:
        if key in (
            concept.concept.lower(),
            str(concept.concept_id),
            concept.concept.lower().replace(" ", "_"),
        ):
            return concept
    raise ValueError(f"unknown concept {item!r}: not in the concepts.csv of the reference pack {pack.info.name}")


def shipped_subset(pack: ReferencePack, include: list[str] | None) -> list[Concept]:
    if not include:
        return list(pack.concepts)
    chosen = {resolve_concept(pack, item).concept_id: resolve_concept(pack, item) for item in include}
    return [chosen[k] for k in sorted(chosen)]


class ShippedConcepts:
    def __init__(self, config: ShippedConceptsConfig) -> None:
        self.config = config

    def concepts(self, pack: ReferencePack) -> list[SourcedConcept]:
        return [SourcedConcept(c, "shipped") for c in shipped_subset(pack, self.config.include)]


class ReviewedConcepts:
    def __init__(self, config: ReviewedConceptsConfig) -> None:
        self.config = config

    def concepts(self, pack: ReferencePack) -> list[SourcedConcept]:
        # Imported here: the review-file format lives with concept generation.
        from collectors.concept_generation import REVIEW_ACCEPTED, read_review_file

        rows = read_review_file(self.config.review_file, pack)
        shipped = shipped_subset(pack, self.config.include) if self.config.include_shipped else []
        accepted = [
            SourcedConcept(Concept(concept_id=r.concept_id, concept=r.concept), "gemini")
            for r in rows
            # (an accepted row has its id: read_review_file refuses one without)
            if r.review_status == REVIEW_ACCEPTED and r.concept_id is not None
        ]
        return [*(SourcedConcept(c, "shipped") for c in shipped), *sorted(accepted, key=lambda s: s.concept.concept_id)]


def run_concepts(config: ShippedConceptsConfig | ReviewedConceptsConfig, pack: ReferencePack) -> pa.Table:
    rows = [
        {"concept_id": c.concept.concept_id, "concept": c.concept.concept, "source": c.source}
        for c in config.build().concepts(pack)
    ]
    return from_rows(rows, CONCEPTS)
