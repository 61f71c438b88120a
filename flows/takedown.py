"""`culturebench takedown`: remove images from a release by writing its next patch version, without them.

Curation decides (`curation/takedown.py`: which images leave, which rows change), the release writer materialises
(`data/release_patch.py`), and the denylist of the release root (`data/denylist.py`) makes every later build of the
benchmark drop the same images (`flows/takedown_filter.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from curation.takedown import TakedownRequest, take_down_mixcube, take_down_xcm
from data.release import ReleaseResult
from data.release_patch import (
    ParentRelease,
    PatchInputError,
    is_later,
    next_patch_version,
    record_denylist,
    takedown_record,
    utc_today,
    write_3xcm_patch,
    write_mixcube_patch,
)
from data.schemas import UNASSEMBLED


class TakedownRefused(RuntimeError):
    """The patch would break a benchmark rule: nothing was written."""


@dataclass
class TakedownSummary:
    release: ReleaseResult
    parent: str
    removed: list[dict[str, Any]]
    rows: dict[str, Any]
    denylist: str


def take_down(
    folder: Path,
    request: TakedownRequest,
    reason: str,
    version: str | None = None,
    date: str | None = None,
) -> TakedownSummary:
    """Write the patch of the release at `folder` without the images `request` names, then add them to the release
    root's denylist. Raises `TakedownInputError` / `PatchInputError` for bad input, `TakedownRefused` when the result
    breaks a rule, `ReleaseExistsError` when the version exists with other content."""
    parent = ParentRelease.open(folder)
    version = version or next_patch_version(parent.version)
    if not is_later(version, parent.version):
        raise PatchInputError(f"version {version} does not come after {parent.version}; a patch is a later version")
    if not reason.strip():
        raise PatchInputError("--reason is empty: say why the images are taken down (it goes into the changelog)")
    date = date or utc_today()
    images = parent.images()
    requested = {"image_ids": list(request.image_ids), "sha256": list(request.sha256s), "urls": list(request.urls)}
    if parent.name == "3xcm":
        catalog = parent.table("image_metadata")
        unassembled = parent.table("unassembled") if (folder / "unassembled").is_dir() else UNASSEMBLED.empty_table()
        config = parent.manifest.get("config", {}).get("assembly", {})
        result = take_down_xcm(
            catalog,
            parent.table("benchmark"),
            parent.table("benchmark_cd"),
            unassembled,
            request,
            seed=int(parent.manifest.get("seeds", {}).get("assembly") or 0),
            max_reuse=config.get("max_candidate_reuse"),
            released_sha256=images.released_sha256,
        )
        if not result.validation.ok:
            raise TakedownRefused(f"the patch would break the benchmark rules:\n{result.validation.summary()}")
        removed = [image.as_dict() for image in result.removed]
        rows: dict[str, Any] = {task: change.counts() for task, change in result.changes.items()}
        rows["repaired"] = {task: change.repaired for task, change in result.changes.items()}
        rows["summary"] = _xcm_summary(result.changes)
        record = takedown_record(parent, version, date, reason, requested, removed, rows)
        written = write_3xcm_patch(
            parent,
            images,
            record,
            result.images,
            result.benchmark,
            result.benchmark_cd,
            result.unassembled,
            result.validation.summary(),
            result.reuse,
        )
    else:
        rows_table = parent.table("default")
        cut = take_down_mixcube(rows_table, request, released_sha256=images.released_sha256)
        removed = [image.as_dict() for image in cut.removed]
        rows = {
            "quintets": {original: named for original, named in cut.quintets.items()},
            "kept_rows": cut.rows.num_rows,
            "summary": _mixcube_summary(cut.quintets, cut.rows),
        }
        record = takedown_record(parent, version, date, reason, requested, removed, rows)
        written = write_mixcube_patch(parent, images, record, cut.rows)
    denylist = record_denylist(parent, record)
    return TakedownSummary(release=written, parent=parent.version, removed=removed, rows=rows, denylist=denylist)


def _xcm_summary(changes: dict[str, Any]) -> str:
    names = {"rq2": "RQ2 triplets", "rq3": "RQ3 sextets"}
    parts = []
    for task, change in changes.items():
        repaired = f" ({', '.join(f'`{q}`' for q in change.repaired)})" if change.repaired else ""
        parts.append(
            f"{names[task]}: {change.kept} kept as they were, {len(change.repaired)} given a new candidate for the "
            f"removed one{repaired}, {len(change.dropped)} dropped (their query image was taken down), "
            f"{len(change.unassembled)} moved to `unassembled` (no eligible candidate left)."
        )
    return (
        " ".join(parts)
        + " New candidates were chosen by the balanced assembler under the build's rules and seed. Kept rows keep "
        "every column but their `*_index` values, which follow their images: `index_in_dataset` is a row position, "
        "and the images after a removed one moved up. Each removed image is listed in `unassembled` with the reason "
        "`taken_down` and `query_index` -1."
    )


def _mixcube_summary(quintets: dict[str, list[str]], rows: pa.Table) -> str:
    listed = "; ".join(f"`{o}` (named: {', '.join(f'`{s}`' for s in named)})" for o, named in quintets.items())
    return (
        f"{len(quintets)} quintet(s) removed: {listed}. Removing an image removes its whole quintet, the original and "
        "its 4 swaps: a swap named alone takes its original and the other swaps with it, since a swap without its "
        f"original, or an original short of a swap, is not a MixCuBe item. The other {rows.num_rows} rows are "
        "unchanged."
    )
