"""Tagging stage: every concept an image shows, in priority order (3XCM paper App. I).

The assembler reads tags so that no distractor carries the query concept. Embedded default: each image is
tagged with its own concept only, recorded as `tagger=none` so nobody mistakes it for a real multi-label pass.
"""

from __future__ import annotations

from typing import Literal, Protocol

import pyarrow as pa
from pydantic import BaseModel, ConfigDict

from data.schemas import TAGS, from_rows
from data.stage import Registry


class OwnConceptTaggingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: Literal["none"] = "none"


TaggingConfig = OwnConceptTaggingConfig


class TagRequest(BaseModel):
    image_id: str
    concept_id: int
    sha256: str


class Tagger(Protocol):
    name: str
    model_id: str | None

    def tag(self, requests: list[TagRequest]) -> list[list[int]]:
        """Concept ids per request, highest priority first; the image's own concept is always included."""
        ...


taggers: Registry[Tagger] = Registry("tagging")


class OwnConceptTagger:
    name = "none"
    model_id = None

    def tag(self, requests: list[TagRequest]) -> list[list[int]]:
        return [[r.concept_id] for r in requests]


@taggers.register("none")
def _none(config: OwnConceptTaggingConfig) -> Tagger:
    return OwnConceptTagger()


def run_tagging(config: TaggingConfig, requests: list[TagRequest]) -> pa.Table:
    tagger = taggers.build(config)
    tags = tagger.tag(requests)
    rows = []
    for request, concept_ids in zip(requests, tags, strict=True):
        ordered = list(dict.fromkeys(concept_ids))
        if request.concept_id not in ordered:  # a tagger may miss the obvious; the own concept is a fact
            ordered.append(request.concept_id)
        rows.append(
            {
                "image_id": request.image_id,
                "concept_ids": ordered,
                "tagger": tagger.name,
                "model_id": tagger.model_id,
            }
        )
    return from_rows(rows, TAGS)
