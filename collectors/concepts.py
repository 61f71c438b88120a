"""Concept stage: which concepts a build covers.

Embedded default: the shipped, curated list (3XCM paper, Table 10). Generated concepts (Gemini, App. H) never
flow straight into a build; they go to a review table an operator accepts from.
"""

from __future__ import annotations

from typing import Literal, Protocol

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, model_validator

from data import reference
from data.reference import Concept
from data.schemas import CONCEPTS, from_rows
from data.stage import Registry


class ShippedConceptsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

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


ConceptsConfig = ShippedConceptsConfig


class ConceptSource(Protocol):
    source: str

    def concepts(self) -> list[Concept]: ...


concept_sources: Registry[ConceptSource] = Registry("concepts")


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


class ShippedConcepts:
    source = "shipped"

    def __init__(self, config: ShippedConceptsConfig) -> None:
        self.config = config

    def concepts(self) -> list[Concept]:
        if not self.config.include:
            return list(reference.concepts())
        chosen = {_resolve(item).concept_id: _resolve(item) for item in self.config.include}
        return [chosen[k] for k in sorted(chosen)]


@concept_sources.register("shipped")
def _shipped(config: ShippedConceptsConfig) -> ConceptSource:
    return ShippedConcepts(config)


def run_concepts(config: ConceptsConfig) -> pa.Table:
    source = concept_sources.build(config)
    rows = [{"concept_id": c.concept_id, "concept": c.concept, "source": source.source} for c in source.concepts()]
    return from_rows(rows, CONCEPTS)
