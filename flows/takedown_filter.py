"""Builds honour their release root's denylist (`data/denylist.py`, written by `culturebench takedown`).

The stage graphs call these where images enter a release's tables, each in one line, and put the denylist's digest
in those stages' fingerprints (`catalog_settings`, `originals_settings`; unchanged without a denylist), so a rebuild
of the same config after a takedown redoes them and everything after:
- 3XCM, `image_metadata`: a denylisted image (sha256, pixel hash, URL or final URL) is not a catalog row; the stage's
  stats count it as dropped, `taken_down`. The dedup before it still saw the image, so its near-duplicates stay
  merged into it and leave with it.
- MixCuBe, `originals`: a denylisted original (sha256, sha256 as received, URL or final URL) is a failed row,
  `error="taken_down"`, and is never inpainted; the search backend's downloader never requests a denylisted URL.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from data.denylist import TAKEN_DOWN, DenylistFetcher, drop_from_catalog, mark_taken_down, read_denylist, with_denylist
from data.stage_stats import StageStats
from flows.engine.graph import StageContext, StageOutput


def catalog_settings(config: Any) -> Any:
    """3XCM `image_metadata`'s fingerprint settings: None as before, or the denylist's digest."""
    return with_denylist(None, config.release.root, "3xcm")


def originals_settings(config: Any) -> Any:
    """MixCuBe `originals`' fingerprint settings: the originals section as before, paired with the denylist's digest
    when there is one."""
    return with_denylist(config.originals, config.release.root, "mixcube")


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


def originals_without_taken_down(table: pa.Table, ctx: StageContext[Any]) -> pa.Table:
    """MixCuBe's originals, each denylisted one failed as `taken_down`."""
    denylist = read_denylist(ctx.config.release.root, "mixcube")
    return mark_taken_down(table, denylist, ("sha256", "received_sha256"), ("url", "final_url"))


def fetcher_without_taken_down(fetcher: Any, ctx: StageContext[Any], benchmark: str) -> Any:
    """`fetcher`, refusing the denylisted URLs before any request."""
    denylist = read_denylist(ctx.config.release.root, benchmark)
    return DenylistFetcher(fetcher, denylist) if denylist.entries else fetcher
