"""The MixCuBe filter stage, one shard at a time (MixCuBe paper App. A.6): synthesis attempts in, MIXCUBE_FILTERS out.

Every attempt is one row in input order: the drawn ones scored by the automatic filters (curation/synthesis_filters.py),
a failed synthesis an `error` row that says why. One original serves four ethnicities, so each original is read once
per shard.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Protocol

import pyarrow as pa

from curation.synthesis_filters import MAX_ERROR_TEXT, verdict_counts
from data import schemas
from data.review_labels import ERROR, KEEP
from data.stage_stats import StageStats


class PairScorer(Protocol):
    """What the stage needs of `SynthesisFilter`: rows of SYNTHESIS_FILTER_SCORES and the names of its backends."""

    brisque_backend: str
    clip_backend: str

    def score(self, pairs: Sequence[tuple[bytes, bytes]]) -> list[schemas.FilterScoresRow]: ...


def filters_table(
    attempts: Sequence[schemas.SynthesisAttemptRow],
    scorer: Callable[[], PairScorer],
    original_sha256: Mapping[str, str],
    load_blob: Callable[[str], bytes],
    device_slot: Callable[[], AbstractContextManager[None]] = nullcontext,
) -> pa.Table:
    """MIXCUBE_FILTERS rows for `attempts` (SYNTHESIS_ATTEMPTS rows), in order.

    `scorer` gives the (lazily built) filter; `original_sha256` maps an original id to its image blob. Only the
    scoring runs inside `device_slot` (a Prefect concurrency slot on the GPU)."""
    drawn = [(a, sha) for a in attempts if (sha := a["sha256"]) is not None]
    # One original serves 4 ethnicities: read it once.
    originals = {key: load_blob(key) for key in {original_sha256[a["original_id"]] for a, _ in drawn}}
    pairs = [(originals[original_sha256[a["original_id"]]], load_blob(sha)) for a, sha in drawn]
    with device_slot():
        scores = scorer().score(pairs)
    by_id = {a["attempt_id"]: s for (a, _), s in zip(drawn, scores, strict=True)}
    rows: list[schemas.MixcubeFiltersRow] = []
    for attempt in attempts:
        score: schemas.FilterScoresRow = by_id.get(attempt["attempt_id"]) or {
            "brisque": None,
            "clip_similarity": None,
            "brisque_backend": scorer().brisque_backend,
            "clip_backend": scorer().clip_backend,
            "verdict": ERROR,
            "reason": f"synthesis failed: {attempt['error']}"[:MAX_ERROR_TEXT],
        }
        rows.append({"attempt_id": attempt["attempt_id"], **score})
    return schemas.from_rows(rows, schemas.MIXCUBE_FILTERS)


def filter_stats(stage: str, table: pa.Table) -> StageStats:
    """A filter stage's counts: kept are the `keep` verdicts, the other verdicts are the reasons dropped."""
    counts = verdict_counts(table.select(["verdict"]).to_pylist())
    return StageStats(
        stage=stage,
        rows_in=table.num_rows,
        kept=counts[KEEP],
        dropped=table.num_rows - counts[KEEP],
        dropped_by_reason={k: v for k, v in counts.items() if k != KEEP and v},
        extra={
            column: table[column][0].as_py() if table.num_rows else None
            for column in ("brisque_backend", "clip_backend")
        },
    )
