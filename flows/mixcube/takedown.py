"""MixCuBe takedowns: what taking images down from a MixCuBe release gives (`derive_patch`: `curation/takedown.py`
removes each named image's whole quintet) and the patch release that materialises it (`write_patch`, through
MixCuBe's own release writer, with the parent's released bytes and masks). `flows/operations/takedown.py` runs
them for `culturebench takedown`, and `flows/operations/validate.py` derives a patch again to check it.

MixCuBe builds honour their release root's denylist (`data/takedown/denylist.py`, written by `culturebench takedown`).

The stage graph calls these where originals enter the build, in one line each, and puts the denylist's digest in the
`originals` stage's fingerprint (`originals_settings`; unchanged without a denylist), so a rebuild of the same config
after a takedown redoes it and everything after. A denylisted original (sha256, sha256 as received, URL or final URL)
is a failed row, `error="taken_down"`, and is never inpainted; the search backend's downloader never requests a
denylisted URL.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from curation.takedown import TakedownRequest, take_down_mixcube
from data.publish.changelog import code_span, render_changelog
from data.publish.folder import ReleaseResult
from data.publish.images import ReleasedImages
from data.publish.manifest import CellBelowTarget, TakedownRecord
from data.schemas import MIXCUBE_ROWS
from data.takedown.denylist import DenylistFetcher, mark_taken_down, read_denylist, with_denylist
from data.takedown.patch import DerivedPatch, ParentRelease, PatchInputError, patch_provenance
from flows.engine.graph import StageContext
from flows.mixcube.release import IMAGES, write_mixcube_release


def derive_patch(parent: ParentRelease, request: TakedownRequest, images: ReleasedImages) -> DerivedPatch:
    """The quintets of the images `request` names taken down from the MixCuBe release `parent`."""
    derived = take_down_mixcube(parent.table(IMAGES.config), request, released_sha256=images.released_sha256)
    rows = {
        "quintets": {original: named for original, named in derived.quintets.items()},
        "kept_rows": derived.rows.num_rows,
        "summary": _summary(derived.quintets, derived.rows),
    }
    return DerivedPatch(
        tables={IMAGES.config: derived.rows},
        removed=[image.as_dict() for image in derived.removed],
        rows=rows,
        images_before=derived.rows.num_rows + len(derived.removed),
        images_after=derived.rows.num_rows,
        detail=derived,
    )


def write_patch(
    parent: ParentRelease, images: ReleasedImages, record: TakedownRecord, derived: DerivedPatch
) -> ReleaseResult:
    """The patch `derive_patch` decided, written as the release `record` names."""
    return write_mixcube_patch(parent, images, record, derived.tables[IMAGES.config])


def write_mixcube_patch(
    parent: ParentRelease, images: ReleasedImages, record: TakedownRecord, rows: pa.Table
) -> ReleaseResult:
    """The patch of a MixCuBe release: `rows` are its rows without bytes, without the removed quintets."""
    provenance = patch_provenance(parent, record)
    if "cells_below_target" in provenance.model_fields_set:  # the parent states them: counted again
        provenance = provenance.model_copy(update={"cells_below_target": cells_below_target(parent, rows)})
    return write_mixcube_release(
        parent.release_config(record.version),
        _ReleasedBlobs(parent, images),
        rows.select([n for n in (*MIXCUBE_ROWS.names, "phash") if n in rows.column_names]),  # a URL-only parent's
        provenance.model_dump(exclude_unset=True),  # as stated (python values: the same JSON bytes)
        parent.pack(),
        changelog=render_changelog(provenance.takedowns or []),
    )


def cells_below_target(parent: ParentRelease, rows: pa.Table) -> list[CellBelowTarget]:
    """The culture x category cells short of the build's target, counted again over the patch's originals: the
    parent's short cells in their order, then cells the takedown took below the target."""
    short = parent.manifest.cells_below_target
    target = parent.manifest.config.get("target_per_cell") or (short[0]["target"] if short else None)
    if target is None:
        return list(short)
    originals = [
        r
        for r in rows.select(["country", "category", "ethnicity"]).to_pylist()
        if r["ethnicity"] == parent.pack().mixcube().original_label
    ]
    counts: dict[tuple[str, str], int] = {}
    for row in originals:
        counts[(row["country"], row["category"])] = counts.get((row["country"], row["category"]), 0) + 1
    parent_cells = [(c["country"], c["category"]) for c in short]
    released = parent.table(IMAGES.config).select(["country", "category"]).to_pylist()
    cells = list(dict.fromkeys([*parent_cells, *((r["country"], r["category"]) for r in released)]))
    return [
        {"country": country, "category": category, "originals": counts.get((country, category), 0), "target": target}
        for country, category in cells
        if counts.get((country, category), 0) < target
    ]


class _ReleasedBlobs:
    """What `write_mixcube_release` asks of a blob store, served from the parent release: images by their sha256
    column (already JPEG, so written unchanged), masks from `masks/<sha256>.png`."""

    def __init__(self, parent: ParentRelease, images: ReleasedImages) -> None:
        self.parent, self.images = parent, images

    def get(self, sha: str) -> bytes:
        if sha in self.images.sha_where:
            data = self.images.by_sha256(sha)
            if data is None:  # a URL-only original: the writer never asks for its bytes, only for the swaps'
                raise PatchInputError(f"{self.parent.folder}: image {sha} has no bytes in the release (URL-only)")
            return data
        return (self.parent.folder / "masks" / f"{sha}.png").read_bytes()


def _summary(quintets: dict[str, list[str]], rows: pa.Table) -> str:
    listed = "; ".join(
        f"{code_span(o)} (named: {', '.join(code_span(s) for s in named)})" for o, named in quintets.items()
    )
    return (
        f"{len(quintets)} quintet(s) removed: {listed}. Removing an image removes its whole quintet, the original and "
        "its 4 swaps: a swap named alone takes its original and the other swaps with it, since a swap without its "
        f"original, or an original short of a swap, is not a MixCuBe item. The other {rows.num_rows} rows are "
        "unchanged."
    )


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
