"""MixCuBe builds honour their release root's denylist (`data/denylist.py`, written by `culturebench takedown`).

The stage graph calls these where originals enter the build, in one line each, and puts the denylist's digest in the
`originals` stage's fingerprint (`originals_settings`; unchanged without a denylist), so a rebuild of the same config
after a takedown redoes it and everything after. A denylisted original (sha256, sha256 as received, URL or final URL)
is a failed row, `error="taken_down"`, and is never inpainted; the search backend's downloader never requests a
denylisted URL.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from data.denylist import DenylistFetcher, mark_taken_down, read_denylist, with_denylist
from flows.engine.graph import StageContext


def originals_settings(config: Any) -> Any:
    """MixCuBe `originals`' fingerprint settings: the originals section as before, paired with the denylist's digest
    when there is one."""
    return with_denylist(config.originals, config.release.root, "mixcube")


def originals_without_taken_down(table: pa.Table, ctx: StageContext[Any]) -> pa.Table:
    """MixCuBe's originals, each denylisted one failed as `taken_down`."""
    denylist = read_denylist(ctx.config.release.root, "mixcube")
    return mark_taken_down(table, denylist, ("sha256", "received_sha256"), ("url", "final_url"))


def fetcher_without_taken_down(fetcher: Any, ctx: StageContext[Any], benchmark: str) -> Any:
    """`fetcher`, refusing the denylisted URLs of `benchmark`'s release root before any request."""
    denylist = read_denylist(ctx.config.release.root, benchmark)
    return DenylistFetcher(fetcher, denylist) if denylist.entries else fetcher
