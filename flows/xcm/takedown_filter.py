"""3XCM builds honour their release root's denylist (`data/denylist.py`, written by `culturebench takedown`).

The stage graph calls these where images enter the release's tables, in one line, and puts the denylist's digest
in that stage's fingerprint (`catalog_settings`; unchanged without a denylist), so a rebuild of the same config after
a takedown redoes it and everything after. In `image_metadata`, a denylisted image (sha256, pixel hash, URL or final
URL) is not a catalog row; the stage's stats count it as dropped, `taken_down`. The dedup before it still saw the
image, so its near-duplicates stay merged into it and leave with it.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from data.denylist import TAKEN_DOWN, drop_from_catalog, read_denylist, with_denylist
from data.stage_stats import StageStats
from flows.engine.graph import StageContext, StageOutput


def catalog_settings(config: Any) -> Any:
    """3XCM `image_metadata`'s fingerprint settings: None as before, or the denylist's digest."""
    return with_denylist(None, config.release.root, "3xcm")


def catalog_output(table: pa.Table, ctx: StageContext[Any]) -> StageOutput:
    """3XCM's image table without the denylisted images."""
    kept, dropped = drop_from_catalog(table, read_denylist(ctx.config.release.root, "3xcm"))
    if not dropped:
        return StageOutput(table)
    stats = StageStats(
        stage=ctx.stage,
        rows_in=table.num_rows,
        kept=kept.num_rows,
        dropped=len(dropped),
        dropped_by_reason={TAKEN_DOWN: len(dropped)},
        extra={TAKEN_DOWN: dropped},
    )
    return StageOutput(kept, stats=stats)
