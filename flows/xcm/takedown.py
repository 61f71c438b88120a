"""3XCM takedowns: what taking images down from a 3XCM release gives (`derive_patch`: `curation/takedown.py` decides
which images leave and which rows change) and the patch release that materialises it (`write_patch`, through 3XCM's
own release writer, with the parent's released bytes). `flows/operations/takedown.py` runs them for
`culturebench takedown`, and `flows/operations/validate.py` derives a patch again to check it.

3XCM builds honour their release root's denylist (`data/takedown/denylist.py`, written by `culturebench takedown`).

The stage graph calls these where images enter the release's tables, in one line, and puts the denylist's digest
in that stage's fingerprint (`catalog_settings`; unchanged without a denylist), so a rebuild of the same config after
a takedown redoes it and everything after. In `image_metadata`, a denylisted image (sha256, pixel hash, URL or final
URL) is not a catalog row; the stage's stats count it as dropped, `taken_down`. The dedup before it still saw the
image, so its near-duplicates stay merged into it and leave with it.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from curation.takedown import TakedownRequest, TaskChange, XcmTakedown, take_down_xcm
from data.publish.changelog import code_span, render_changelog
from data.publish.folder import ReleaseResult
from data.publish.format import MANIFEST
from data.publish.images import ReleasedImages
from data.publish.manifest import ReleaseManifest, TakedownRecord
from data.schemas import UNASSEMBLED
from data.stage_stats import StageStats
from data.takedown.denylist import TAKEN_DOWN, drop_from_catalog, read_denylist, with_denylist
from data.takedown.patch import DerivedPatch, ParentRelease, PatchInputError, patch_provenance
from flows.engine.graph import StageContext, StageOutput
from flows.xcm.release import IMAGES, write_3xcm_release

TASKS = {"rq2": "RQ2 triplets", "rq3": "RQ3 sextets"}


def _assembly_problem(manifest: ReleaseManifest) -> str | None:
    """What the derivation reads of the parent's assembly settings, in the shape it reads it (its seed is typed by
    the model: `seeds` holds integers)."""
    if not isinstance(manifest.config.get("assembly", {}), dict):
        return "field 'config.assembly' must be an object"
    return None


def derive_patch(parent: ParentRelease, request: TakedownRequest, images: ReleasedImages) -> DerivedPatch:
    """The images `request` names taken down from the 3XCM release `parent`: its tables without them, each triplet
    or sextet that used one given a new candidate by the balanced assembler (the build's rules and seed), dropped
    (its query left) or moved to `unassembled`."""
    problem = _assembly_problem(parent.manifest)
    if problem:
        raise PatchInputError(f"{parent.folder / MANIFEST}: {problem}; not a manifest culturebench wrote")
    unassembled = parent.table("unassembled") if (parent.folder / "unassembled").is_dir() else UNASSEMBLED.empty_table()
    config = parent.manifest.config.get("assembly", {})
    derived = take_down_xcm(
        parent.table(IMAGES.config),
        parent.table("benchmark"),
        parent.table("benchmark_cd"),
        unassembled,
        request,
        seed=parent.manifest.seeds.get("assembly") or 0,
        max_reuse=config.get("max_candidate_reuse"),
        released_sha256=images.released_sha256,
        pack=parent.pack(),
    )
    rows: dict[str, object] = {task: change.counts() for task, change in derived.changes.items()}
    rows["repaired"] = {task: change.repaired for task, change in derived.changes.items()}
    rows["summary"] = _summary(derived.changes)
    return DerivedPatch(
        tables={
            IMAGES.config: derived.images,
            "benchmark": derived.benchmark,
            "benchmark_cd": derived.benchmark_cd,
            "unassembled": derived.unassembled,
        },
        removed=[image.as_dict() for image in derived.removed],
        rows=rows,
        images_before=len(derived.index_map),
        images_after=derived.images.num_rows,
        problems=None if derived.validation.ok else derived.validation.summary(),
        detail=derived,
    )


def write_patch(
    parent: ParentRelease, images: ReleasedImages, record: TakedownRecord, derived: DerivedPatch
) -> ReleaseResult:
    """The patch `derive_patch` decided, written as the release `record` names."""
    decided: XcmTakedown = derived.detail
    return write_3xcm_patch(
        parent,
        images,
        record,
        decided.images,
        decided.benchmark,
        decided.benchmark_cd,
        decided.unassembled,
        decided.validation.summary(),
        decided.reuse,
    )


def write_3xcm_patch(
    parent: ParentRelease,
    images: ReleasedImages,
    record: TakedownRecord,
    catalog: pa.Table,
    benchmark: pa.Table,
    benchmark_cd: pa.Table,
    unassembled: pa.Table,
    validation: str,
    reuse: dict[str, dict[str, float]],
) -> ReleaseResult:
    """The patch of a 3XCM release: `catalog` is its image_metadata without bytes (renumbered), whose images keep
    the parent's released bytes."""
    # The rows kept from the parent were chosen least-used over the parent's pool: the balance replay cannot hold.
    checked = {"summary": validation, "balance_replayed": False}
    provenance = patch_provenance(parent, record, reuse=reuse, validation=checked)
    return write_3xcm_release(
        parent.release_config(record.version),
        None,  # type: ignore[arg-type]  # no blob store: the bytes are the parent's
        catalog,
        benchmark,
        benchmark_cd,
        unassembled,
        provenance.model_dump(exclude_unset=True),  # as stated (python values: the same JSON bytes)
        parent.pack(),
        load_image=lambda meta: images.get(meta["image_id"]),  # type: ignore[arg-type,return-value]  # None: not embedded
        changelog=render_changelog(provenance.takedowns or []),
    )


def _summary(changes: dict[str, TaskChange]) -> str:
    parts = []
    for task, change in changes.items():
        repaired = f" ({', '.join(code_span(q) for q in change.repaired)})" if change.repaired else ""
        parts.append(
            f"{TASKS[task]}: {change.kept} kept as they were, {len(change.repaired)} given a new candidate for the "
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
