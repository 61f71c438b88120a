"""Concept stage: which concepts a build covers.

Embedded default: the shipped, curated list: the 139 concepts of the authors' release with their ids
(data/reference/xcm-bench.csv; 137 of them in the paper's Table 10). Generated concepts (Gemini, App. H) never flow
straight into a build; they go to a review file an operator accepts from (`collectors/concept_generation.py`), and
the "reviewed" backend adds only the accepted ones to the shipped list.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NamedTuple, Protocol

import pyarrow as pa
from pydantic import Field, model_validator

from data import reference
from data.reference import Concept
from data.schemas import CONCEPTS, from_rows
from data.stage import BackendConfig


class ShippedConceptsConfig(BackendConfig["ConceptSource"]):
    backend: Literal["shipped"] = "shipped"
    include: list[str] | None = Field(
        default=None, description="Concept names or ids to build; all shipped concepts when empty."
    )

    @model_validator(mode="after")
    def _known(self) -> ShippedConceptsConfig:
        if self.include:
            for item in self.include:
                _resolve(item)
        return self

    def build(self) -> ShippedConcepts:
        return ShippedConcepts(self)

    def fingerprint_settings(self) -> Any:
        """What decides the concepts stage's output: this config."""
        return self


class ReviewedConceptsConfig(BackendConfig["ConceptSource"]):
    """The shipped concepts plus the candidates an operator accepted in a review file (never pending/rejected)."""

    backend: Literal["reviewed"] = "reviewed"
    review_file: str = Field(description="fsspec path of the review CSV written by write_review_file().")
    include_shipped: bool = Field(default=True, description="Start from the shipped list (filtered by `include`).")
    include: list[str] | None = Field(
        default=None, description="Shipped concept names or ids to keep; all shipped concepts when empty."
    )

    @model_validator(mode="after")
    def _known(self) -> ReviewedConceptsConfig:
        if self.include:
            for item in self.include:
                _resolve(item)
        return self

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
    def concepts(self) -> list[SourcedConcept]: ...


def _resolve(item: str | int) -> Concept:
    key = str(item).strip().lower()
    for concept in reference.concepts():
        if key in (
            concept.concept.lower(),
            str(concept.concept_id),
            concept.concept.lower().replace(" ", "_"),
        ):
            return concept
    raise ValueError(f"unknown concept {item!r}: not in the shipped list (data/reference/concepts.csv)")


def _shipped_subset(include: list[str] | None) -> list[Concept]:
    if not include:
        return list(reference.concepts())
    chosen = {_resolve(item).concept_id: _resolve(item) for item in include}
    return [chosen[k] for k in sorted(chosen)]


class ShippedConcepts:
    def __init__(self, config: ShippedConceptsConfig) -> None:
        self.config = config

    def concepts(self) -> list[SourcedConcept]:
        return [SourcedConcept(c, "shipped") for c in _shipped_subset(self.config.include)]


class ReviewedConcepts:
    def __init__(self, config: ReviewedConceptsConfig) -> None:
        self.config = config

    def concepts(self) -> list[SourcedConcept]:
        # Imported here: the review-file format lives with concept generation.
        from collectors.concept_generation import REVIEW_ACCEPTED, read_review_file

        rows = read_review_file(self.config.review_file)
        shipped = _shipped_subset(self.config.include) if self.config.include_shipped else []
        accepted = [
            SourcedConcept(Concept(concept_id=r.concept_id, concept=r.concept), "gemini")
            for r in rows
            # (an accepted row has its id: read_review_file refuses one without)
            if r.review_status == REVIEW_ACCEPTED and r.concept_id is not None
        ]
        return [*(SourcedConcept(c, "shipped") for c in shipped), *sorted(accepted, key=lambda s: s.concept.concept_id)]


def run_concepts(config: ShippedConceptsConfig | ReviewedConceptsConfig) -> pa.Table:
    rows = [
        {"concept_id": c.concept.concept_id, "concept": c.concept.concept, "source": c.source}
        for c in config.build().concepts()
    ]
    return from_rows(rows, CONCEPTS)
