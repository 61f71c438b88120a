"""Takedown: which images leave a release, and which benchmark rows that changes (`culturebench takedown`).

Decided over the release's own tables; the benchmark's `write_patch` (`flows/<benchmark>/patch.py`) writes the patch.
A request names images by id, sha256 or URL, and carries the ids of the release's images that the root's denylist
names (`denylisted`, why "on the denylist"): a patch applies every takedown of its root, whichever version it is made
from, so no image taken down from one version comes back in another.

3XCM
- The requested images (by image id, sha256 or URL) leave, with every byte-identical (sha256) or pixel-identical
  (pixel hash) copy of them: the same picture filed under another concept is the same picture.
- `index_in_dataset` and every `*_index` are row positions in `image_metadata`, so the images after a removed one
  move up: each untouched row keeps all its other columns byte for byte and its indexes follow their images.
- A triplet or sextet whose query image left is dropped; the query's image gets a `taken_down` row in `unassembled`
  (`query_index` -1: it has no row any more), as does every other image that left.
- A row that kept its query but lost a candidate gets that candidate, and only that one, chosen again by the
  balanced assembler (`curation/assemble.py`, the same rules and seed): the least-used eligible image, counting
  every kept candidate as used, the removed images out of the pool. An RQ3 row keeps its descriptor country. A row
  whose open slot has no eligible image left moves to `unassembled` with the slot (`no_<slot>_candidate`).
- The result is validated like a release, without the balance replay: the rows kept from the parent were chosen
  least-used over the parent's pool, which the patch no longer has.

MixCuBe
- Rows come in quintets (an original, then its 4 swaps). Removing any row of a quintet removes the whole quintet:
  a swap without its original, or an original short of a swap, is not a MixCuBe item. Every other row stays as it
  was.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from curation.assemble import (
    RQ2_PREFIXES,
    RQ3_PREFIXES,
    assemble_rq2,
    assemble_rq3,
    benchmark_cd_table,
    benchmark_table,
    reuse_summary,
    with_language,
)
from curation.rules import RQ2_RULES, RQ3_RULES, Catalog, PoolCounts, pack_catalog
from curation.validate import TAKEN_DOWN_INDEX, ValidationReport, validate_benchmark
from data.reference import ReferencePack
from data.schemas import BENCHMARK, BENCHMARK_CD, CATALOG, UNASSEMBLED
from data.takedown.denylist import TAKEN_DOWN
from data.takedown.patch import RemovedRecord

REQUESTED = "requested"
#: Why an image the request did not name leaves: the release root's denylist names it (an earlier takedown's).
DENYLISTED = "on the denylist"


class TakedownInputError(ValueError):
    """A request naming something the release does not hold: the message names each."""


@dataclass(frozen=True)
class TakedownRequest:
    image_ids: tuple[str, ...] = ()
    sha256s: tuple[str, ...] = ()
    urls: tuple[str, ...] = ()
    #: Image ids of the release the root's denylist names, taken down with the request: a patch applies every
    #: takedown of its root, so an image taken down from another version never comes back
    #: (`flows/operations/takedown.py`).
    denylisted: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not (self.image_ids or self.sha256s or self.urls):
            raise TakedownInputError("name at least one image: --image-id, --sha256 or --url")


@dataclass(frozen=True)
class RemovedImage:
    image_id: str
    index: int  # its row in the parent release
    sha256: str | None
    pixel_sha256: str | None
    url: str | None
    final_url: str | None
    why: str  # requested | byte copy of <id> | pixel copy of <id> | quintet of <id>

    def as_dict(self) -> RemovedRecord:
        return {
            "image_id": self.image_id,
            "index": self.index,
            "sha256": self.sha256,
            "pixel_sha256": self.pixel_sha256,
            "url": self.url,
            "final_url": self.final_url,
            "why": self.why,
        }


def _column(table: pa.Table, name: str) -> list[Any]:
    return table[name].to_pylist() if name in table.column_names else [None] * table.num_rows


def requested_rows(
    table: pa.Table,
    request: TakedownRequest,
    id_column: str,
    released_sha256: Callable[[], dict[str, str]] | None = None,
) -> list[int]:
    """The rows a request names, in table order. Every id, sha256 and URL must name at least one row; a sha256 is
    the original bytes' (`sha256`) or, failing that, the released file's (`released_sha256`: id -> sha256, asked
    for only then). Raises `TakedownInputError` naming whatever names nothing."""
    ids = _column(table, id_column)
    rows: set[int] = set()
    unknown: list[str] = []
    by_id: dict[str, list[int]] = {}
    for row, value in enumerate(ids):
        by_id.setdefault(value, []).append(row)
    for image_id in request.image_ids:
        found = by_id.get(image_id)
        rows.update(found or ())
        unknown += [] if found else [f"image id {image_id!r}"]
    hashes = _column(table, "sha256")
    released: dict[str, str] | None = None
    for sha in request.sha256s:
        found = [r for r, value in enumerate(hashes) if value == sha.lower()]
        if not found and released_sha256 is not None:
            released = released if released is not None else released_sha256()
            found = [r for r, value in enumerate(ids) if released.get(value) == sha.lower()]
        rows.update(found)
        unknown += [] if found else [f"sha256 {sha!r}"]
    urls, finals = _column(table, "url"), _column(table, "final_url")
    for url in request.urls:
        found = [r for r, (a, b) in enumerate(zip(urls, finals, strict=True)) if url in (a, b)]
        rows.update(found)
        unknown += [] if found else [f"URL {url!r}"]
    if unknown:
        raise TakedownInputError(f"not in this release: {', '.join(unknown)}")
    return sorted(rows)


def named_rows(
    table: pa.Table,
    request: TakedownRequest,
    id_column: str,
    released_sha256: Callable[[], dict[str, str]] | None = None,
) -> dict[int, str]:
    """The rows the request names (`requested_rows`) and those its `denylisted` ids name: row -> why it goes. A
    denylisted id the table lacks is refused like any other name."""
    why = {r: REQUESTED for r in requested_rows(table, request, id_column, released_sha256)}
    if request.denylisted:
        wanted = set(request.denylisted)
        ids = _column(table, id_column)
        missing = wanted - set(ids)
        if missing:
            names = ", ".join(f"denylisted image id {i!r}" for i in sorted(missing))
            raise TakedownInputError(f"not in this release: {names}")
        for row, value in enumerate(ids):
            if value in wanted:
                why.setdefault(row, DENYLISTED)
    return dict(sorted(why.items()))


def _removed(table: pa.Table, why: dict[int, str], id_column: str) -> list[RemovedImage]:
    """The rows `why` names (row -> why it goes), in table order."""
    ids, sha, pixel = _column(table, id_column), _column(table, "sha256"), _column(table, "pixel_sha256")
    url, final = _column(table, "url"), _column(table, "final_url")
    return [RemovedImage(ids[r], r, sha[r], pixel[r], url[r], final[r], why[r]) for r in sorted(why)]


# -- 3XCM ------------------------------------------------------------------------------------------------------------


def with_copies(images: pa.Table, named: Sequence[int] | Mapping[int, str]) -> dict[int, str]:
    """The named rows (a sequence: requested; a mapping: row -> why) and every byte or pixel copy of them
    (transitively): row -> why it goes."""
    sha, pixel, ids = _column(images, "sha256"), _column(images, "pixel_sha256"), _column(images, "image_id")
    why = dict(named) if isinstance(named, Mapping) else {r: REQUESTED for r in named}
    frontier = list(why)
    while frontier:
        r = frontier.pop()
        for other in range(images.num_rows):
            if other in why:
                continue
            if sha[r] and sha[other] == sha[r]:
                why[other] = f"byte copy of {ids[r]}"
            elif pixel[r] and pixel[other] == pixel[r]:
                why[other] = f"pixel copy of {ids[r]}"
            else:
                continue
            frontier.append(other)
    return why


class ReleasedTexts:
    """The query texts a release already holds, by what decides them: a kept query keeps its text (the build's
    translations are not part of a release)."""

    def __init__(self, benchmark: pa.Table, benchmark_cd: pa.Table) -> None:
        columns = ["query_concept_id", "query_country", "query_language", "query_text"]
        self._rq2 = {(r[0], r[1], r[2]): (r[2], r[3]) for r in _rows(benchmark, columns)}
        self._rq3 = {
            (r[0], r[1], r[4], r[2]): (r[2], r[3]) for r in _rows(benchmark_cd, [*columns, "descriptor_country"])
        }

    def rq2(self, concept_id: int, country: str, language: str) -> tuple[str, str]:
        return self._rq2[(concept_id, country, language)]

    def rq3(self, concept_id: int, country: str, descriptor_country: str, language: str) -> tuple[str, str]:
        return self._rq3[(concept_id, country, descriptor_country, language)]


def _rows(table: pa.Table, columns: list[str]) -> list[tuple[Any, ...]]:
    return list(zip(*(table[c].to_pylist() for c in columns), strict=True)) if table.num_rows else []


def catalog_view(images: pa.Table) -> pa.Table:
    """The CATALOG columns of an image table, as the validator reads them (a null pixel hash where none was kept)."""
    if "pixel_sha256" not in images.column_names:
        images = images.append_column("pixel_sha256", pa.nulls(images.num_rows, pa.string()))
    return images.select(CATALOG.names)


@dataclass
class TaskChange:
    kept: int = 0  # rows as they were (indexes renumbered)
    repaired: list[str] = field(default_factory=list)  # query image ids given a new candidate
    dropped: list[str] = field(default_factory=list)  # query image ids taken down
    unassembled: list[str] = field(default_factory=list)  # query image ids whose open slot had no candidate left

    def counts(self) -> dict[str, int]:
        return {
            "kept": self.kept,
            "repaired": len(self.repaired),
            "dropped": len(self.dropped),
            "unassembled": len(self.unassembled),
        }


@dataclass
class XcmTakedown:
    images: pa.Table  # image_metadata without the removed images (every column, no bytes), renumbered
    benchmark: pa.Table
    benchmark_cd: pa.Table
    unassembled: pa.Table
    removed: list[RemovedImage]
    changes: dict[str, TaskChange]  # rq2 | rq3
    validation: ValidationReport
    reuse: dict[str, dict[str, float]]
    index_map: npt.NDArray[np.int64]  # parent row -> patch row (-1: removed)


def take_down_xcm(
    images: pa.Table,
    benchmark: pa.Table,
    benchmark_cd: pa.Table,
    unassembled: pa.Table,
    request: TakedownRequest,
    seed: int,
    max_reuse: int | None = None,
    released_sha256: Callable[[], dict[str, str]] | None = None,
    *,
    pack: ReferencePack,
) -> XcmTakedown:
    """Remove what `request` names from a 3XCM release's tables (`images`: its image_metadata without bytes);
    `pack`: the reference pack the release was built from (its country order)."""
    why = with_copies(images, named_rows(images, request, "image_id", released_sha256))
    gone = np.zeros(images.num_rows, dtype=bool)
    gone[list(why)] = True
    index_map = np.full(images.num_rows, -1, dtype=np.int64)
    index_map[~gone] = np.arange(int((~gone).sum()))
    kept = images.filter(pa.array(~gone))
    at = kept.schema.get_field_index("index_in_dataset")
    kept = kept.set_column(at, kept.schema.field(at), pa.array(range(kept.num_rows), kept.schema.field(at).type))
    catalog = pack_catalog(kept, pack)
    removed = _removed(images, why, "image_id")

    changes = {"rq2": TaskChange(), "rq3": TaskChange()}
    repair = _Repair(catalog, PoolCounts(catalog), ReleasedTexts(benchmark, benchmark_cd), seed, gone, index_map)
    rq2, missing2 = repair.task("rq2", benchmark, changes["rq2"])
    rq3, missing3 = repair.task("rq3", benchmark_cd, changes["rq3"])
    tasks = ["rq2"] + (["rq3"] if benchmark_cd.num_rows or "rq3" in set(_column(unassembled, "task")) else [])
    new_unassembled = _unassembled(unassembled, tasks, {"rq2": missing2, "rq3": missing3}, removed, index_map, catalog)
    usage2 = _usage(rq2, RQ2_PREFIXES.values(), len(catalog))
    usage3 = _usage(rq3, RQ3_PREFIXES.values(), len(catalog))
    validation = validate_benchmark(
        catalog_view(kept),
        rq2,
        rq3,
        max_reuse={"rq2": max_reuse, "rq3": max_reuse},
        unassembled=new_unassembled,
        balance=False,
        pack=pack,
    )
    return XcmTakedown(
        images=kept,
        benchmark=rq2,
        benchmark_cd=rq3,
        unassembled=new_unassembled,
        removed=removed,
        changes=changes,
        validation=validation,
        reuse={"rq2": reuse_summary(usage2), "rq3": reuse_summary(usage3)},
        index_map=index_map,
    )


def _usage(table: pa.Table, prefixes: Iterable[str], n: int) -> npt.NDArray[np.integer]:
    columns = [table[f"{p}index"].to_numpy() for p in prefixes]
    return np.bincount(np.concatenate(columns).astype(np.int64), minlength=n) if columns else np.zeros(n, np.int64)


def _remapped(row: dict[str, Any], index_map: npt.NDArray[np.int64]) -> dict[str, Any]:
    return {k: int(index_map[v]) if k.endswith("_index") else v for k, v in row.items()}


@dataclass
class _Repair:
    """Rows of a task after the removal, through the assembler over the patch's catalog."""

    catalog: Catalog
    counts: PoolCounts
    texts: ReleasedTexts
    seed: int
    gone: npt.NDArray[np.bool_]  # parent row -> removed
    index_map: npt.NDArray[np.int64]  # parent row -> patch row

    def task(self, task: str, table: pa.Table, change: TaskChange) -> tuple[pa.Table, list[tuple[int, str]]]:
        """Untouched rows as they were (indexes renumbered), rows whose query left dropped, rows that lost a
        candidate given a new one for it; and (patch row, reason) for the rows that could not be."""
        rq3 = task == "rq3"
        rules, prefixes = (RQ3_RULES, RQ3_PREFIXES) if rq3 else (RQ2_RULES, RQ2_PREFIXES)
        positions = {name: i for i, name in enumerate(self.catalog.country_names)}
        parents = table.to_pylist()
        keep: dict[int, Any] = {}  # patch query id -> its candidates, None where one left (RQ3: with Y)
        parent_of: dict[int, int] = {}
        missing: list[tuple[int, str]] = []
        for r, row in enumerate(parents):
            if self.gone[row["query_index"]]:
                change.dropped.append(row["query_image_id"])
                continue
            q = self.catalog.query_id(int(self.index_map[row["query_index"]]), row["query_language"])
            old = [row[f"{prefixes[slot.name]}index"] for slot in rules]
            held = tuple(None if self.gone[i] else int(self.index_map[i]) for i in old)
            y = positions.get(row["descriptor_country"]) if rq3 else None
            if rq3 and y is None:  # every image of the descriptor country left: its cell slots cannot be filled
                open_slot = next(slot.name for slot, image in zip(rules, held, strict=True) if image is None)
                missing.append((q, f"no_{open_slot}_candidate"))
                change.unassembled.append(row["query_image_id"])
                continue
            keep[q] = (y, held) if rq3 else held
            parent_of[q] = r
        queries = np.array(list(keep), dtype=np.int64)  # the parent's order
        if rq3:
            result = assemble_rq3(self.catalog, self.counts, self.seed, queries, keep)
            chosen = benchmark_cd_table(self.catalog, self.texts, result).to_pylist()
        else:
            result = assemble_rq2(self.catalog, self.counts, self.seed, keep, queries)
            chosen = benchmark_table(self.catalog, self.texts, result).to_pylist()
        rows = []
        for q, row in zip(result.queries.tolist(), chosen, strict=True):
            if None in (keep[q][1] if rq3 else keep[q]):
                change.repaired.append(row["query_image_id"])
                rows.append(row)
            else:  # the parent's row itself, not a copy made again: byte for byte what was published
                change.kept += 1
                rows.append(_remapped(parents[parent_of[q]], self.index_map))
        for q, reason in result.missing:
            missing.append((q, reason))
            change.unassembled.append(str(self.catalog.image_id[self.catalog.query_row(q)]))
        return pa.Table.from_pylist(rows, schema=BENCHMARK_CD if rq3 else BENCHMARK), sorted(missing)


def _unassembled(
    parent: pa.Table,
    tasks: list[str],
    missing: dict[str, list[tuple[int, str]]],
    removed: list[RemovedImage],
    index_map: npt.NDArray[np.int64],
    catalog: Catalog,
) -> pa.Table:
    """Per task: the parent's rows (those of images that stayed; earlier takedowns' as they were), the rows that
    could not be repaired, then one `taken_down` row per removed image."""
    rows = []
    for task in tasks:
        for row in parent.filter(pc.equal(parent["task"], task)).to_pylist():
            if row["reason"] == TAKEN_DOWN:
                rows.append(row)
            elif index_map[row["query_index"]] >= 0:
                rows.append(_remapped(row, index_map))
        rows += [
            {
                "task": task,
                "query_index": catalog.query_row(q),
                "query_image_id": str(catalog.image_id[catalog.query_row(q)]),
                "reason": with_language(catalog, q, reason),
            }
            for q, reason in missing[task]
        ]
        rows += [
            {"task": task, "query_index": TAKEN_DOWN_INDEX, "query_image_id": image.image_id, "reason": TAKEN_DOWN}
            for image in removed
        ]
    return pa.Table.from_pylist(rows, schema=UNASSEMBLED)


# -- MixCuBe ---------------------------------------------------------------------------------------------------------


@dataclass
class MixcubeTakedown:
    rows: pa.Table  # the release rows without the removed quintets (every column, no bytes)
    removed: list[RemovedImage]  # every row of every removed quintet
    quintets: dict[str, list[str]]  # original id -> the sample ids the request named in its quintet


def take_down_mixcube(
    rows: pa.Table, request: TakedownRequest, released_sha256: Callable[[], dict[str, str]] | None = None
) -> MixcubeTakedown:
    """Remove the quintets of whatever `request` names (an original or a swap) from MixCuBe release rows."""
    named = named_rows(rows, request, "sample_id", released_sha256)
    samples, originals = rows["sample_id"].to_pylist(), rows["original_id"].to_pylist()
    quintets: dict[str, list[str]] = {}
    for r in named:
        quintets.setdefault(originals[r], []).append(samples[r])
    why = {}
    for r, original in enumerate(originals):
        if original in quintets:
            why[r] = named[r] if r in named else f"quintet of {', '.join(quintets[original])}"
    gone = np.zeros(rows.num_rows, dtype=bool)
    gone[list(why)] = True
    return MixcubeTakedown(
        rows=rows.filter(pa.array(~gone)), removed=_removed(rows, why, "sample_id"), quintets=quintets
    )
