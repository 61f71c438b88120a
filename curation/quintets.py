"""MixCuBe quintets: each original followed by one accepted synthesis per ethnicity (MixCuBe §2, Fig. 2).

Curation decides, the release materialises: this builds the ordered rows of the `default` table from the
originals, the attempts, their filter scores and the QA decisions. An original without an accepted attempt for
every ethnicity is left out and reported with what it lacks. Among several accepted attempts the latest wins: a
retry exists because people asked for it.

Every row carries its original's provenance (`schemas.SOURCE_FIELDS`: engine, query, URLs, retrieval time, HTTP
facts, licence): a swap is the original with its people repainted, so its source is the original's, and
`synthesized` tells the two apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

import pyarrow as pa

from data import schemas
from data.image_sources import declared_license
from data.publish.manifest import IncompleteOriginal
from data.reference import MixCubeReference
from data.schemas import STATUS_OK


class SwapScores(TypedDict, total=False):
    """What the release rows take of an attempt's filter scores (a MIXCUBE_FILTERS row)."""

    brisque: float | None
    clip_similarity: float | None


@dataclass
class Quintets:
    rows: pa.Table  # MIXCUBE_ROWS, in the public order
    incomplete: list[IncompleteOriginal]


def assemble_quintets(
    originals: pa.Table,
    attempts: pa.Table,
    scores: Mapping[str, SwapScores],
    qa: pa.Table,
    sizes: dict[str, int],
    mix: MixCubeReference,
) -> Quintets:
    """`scores`: attempt id -> {"brisque", "clip_similarity"}; `qa`: SYNTHESIS_QA; `sizes`: sha256 -> bytes; `mix`:
    the reference pack's cultures, categories and ethnicities (the default pack's four make quintets; a pack with
    another number of ethnicities makes groups of 1 + that many)."""
    ethnicities = [e.label for e in mix.ethnicities]  # the dataset labels, in the pack's order
    category_order = {c: i for i, c in enumerate(mix.categories)}
    culture_order = {c.name: i for i, c in enumerate(mix.cultures)}
    decisions = {r["attempt_id"]: r for r in qa.to_pylist()}
    accepted: dict[tuple[str, str], dict[str, Any]] = {}
    for attempt in attempts.to_pylist():
        decision = decisions.get(attempt["attempt_id"])
        if attempt["sha256"] is None or decision is None or not decision["keep"]:
            continue
        key = (attempt["original_id"], attempt["ethnicity"])
        if key not in accepted or attempt["attempt"] > accepted[key]["attempt"]:
            accepted[key] = {**attempt, "decision": decision}
    ok = [o for o in originals.to_pylist() if o["status"] == STATUS_OK]
    ok.sort(key=lambda o: (culture_order[o["culture"]], category_order[o["category"]], o["original_id"]))
    rows: list[dict[str, object]] = []
    incomplete: list[IncompleteOriginal] = []
    for original in ok:
        missing = [e for e in ethnicities if (original["original_id"], e) not in accepted]
        if missing:
            incomplete.append({"original_id": original["original_id"], "missing": missing})
            continue
        common = {
            "country": original["country"],
            "category": original["category"],
            "original_id": original["original_id"],
            "food_label": original["food_label"],
            **{field.name: original.get(field.name) for field in schemas.SOURCE_FIELDS},
            "license": declared_license(original.get("license")),
        }
        swaps = [accepted[(original["original_id"], e)] for e in ethnicities]
        rows.append(
            schemas.blank_row(
                schemas.MIXCUBE_ROWS,
                **common,
                ethnicity=mix.original_label,
                sample_id=f"{original['original_id']}-original",
                mask_sha256=swaps[0]["mask_sha256"],
                placeholder=False,
                synthesized=False,
                sha256=original["sha256"],
                num_bytes=sizes.get(original["sha256"]),
            )
        )
        for swap in swaps:
            score = scores.get(swap["attempt_id"], {})
            rows.append(
                schemas.blank_row(
                    schemas.MIXCUBE_ROWS,
                    **common,
                    ethnicity=swap["ethnicity"],
                    sample_id=f"{original['original_id']}-{swap['ethnicity'].lower()}",
                    attempt_id=swap["attempt_id"],
                    mask_sha256=swap["mask_sha256"],
                    prompt=swap["prompt"],
                    seed=swap["seed"],
                    model_id=swap["model_id"],
                    brisque=score.get("brisque"),
                    clip_similarity=score.get("clip_similarity"),
                    review_decision=swap["decision"]["decision"],
                    reviewer=swap["decision"]["reviewer"],
                    placeholder=swap["placeholder"],
                    synthesized=True,
                    sha256=swap["sha256"],
                    num_bytes=sizes.get(swap["sha256"]),
                )
            )
    return Quintets(schemas.from_rows(rows, schemas.MIXCUBE_ROWS), incomplete)
