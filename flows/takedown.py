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

from curation.takedown import MixcubeTakedown, TakedownRequest, XcmTakedown, take_down_mixcube, take_down_xcm
from data.denylist import DenylistError, DenylistLockError, denylist_location, read_denylist
from data.release import ReleaseResult
from data.release_integrity import verified
from data.release_patch import (
    ParentRelease,
    PatchInputError,
    ReleasedImages,
    checked_date,
    code_span,
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


class DenylistNotUpdated(RuntimeError):
    """The patch was written but the denylist could not be: the message says both, and how a rerun completes it."""


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
    root's denylist. Everything is checked before anything is written: the parent release, the version, the
    reason, the date, the denylist and the request. Raises `TakedownInputError` / `PatchInputError` /
    `ReleaseReadError` / `DenylistError` for bad input, `TakedownRefused` when the result breaks a rule,
    `ReleaseExistsError` when the version exists with other content, `DenylistNotUpdated` when the patch was
    written but the denylist could not be (the same call again completes it)."""
    parent = ParentRelease.open(folder)
    verified(folder, images=True)  # a patch carries its parent's bytes: they must be the published ones
    version = version or next_patch_version(parent.version)
    if not is_later(version, parent.version):
        raise PatchInputError(f"version {version} does not come after {parent.version}; a patch is a later version")
    if not reason.strip():
        raise PatchInputError("--reason is empty: say why the images are taken down (it goes into the changelog)")
    date = checked_date(date) if date is not None else utc_today()
    parent.release_config(version)  # the parent's release settings, usable for the patch
    read_denylist(parent.root, parent.name)  # a denylist that cannot be read refuses the takedown before the patch
    images = parent.images()
    requested = {"image_ids": list(request.image_ids), "sha256": list(request.sha256s), "urls": list(request.urls)}
    derived = derive_patch(parent, request, images)
    if isinstance(derived, XcmTakedown):
        _refuse_an_empty_patch(parent, len(derived.index_map), derived.images.num_rows)
        if not derived.validation.ok:
            raise TakedownRefused(f"the patch would break the benchmark rules:\n{derived.validation.summary()}")
        removed = [image.as_dict() for image in derived.removed]
        rows: dict[str, Any] = {task: change.counts() for task, change in derived.changes.items()}
        rows["repaired"] = {task: change.repaired for task, change in derived.changes.items()}
        rows["summary"] = _xcm_summary(derived.changes)
        record = takedown_record(parent, version, date, reason, requested, removed, rows)
        written = write_3xcm_patch(
            parent,
            images,
            record,
            derived.images,
            derived.benchmark,
            derived.benchmark_cd,
            derived.unassembled,
            derived.validation.summary(),
            derived.reuse,
        )
    else:
        _refuse_an_empty_patch(parent, derived.rows.num_rows + len(derived.removed), derived.rows.num_rows)
        removed = [image.as_dict() for image in derived.removed]
        rows = {
            "quintets": {original: named for original, named in derived.quintets.items()},
            "kept_rows": derived.rows.num_rows,
            "summary": _mixcube_summary(derived.quintets, derived.rows),
        }
        record = takedown_record(parent, version, date, reason, requested, removed, rows)
        written = write_mixcube_patch(parent, images, record, derived.rows)
    try:
        denylist = record_denylist(parent, record)
    except (OSError, DenylistError, DenylistLockError) as exc:
        raise DenylistNotUpdated(
            f"the patch {written.path} was written ({written.status}), but the denylist "
            f"{denylist_location(parent.root, parent.name)} was not updated: {_why(exc)}. Rerun the same takedown "
            f"with --version {version} --date {date} to add its entries (the patch is then unchanged)"
        ) from None
    return TakedownSummary(release=written, parent=parent.version, removed=removed, rows=rows, denylist=denylist)


def derive_patch(
    parent: ParentRelease, request: TakedownRequest, images: ReleasedImages | None = None
) -> XcmTakedown | MixcubeTakedown:
    """What taking `request` down from `parent` gives, table by table, decided and not written: `take_down` writes
    it, and `validate` derives a patch again from its parent to check that its rows are exactly these."""
    images = images or parent.images()
    if parent.name == "3xcm":
        unassembled = (
            parent.table("unassembled") if (parent.folder / "unassembled").is_dir() else UNASSEMBLED.empty_table()
        )
        config = parent.manifest.get("config", {}).get("assembly", {})
        return take_down_xcm(
            parent.table("image_metadata"),
            parent.table("benchmark"),
            parent.table("benchmark_cd"),
            unassembled,
            request,
            seed=int(parent.manifest.get("seeds", {}).get("assembly") or 0),
            max_reuse=config.get("max_candidate_reuse"),
            released_sha256=images.released_sha256,
        )
    return take_down_mixcube(parent.table("default"), request, released_sha256=images.released_sha256)


def _refuse_an_empty_patch(parent: ParentRelease, before: int, after: int) -> None:
    """A release without images is no benchmark (the validator refuses an empty 3XCM: "no RQ2 triplet could be
    assembled"; a MixCuBe without quintets has no item): refused before anything is written."""
    if before and not after:
        raise TakedownRefused(
            f"the takedown would remove every image of {parent.folder} ({before} images), leaving a {parent.name} "
            "release without images, which is no benchmark; nothing was written. Withdraw the release instead of "
            "patching it"
        )


def _why(exc: Exception) -> str:
    """One line for what stopped the denylist write."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror + (f" ({exc.filename})" if exc.filename else "")
    return " ".join(str(exc).split())


def _xcm_summary(changes: dict[str, Any]) -> str:
    names = {"rq2": "RQ2 triplets", "rq3": "RQ3 sextets"}
    parts = []
    for task, change in changes.items():
        repaired = f" ({', '.join(code_span(q) for q in change.repaired)})" if change.repaired else ""
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
    listed = "; ".join(
        f"{code_span(o)} (named: {', '.join(code_span(s) for s in named)})" for o, named in quintets.items()
    )
    return (
        f"{len(quintets)} quintet(s) removed: {listed}. Removing an image removes its whole quintet, the original and "
        "its 4 swaps: a swap named alone takes its original and the other swaps with it, since a swap without its "
        f"original, or an original short of a swap, is not a MixCuBe item. The other {rows.num_rows} rows are "
        "unchanged."
    )
