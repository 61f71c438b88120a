"""`culturebench takedown`: remove images from a release by writing its next patch version, without them.

The benchmark's record decides and writes (`Benchmark.derive_patch`: curation decides which images leave and which
rows change, `curation/takedown.py`; `Benchmark.write_patch`: its release writer materialises the patch, e.g.
`flows/xcm/takedown.py`); the generic steps around them are here and in `data/takedown/patch.py` (the parent, the
version, the takedown record), and the denylist of the release root (`data/takedown/denylist.py`) makes every later
build of the benchmark drop the same images (each benchmark's `flows/<benchmark>/takedown.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from curation.takedown import TakedownRequest
from data.publish.folder import ReleaseResult
from data.publish.format import MANIFEST
from data.publish.images import ReleasedImages
from data.publish.integrity import verified
from data.takedown.denylist import (
    DenylistError,
    DenylistLockError,
    HeldDenylist,
    denylist_location,
    locked_denylist,
    read_denylist,
)
from data.takedown.patch import (
    DerivedPatch,
    ParentRelease,
    PatchInputError,
    RemovedRecord,
    checked_date,
    is_later,
    next_patch_version,
    record_denylist,
    takedown_record,
    utc_today,
)
from flows import benchmarks
from flows.engine.benchmark import Benchmark


class TakedownRefused(RuntimeError):
    """The patch would break a benchmark rule: nothing was written."""


class DenylistNotUpdated(RuntimeError):
    """The patch was written but the denylist could not be: the message says both, and how a rerun completes it."""


@dataclass
class TakedownSummary:
    release: ReleaseResult
    parent: str
    removed: list[RemovedRecord]
    rows: Mapping[str, object]  # how the rows changed (`DerivedPatch.rows`)
    denylist: str


def take_down(
    folder: Path,
    request: TakedownRequest,
    reason: str,
    version: str | None = None,
    date: str | None = None,
) -> TakedownSummary:
    """Write the patch of the release at `folder` without the images `request` names, nor any other image the
    release root's denylist names, then add them to the denylist. Everything is checked before anything is written:
    the parent release, the version, the reason, the date, the denylist and the request. Raises
    `TakedownInputError` / `PatchInputError` / `ReleaseReadError` / `DenylistError` for bad input (a version that
    would not be the root's newest included), `TakedownRefused` when the result breaks a rule or another takedown
    holds the denylist's lock, `ReleaseExistsError` when the version exists with other content,
    `DenylistNotUpdated` when the patch was written but the denylist could not be (the same call again completes
    it).

    The denylist's lock is held from reading the denylist to merging this takedown's entries, and the patch
    applies every entry read under it: takedowns of one root run one after the other, each patch without every
    image taken down before it, whichever version it was made from. A patch is the root's newest version, so the
    newest version never holds a denylisted image (the root keeps every takedown; a later patch applies them all).
    """
    known = [b.name for b in benchmarks.all_benchmarks() if b.derive_patch is not None and b.write_patch is not None]
    parent = ParentRelease.open(folder, known=known)
    benchmark = benchmarks.get(parent.name)
    # a patch carries its parent's bytes: they must be the published ones
    verified(folder, images=benchmark.image_config)
    version = version or next_patch_version(parent.version)
    if not is_later(version, parent.version):
        raise PatchInputError(f"version {version} does not come after {parent.version}; a patch is a later version")
    if not reason.strip():
        raise PatchInputError("--reason is empty: say why the images are taken down (it goes into the changelog)")
    date = checked_date(date) if date is not None else utc_today()
    parent.release_config(version)  # the parent's release settings, usable for the patch
    read_denylist(parent.root, parent.name)  # a denylist that cannot be read refuses the takedown before the patch
    try:
        with locked_denylist(parent.root, parent.name) as held:
            return _take_down_held(parent, benchmark, held, request, reason, version, date)
    except DenylistLockError as exc:  # only taking the lock raises it: nothing was written by this call
        raise _lock_refusal(parent, version, date, exc) from None


def _take_down_held(
    parent: ParentRelease,
    benchmark: Benchmark[Any],
    held: HeldDenylist,
    request: TakedownRequest,
    reason: str,
    version: str,
    date: str,
) -> TakedownSummary:
    """The takedown's derivation and writes, while it holds the denylist's lock (`held`, read under it)."""
    later = parent.later_versions(version)
    # A rerun completing its denylist entries (its patch exists) goes on: those entries must not be lost.
    if later and not (parent.folder.parent / version / MANIFEST).is_file():
        raise PatchInputError(
            f"version {version} would not be the newest release of {parent.folder.parent}: {later[-1]} is later. A "
            f"patch takes down every image of the root's denylist, and the newest version must hold none, so take "
            f"down from {later[-1]} with a version after it"
        )
    denylisted = parent.denylisted(held.denylist, version, benchmark.image_config)
    request = replace(request, denylisted=tuple(denylisted))
    images = parent.images(benchmark.image_config)
    requested: dict[str, list[str]] = {
        "image_ids": list(request.image_ids),
        "sha256": list(request.sha256s),
        "urls": list(request.urls),
    }
    if denylisted:  # the root's earlier takedowns, applied again: `validate` derives the patch from this record
        requested["denylisted"] = denylisted
    derived = derive_patch(parent, request, images)
    _refuse_an_empty_patch(parent, derived.images_before, derived.images_after)
    if derived.problems:
        raise TakedownRefused(f"the patch would break the benchmark rules:\n{derived.problems}")
    record = takedown_record(parent, version, date, reason, requested, derived.removed, derived.rows)
    assert benchmark.write_patch is not None  # `known` holds only benchmarks that write patches
    written = benchmark.write_patch(parent, images, record, derived)
    try:
        denylist = record_denylist(parent, record, held)
    except (OSError, DenylistError) as exc:
        raise DenylistNotUpdated(
            f"the patch {written.path} was written ({written.status}), but the denylist "
            f"{denylist_location(parent.root, parent.name)} was not updated: {_why(exc)}. Rerun the same takedown "
            f"with --version {version} --date {date} to add its entries (the patch is then unchanged)"
        ) from None
    return TakedownSummary(
        release=written, parent=parent.version, removed=derived.removed, rows=derived.rows, denylist=denylist
    )


def _lock_refusal(parent: ParentRelease, version: str, date: str, exc: DenylistLockError) -> Exception:
    """What a takedown that could not take the denylist's lock says: the patch of an earlier run of it exists
    without its denylist entries (rerun once the lock is free), or nothing was written."""
    patch = parent.folder.parent / version
    try:
        recorded = any(e.version == version for e in read_denylist(parent.root, parent.name).entries)
    except DenylistError:
        recorded = False
    if (patch / MANIFEST).is_file() and not recorded:
        return DenylistNotUpdated(
            f"the patch {patch} exists, but the denylist {denylist_location(parent.root, parent.name)} was not "
            f"updated: {_why(exc)}. Rerun the same takedown with --version {version} --date {date} to add its "
            "entries (the patch is then unchanged)"
        )
    return TakedownRefused(f"nothing was written: {_why(exc)}")


def derive_patch(parent: ParentRelease, request: TakedownRequest, images: ReleasedImages | None = None) -> DerivedPatch:
    """What taking `request` down from `parent` gives, table by table, decided and not written (by the parent's
    benchmark, `Benchmark.derive_patch`): `take_down` writes it, and `validate` derives a patch again from its parent
    to check that its rows are exactly these."""
    benchmark = _patching(parent)
    assert benchmark.derive_patch is not None  # `_patching` refuses a benchmark without one
    return benchmark.derive_patch(parent, request, images or parent.images(benchmark.image_config))


def _patching(parent: ParentRelease) -> Benchmark[Any]:
    """The benchmark of `parent`, which must know how to derive and write a patch."""
    benchmark = benchmarks.get(parent.name)
    if benchmark.derive_patch is None or benchmark.write_patch is None:
        raise PatchInputError(f"{parent.folder}: takedown does not know how to patch a {parent.name} release")
    return benchmark


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
