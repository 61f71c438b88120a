"""Reassembly: a violation-free RQ2 benchmark (and RQ3 sextets) over the image pool of an existing one.

The pool is every image an existing benchmark names (the authors' `xcm-bench.csv`, or a release of ours), with its
image id and `*_index` kept, so the result runs unchanged against the authors' published `image_metadata` and
evaluator, and no image of ours is involved. The queries are the original ones. An original row whose candidates
already obey the rules (and whose candidates stay within the reuse cap, taken in file order) is kept as it is; the
others get new candidates from the balanced assembler, which counts the kept rows' candidates as used.

Without an image table (the authors' file) the only tags are the images' own concepts, so a distractor can be kept
out of the query concept only by its label, not by what it shows. A release of ours brings its `image_metadata`,
whose tags and hashes count.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from curation.assemble import AssemblyConfig, QueryTexts, assemble_catalog
from curation.rule_audit import Audit, AuditInputError, audit_benchmark, load_input, pack_of
from curation.rules import RQ2_RULES, Catalog, in_pool, pack_catalog
from curation.validate import ValidationReport, validate_benchmark
from data.provenance import code_version
from data.publish.format import MANIFEST, ReleaseReadError
from data.publish.reader import read_parts_as
from data.reference import ReferencePack
from data.schemas import CATALOG, RQ2_SLOTS
from data.takedown.older_versions import refuse_taken_down

# `nav-<code>`: a query in a country's second (third, ...) language (collectors/search_types.py `query_tag`).
IMAGE_ID = r"^(?P<country>[^-]+)-(?P<concept_id>\d+)-(?P<rank>\d+)-(?P<lang>eng|nav)(?:-(?P<code>[a-z]{2,3}))?$"
# The pool catalog: CATALOG's columns, but the authors' images have no bytes here, so no sha256.
POOL = pa.schema([f.with_nullable(True) if f.name == "sha256" else f for f in CATALOG])
SLOT_PREFIXES = (("query", "query_"), *RQ2_SLOTS)


@dataclass
class Pool:
    table: pa.Table  # POOL rows in the order of the original indexes; row i is index_in_dataset i
    original_index: npt.NDArray[np.int64]  # the pool row's `*_index` in the input
    tagged: bool  # tags (and hashes) came from an image table, not from the concept labels alone


@dataclass
class Reassembly:
    source: str
    source_sha256: str
    pool: Pool
    benchmark: pa.Table  # RQ2, the input's query order, original indexes
    benchmark_cd: pa.Table  # RQ3, original indexes
    kept: int
    replaced: dict[str, int]  # why an original row was given new candidates -> rows
    unassembled: pa.Table  # queries that could not be filled (original indexes)
    validation: ValidationReport
    audit_before: Audit
    audit_after: Audit
    max_reuse: int
    seed: int
    pack: ReferencePack  # the pool's reference pack (its countries, languages and translations)

    def manifest(self) -> dict[str, Any]:
        """What the reassembled folder's manifest and card state (no machine path: the input by name and hash)."""
        return {
            "input": {"file": Path(self.source).name, "sha256": self.source_sha256},
            "pool": {"images": self.pool.table.num_rows, "tags": "image_metadata" if self.pool.tagged else "labels"},
            "seed": self.seed,
            "max_reuse": self.max_reuse,
            "rows": self.benchmark.num_rows,
            "kept": self.kept,
            "replaced": self.replaced,
            "sextets": self.benchmark_cd.num_rows,
            "validation": {"summary": self.validation.summary()},
            "audit_before": self.audit_before.report.counts(),
            "audit_after": self.audit_after.report.counts(),
            "reuse_before": self.audit_before.report.reuse.maximum,
            "reuse_after": self.audit_after.report.reuse.maximum,
            "code_version": code_version(),
            "reference_data_sha256": self.pack.digest,
            "reference": self.pack.record(),
        }


def input_sha256(path: Path) -> str:
    """sha256 of a file, or of a release folder's files (names and bytes, in order)."""
    digest = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        if path.is_dir():
            digest.update(str(file.relative_to(path)).encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()


def pool_from(benchmark: pa.Table, metadata: pa.Table | None, pack: ReferencePack) -> Pool:
    """Every image the benchmark names, as a catalog ordered by its original index."""
    if metadata is not None and set(CATALOG.names) <= set(metadata.column_names):
        table = metadata.select(CATALOG.names).sort_by("index_in_dataset")
        original = table["index_in_dataset"].to_numpy().astype(np.int64)
        positions = pa.array(np.arange(table.num_rows), pa.int32())
        table = table.set_column(0, CATALOG.field("index_in_dataset"), positions)
        return Pool(table.cast(POOL), original, tagged=True)
    images: dict[str, tuple[int, str, str]] = {}  # image id -> (index, concept name, country), first seen
    ids_at: dict[int, str] = {}  # index -> image id
    for _, prefix in SLOT_PREFIXES:
        ids = benchmark[f"{prefix}image_id" if prefix != "query_" else "query_image_id"].to_pylist()
        columns = (benchmark[f"{prefix}index"].to_pylist(), benchmark[f"{prefix}concept"].to_pylist(),
                   benchmark[f"{prefix}country"].to_pylist())  # fmt: skip
        for row, (image_id, index, concept, country) in enumerate(zip(ids, *columns, strict=True)):
            first = images.setdefault(image_id, (int(index), concept, country))
            named = ids_at.setdefault(int(index), image_id)
            # The pool is the images the file names, each at one index: an image under two indexes (or an index
            # naming two images) leaves no pool to rebuild from (`audit` lists every such row).
            if first[0] != index or named != image_id:
                clash = f"image {image_id!r} at index {first[0]}" if first[0] != index else f"image {named!r}"
                raise AuditInputError(
                    f"{prefix}index {index} in data row {row} names {image_id!r}, but {clash} elsewhere in the file: "
                    "one image id per index is needed to rebuild its pool; `culturebench audit` lists every such row"
                )
    ordered = sorted(images.items(), key=lambda item: item[1][0])
    ids = pa.array([image_id for image_id, _ in ordered], pa.string())
    parts = pc.extract_regex(ids, IMAGE_ID)
    if parts.null_count:
        bad = [ordered[i][0] for i in np.flatnonzero(pc.is_null(parts).to_numpy(zero_copy_only=False))[:5]]
        raise AuditInputError(f"image ids outside the 3XCM scheme, e.g. {bad}")
    concept_ids = pc.cast(pc.struct_field(parts, "concept_id"), pa.int32()).to_pylist()
    countries = [country for _, (_, _, country) in ordered]
    by_name = pack.country_by_name()
    unknown = sorted(set(countries) - set(by_name))
    if unknown:
        raise AuditInputError(f"countries outside the reference pack {pack.info.name}: {unknown}")
    concepts = [concept for _, (_, concept, _) in ordered]
    tagged = pc.struct_field(parts, "code").to_pylist()
    codes = [code or by_name[country].language_code for code, country in zip(tagged, countries, strict=True)]
    native = [_native(pack, c, code, name) for c, code, name in zip(concept_ids, codes, concepts, strict=True)]
    n = len(ordered)
    table = pa.table(
        {
            "index_in_dataset": pa.array(np.arange(n), pa.int32()),
            "image_id": ids,
            "concept_id": pa.array(concept_ids, pa.int32()),
            "concept": concepts,
            "concept_in_native": native,
            "concept_country": [f"{c} {x}" for c, x in zip(concepts, countries, strict=True)],
            "country": countries,
            "language_code": codes,
            "language_group": ["+".join(sorted(by_name[x].language_groups)) for x in countries],
            "title": pa.nulls(n, pa.string()),
            "query": [f"{c} {x}" for c, x in zip(concepts, countries, strict=True)],
            "query_lang": pc.struct_field(parts, "lang"),
            "rank": pc.cast(pc.struct_field(parts, "rank"), pa.int32()),
            "url": [""] * n,
            "source_page": pa.nulls(n, pa.string()),
            "sha256": pa.nulls(n, pa.string()),
            "pixel_sha256": pa.nulls(n, pa.string()),
            "num_bytes": pa.array(np.zeros(n, np.int64)),
            "width": pa.array(np.zeros(n, np.int32)),
            "height": pa.array(np.zeros(n, np.int32)),
            "format": [""] * n,
            "tags": pa.array([[c] for c in concept_ids], pa.list_(pa.int32())),  # the concept label is all we know
            "tagger": ["label"] * n,
        },
        schema=POOL,
    )
    return Pool(table, np.array([index for _, (index, _, _) in ordered], dtype=np.int64), tagged=False)


def _catalog_of(path: Path, metadata: Path | None) -> pa.Table | None:
    """Our image table, with its tags and hashes, when the pool is a release of ours (or one is given)."""
    folder = metadata or (path / "image_metadata" if path.is_dir() else None)
    if folder is None or not folder.is_dir():
        return None
    try:
        return read_parts_as(folder, CATALOG, missing_as_null=["pixel_sha256"])  # a release before pixel hashes
    except ReleaseReadError as exc:
        raise AuditInputError(str(exc)) from None


def _native(pack: ReferencePack, concept_id: int, language: str, name: str) -> str:
    entry = pack.language_pack(language).concepts.get(concept_id)
    return entry.text if entry is not None else name


def kept_rows(
    catalog: Catalog, rows: npt.NDArray[np.int64], max_reuse: int, queries: npt.NDArray[np.int64] | None = None
) -> tuple[npt.NDArray[np.bool_], dict[str, int]]:
    """Which original rows (catalog positions: query, then the three candidates) can stay: every candidate obeys
    its slot's rule, the four images differ, and, in file order, no candidate goes past `max_reuse` uses.
    `queries`: each row's query id (its language; default: each query country's one)."""
    q = rows[:, 0]
    concept, country = catalog.concept[q], catalog.country[q]
    x_group = None if queries is None else np.array([catalog.query_language(int(i))[1] for i in queries], np.int64)
    reasons = np.full(len(rows), "", dtype=object)
    for s, slot in enumerate(RQ2_RULES, start=1):
        broken = ~in_pool(catalog, slot, rows[:, s], concept, country, x_group=x_group) & (reasons == "")
        reasons[broken] = f"rq2.{slot.name}"
    repeated = np.zeros(len(rows), dtype=bool)
    for a in range(4):
        for b in range(a + 1, 4):
            repeated |= rows[:, a] == rows[:, b]
    reasons[repeated & (reasons == "")] = "rq2.distinct_candidates"
    usage = np.zeros(len(catalog), dtype=np.int64)
    for r in np.flatnonzero(reasons == "").tolist():
        candidates = rows[r, 1:]
        if (usage[candidates] >= max_reuse).any():
            reasons[r] = "max_reuse"
            continue
        usage[candidates] += 1
    keep = reasons == ""
    names, counts = np.unique(reasons[~keep].astype(str), return_counts=True)
    return keep, {str(name): int(count) for name, count in zip(names, counts, strict=True)}


def reassemble(path: Path, seed: int = 0, max_reuse: int = 5, metadata: Path | None = None) -> Reassembly:
    """Reassemble the benchmark at `path` (the authors' CSV, a Parquet file or a release folder) over its own pool."""
    inputs = load_input(path, metadata)
    for folder in (path if path.is_dir() else path.parent.parent, metadata.parent if metadata else None):
        if folder is not None and (folder / MANIFEST).is_file():  # a release: its images taken down since stay out
            refuse_taken_down(folder, "3xcm", "reassemble")
    benchmark = inputs.benchmark
    pack = pack_of(path, metadata)
    before = audit_benchmark(benchmark, inputs.metadata, max_reuse, inputs.source, inputs.metadata_source, pack=pack)
    try:
        pool = pool_from(benchmark, _catalog_of(path, metadata), pack)
    except AuditInputError as exc:
        message = str(exc)
        raise AuditInputError(message if message.startswith(inputs.source) else f"{inputs.source}: {message}") from None
    catalog = pack_catalog(pool.table, pack)
    position = {int(index): row for row, index in enumerate(pool.original_index.tolist())}
    rows = np.array(
        [[position[int(i)] for i in benchmark[f"{prefix}index"].to_pylist()] for _, prefix in SLOT_PREFIXES],
        dtype=np.int64,
    ).T
    queries = _query_ids(catalog, rows[:, 0], benchmark)
    keep_mask, replaced = kept_rows(catalog, rows, max_reuse, queries)
    keep = {int(queries[r]): tuple(int(i) for i in rows[r, 1:]) for r in np.flatnonzero(keep_mask)}
    queries_of = np.unique(queries)  # one query per image and language, in index order (the order of the choices)
    translations = _translations(catalog, pack)
    texts = QueryTexts(translations, pack)
    while True:
        assembly = assemble_catalog(AssemblyConfig(seed=seed), catalog, texts, keep, queries_of)
        # Kept rows can use up a small pool before a later query needs it: give the rows that hold an image past
        # the cap new candidates too, until none does (or none is left to give back).
        usage = np.bincount(
            np.concatenate([assembly.benchmark[f"{p}index"].to_numpy() for _, p in RQ2_SLOTS]), minlength=len(catalog)
        )
        over = [q for q, candidates in keep.items() if (usage[list(candidates)] > max_reuse).any()]
        if not over:
            break
        for q in over:
            del keep[q]
        replaced["max_reuse"] = replaced.get("max_reuse", 0) + len(over)
    validation = validate_benchmark(
        pool.table, assembly.benchmark, assembly.benchmark_cd, translations,
        max_reuse={"rq2": max_reuse, "rq3": None}, balance=False, id_scheme=False, pack=pack,
    )  # fmt: skip
    order = {int(q): r for r, q in enumerate(queries.tolist())}
    assembled = _query_ids(catalog, assembly.benchmark["query_index"].to_numpy(), assembly.benchmark)
    rq2 = assembly.benchmark.take(np.argsort([order[q] for q in assembled.tolist()], kind="stable"))
    rq2, rq3 = _original_indexes(rq2, pool), _original_indexes(assembly.benchmark_cd, pool)
    after = audit_benchmark(rq2, None, max_reuse, "reassembled", pack=pack)
    return Reassembly(
        source=inputs.source,
        source_sha256=input_sha256(path),
        pool=pool,
        benchmark=rq2,
        benchmark_cd=rq3,
        kept=len(keep),
        replaced=replaced,
        unassembled=_original_indexes(assembly.unassembled, pool),
        validation=validation,
        audit_before=before,
        audit_after=after,
        max_reuse=max_reuse,
        seed=seed,
        pack=pack,
    )


def _query_ids(catalog: Catalog, rows: npt.NDArray[np.integer], benchmark: pa.Table) -> npt.NDArray[np.int64]:
    """Each benchmark row's query id: its query image in its `query_language` (the authors' CSV has none: each
    query is in its country's one language)."""
    if "query_language" not in benchmark.column_names or catalog.languages_per_query == 1:
        return np.asarray(rows, dtype=np.int64) * catalog.languages_per_query
    languages = benchmark["query_language"].to_pylist()
    return np.array([catalog.query_id(int(r), code) for r, code in zip(rows, languages, strict=True)], np.int64)


def _translations(catalog: Catalog, pack: ReferencePack) -> pa.Table:
    """The pack's translations of the pool's concepts, in the pool's languages."""
    from collectors.concepts import ShippedConceptsConfig, run_concepts
    from collectors.translations import ShippedTranslationsConfig, run_translations

    wanted = sorted({int(c) for c in catalog.concept.tolist()})
    concepts = run_concepts(ShippedConceptsConfig(include=[str(c) for c in wanted]), pack)
    languages = sorted({code for spoken in catalog.country_queries for code, _ in spoken})
    return run_translations(ShippedTranslationsConfig(), pack, concepts, languages).translations


def _original_indexes(table: pa.Table, pool: Pool) -> pa.Table:
    """Every `*_index` column mapped from pool positions back to the input's indexes."""
    for name in table.column_names:
        if name.endswith("_index"):
            at = table.schema.get_field_index(name)
            values = pool.original_index[table[name].to_numpy()]
            table = table.set_column(at, table.schema.field(name), pa.array(values, table.schema.field(name).type))
    return table
