"""The 3XCM stage graph: which tables each stage reads and writes. Stage logic lives in the stage packages;
fingerprints and skip-if-done are the shared `flows.engine.graph`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from annotation.backends import BuildReview
from annotation.review import ReviewImage, image_extension, run_review
from collectors.concepts import run_concepts
from collectors.image_pass import ImagePass
from collectors.search import SearchConfig, build_queries, search_rows
from collectors.translations import run_translations
from curation.assemble import run_assembly
from curation.catalog import build_catalog
from curation.concept_dedup import run_concept_dedup
from curation.copies import copy_groups, images_with_copies_across_concepts
from curation.dedup_stage import concept_summary, dedup_inputs, write_dedup_contact_sheet
from curation.embed_images import embed_images, embeddings_table
from curation.image_dedup import decide
from curation.image_embeddings import ImageEmbedder
from curation.tagging import TagRequest, run_tagging
from curation.validate import ValidationReport, validate_benchmark
from data import schemas
from data.progress import StepProgress, Steps
from data.reference import ReferencePack
from data.review_labels import AUTO_ACCEPT
from data.schemas import STATUS_OK
from data.stage import stats_from_table
from data.stage_stats import StageStats
from data.table_rows import TableRows
from data.workspace import StageMarker, Workspace
from demo.corpus import generate_demo_corpus
from flows.engine.graph import BuildGraph, Progress, Stage, StageOutput
from flows.engine.graph import StageContext as GraphContext
from flows.engine.placement import local_workers
from flows.engine.shards import ShardPlan
from flows.engine.slots import gpu_slot
from flows.xcm.config import Build3XCMConfig
from flows.xcm.takedown import catalog_output, catalog_settings


class BuildValidationError(RuntimeError):
    """The assembled benchmark broke a rule; the build stops before anything is released."""


StageContext = GraphContext[Build3XCMConfig]


class AssemblyStats(StageStats):
    """The assembly's counts, and how often images are candidates, per task (the manifest's `reuse`)."""

    reuse: dict[str, Any] | None = None


# -- stage adapters -----------------------------------------------------------------------------------------------


def _demo_corpus(ctx: StageContext) -> StageOutput:
    rows = []
    ctx.ws.storage.rm(ctx.ws.file_path("demo_corpus"))  # a corpus drawn by another version must not linger
    if ctx.config.demo_corpus is not None:
        truth = generate_demo_corpus(
            ctx.config.demo_corpus, ctx.ws.file_path("demo_corpus"), ctx.progress, pack=ctx.pack
        )
        rows += [{"path": p, "role": "original", "duplicate_of": None, "expected_error": None} for p in truth.originals]
        rows += [
            {
                "path": d.path,
                "role": f"duplicate:{d.kind}",
                "duplicate_of": d.duplicate_of,
                "expected_error": None,
            }
            for d in truth.duplicates
        ]
        rows += [
            {"path": d.path, "role": f"lookalike:{d.kind}", "duplicate_of": d.duplicate_of, "expected_error": None}
            for d in truth.lookalikes
        ]
        rows += [
            {"path": p, "role": "bad_file", "duplicate_of": None, "expected_error": e}
            for p, e in truth.bad_files.items()
        ]
    return StageOutput(schemas.from_rows(rows, schemas.DEMO_CORPUS))


def concepts_settings(config: Build3XCMConfig) -> Any:
    """An operator's edits to the concept review file change what the build covers, so they rerun the stage."""
    return config.concepts.fingerprint_settings()


def _concepts(ctx: StageContext) -> StageOutput:
    return StageOutput(run_concepts(ctx.config.concepts, ctx.pack))


def _concept_dedup(ctx: StageContext) -> StageOutput:
    with gpu_slot(ctx.config.gpu_concurrency_limit if ctx.config.concept_dedup.holds_gpu_slot else None):
        table = run_concept_dedup(ctx.config.concept_dedup, ctx.table("concepts"))
    return StageOutput(table)


def kept_concepts(ctx: StageContext) -> pa.Table:
    decisions = ctx.table("concept_dedup")
    kept = set(decisions.filter(decisions["keep"])["concept_id"].to_pylist())
    concepts = ctx.table("concepts")
    return concepts.filter(pa.array([cid in kept for cid in concepts["concept_id"].to_pylist()]))


def model_cache(ctx: StageContext) -> str:
    """Model answers are cached per build by prompt hash, so a rerun never asks the API twice."""
    return ctx.ws.storage.fs.unstrip_protocol(ctx.ws.file_path("model_cache"))


def _translations(ctx: StageContext) -> StageOutput:
    out = run_translations(
        ctx.config.translations, ctx.pack, kept_concepts(ctx), ctx.config.language_codes, cache_dir=model_cache(ctx)
    )
    stats = stats_from_table(
        ctx.stage, out.translations, llm_failures=out.failures.num_rows, conflicts=out.conflicts.num_rows
    )
    return StageOutput(out.translations, {"conflicts": out.conflicts, "llm_failures": out.failures}, stats)


def search_config(config: Build3XCMConfig, ws: Workspace) -> SearchConfig:
    """The demo searches the corpus it generated, unless a folder is given explicitly."""
    if not config.demo_corpus:
        return config.search
    return config.search.with_default_root(ws.storage.fs.unstrip_protocol(ws.file_path("demo_corpus")))


def _search(ctx: StageContext) -> ShardPlan:
    search = search_config(ctx.config, ctx.ws)
    searcher = search.build()
    searcher.check(ctx.pack)  # a manifest naming what the pack lacks is refused before any query
    queries = build_queries(
        kept_concepts(ctx),
        ctx.table("translations"),
        ctx.config.countries,
        search.skip_identical_native_query,
        ctx.pack,
    )
    return ShardPlan(
        queries,
        shard_size=64,
        process=lambda chunk: search_rows(searcher, chunk, search.max_results, concurrency=search.concurrency),
        summarize=lambda t: _search_stats(t, len(queries)),
        cpu_bound=search.cpu_bound,
    )


def _search_stats(table: pa.Table, queries: int) -> StageStats:
    stats = stats_from_table("search", table, rows_in=queries)
    return stats.model_copy(update={"extra": {"hits": stats.kept, "queries_failed": stats.dropped}})


def _images(ctx: StageContext) -> ShardPlan:
    settings = ctx.config.download
    fetcher = settings.build()(ctx.ws)
    return ShardPlan(
        ok_rows(ctx.table("search")),
        shard_size=settings.shard_size,
        process=ImagePass(fetcher, ctx.ws.blobs),  # the one read and reduced decode of every image
        summarize=lambda t: stats_from_table("images", t),
        cpu_bound=settings.cpu_bound,
    )


def ok_rows(table: pa.Table) -> TableRows[dict[str, Any]]:
    """The rows whose status is ok, as dicts made a shard at a time (a plan's items: the stage's process and each
    shard worker hold the Arrow table, not a dict per row)."""
    return TableRows(ok_table(table))


def ok_table(table: pa.Table) -> pa.Table:
    return table.filter(pc.equal(table["status"], STATUS_OK))


def stored_images(ctx: StageContext) -> TableRows[dict[str, Any]]:
    return ok_rows(ctx.table("images"))


def _image_embeddings(ctx: StageContext) -> StageOutput | ShardPlan:
    tier = ctx.config.image_dedup.embedding
    if tier is None:  # the tier is off: an empty table, so the graph is the same for every config
        return StageOutput(
            schemas.empty(schemas.IMAGE_EMBEDDINGS), stats=StageStats(stage=ctx.stage, extra={"tier": "off"})
        )
    embedder: list[ImageEmbedder] = []  # built at the first shard that needs it: a resumed stage may need none

    def process(chunk: Sequence[dict]) -> pa.Table:
        if not embedder:
            embedder.append(tier.embedder.build())
        loaders = [lambda sha=item["sha256"]: ctx.ws.blobs.get(sha) for item in chunk]
        with gpu_slot(ctx.config.gpu_concurrency_limit):  # builds sharing a GPU take turns, shard by shard
            vectors, errors = embed_images(embedder[0], loaders, tier.embedder.batch_size)
        return embeddings_table([item["image_id"] for item in chunk], embedder[0].model_id, vectors, errors)

    return ShardPlan(
        stored_images(ctx),
        shard_size=tier.shard_size,
        process=process,
        summarize=lambda t: stats_from_table("image_embeddings", t),
    )


def _image_dedup(ctx: StageContext) -> StageOutput:
    config = ctx.config.image_dedup
    steps = Steps(ctx.on_progress(ctx.stage), 4)
    stored = ok_table(ctx.table("images"))  # one row per stored image: its hashes and thumbnails
    inputs = dedup_inputs(
        ctx.table("search"),
        stored,
        ctx.table("image_embeddings") if config.embedding is not None else None,
        ctx.ws.blobs,
        config.workers,
        local_workers(ctx.config.task_runner, stored.num_rows),
    )
    steps.step("inputs")
    result = decide(inputs, config)
    steps.step("pairs and clusters within each concept")
    copies = copy_groups(inputs, stored["pixel_sha256"].to_pylist())
    steps.step("copies across concepts")
    summary = concept_summary(result, kept_concepts(ctx))
    sheet = write_dedup_contact_sheet(result.decisions, ctx.table("images"), ctx.ws)
    steps.finish()
    stats = stats_from_table(
        ctx.stage,
        result.decisions,
        tiers=config.tiers_label(),
        pairs_by_tier=dict(sorted(Counter(result.pairs["tier"].to_pylist()).items())),
        review_queue=result.review_queue.num_rows,
        copies_across_concepts=images_with_copies_across_concepts(copies, inputs.concept_ids),
        contact_sheet=sheet,
        summary_table="concept_summary",
    )
    side = {"pairs": result.pairs, "review_queue": result.review_queue, "concept_summary": summary, "copies": copies}
    return StageOutput(result.decisions, side, stats)


def build_review(config: Build3XCMConfig) -> BuildReview:
    """The build's human review: ambiguous near-duplicate pairs (the record's `review`, the review stage's
    fingerprint share)."""
    return BuildReview(config.review, "duplicate_review")


def _review(ctx: StageContext) -> StageOutput:
    steps = Steps(ctx.on_progress(ctx.stage), 2)
    queue = ctx.ws.read_extra_table("image_dedup", "review_queue")
    images = {
        row["image_id"]: ReviewImage(row["sha256"], image_extension(row["format"]), row["width"] * row["height"])
        for row in stored_images(ctx)
    }
    steps.step("the queue and its images")
    out = run_review(ctx.config.review, ctx.table("image_dedup"), queue, images, ctx.review_context())
    steps.finish()
    # Set only when there was a round: published as a table artifact by the flow.
    published_decisions: dict[str, Any] = {"summary_table": "decisions"} if out.round else {}
    stats = stats_from_table(
        ctx.stage,
        out.table,
        review_queue_pairs=queue.num_rows,
        review=out.round.stats() if out.round else {"reviewer": AUTO_ACCEPT},
        disagreements=out.round.agreement.disagreements[:50] if out.round else [],
        **published_decisions,
    )
    decisions = out.round.decisions if out.round else schemas.empty(schemas.REVIEW_DECISIONS)
    return StageOutput(out.table, {"decisions": decisions}, stats)


def _tags(ctx: StageContext) -> StageOutput:
    review = ctx.table("review")
    images = ctx.table("images").select(["image_id", "sha256"])
    # Columns, not a dict per image of the search and image tables (gigabytes at a million images).
    images = images.filter(pc.is_in(images["image_id"], value_set=review.filter(review["keep"])["image_id"]))
    search = ctx.table("search").select(["image_id", "concept_id"])
    found = pc.index_in(images["image_id"], value_set=search["image_id"])
    if found.null_count:
        raise KeyError(images["image_id"].filter(pc.is_null(found))[0].as_py())
    requests = [
        TagRequest(image_id=image_id, concept_id=concept_id, sha256=sha256)
        for image_id, concept_id, sha256 in zip(
            images["image_id"].to_pylist(),
            search["concept_id"].take(found).to_pylist(),
            images["sha256"].to_pylist(),
            strict=True,
        )
    ]
    concepts = kept_concepts(ctx)
    names = list(zip(concepts["concept_id"].to_pylist(), concepts["concept"].to_pylist(), strict=True))
    out = run_tagging(ctx.config.tagging, requests, names, ctx.ws.blobs.get, cache_dir=model_cache(ctx))
    stats = stats_from_table(ctx.stage, out.tags, llm_failures=out.failures.num_rows)
    return StageOutput(out.tags, {"llm_failures": out.failures}, stats)


def _image_metadata(ctx: StageContext) -> StageOutput:
    table = build_catalog(
        kept_concepts(ctx),
        ctx.table("search"),
        ctx.table("images"),
        ctx.table("review"),
        ctx.table("tags"),
        ctx.table("translations"),
        ctx.ws.read_extra_table("image_dedup", "copies"),
        ctx.pack,
        public_url=search_config(ctx.config, ctx.ws).url_publisher(),
    )
    return catalog_output(table, ctx)  # without the images of the release root's denylist (culturebench takedown)


def _assembly(ctx: StageContext) -> StageOutput:
    catalog = ctx.table("image_metadata")
    result = run_assembly(
        ctx.config.assembly,
        catalog,
        ctx.table("translations"),
        ctx.pack,
        ctx.on_progress(ctx.stage),
        apart=local_workers(ctx.config.task_runner, catalog.num_rows) > 1,  # RQ3 on the other core
    )
    unassembled = result.unassembled.to_pylist()
    images = catalog.num_rows
    reasons: dict[str, int] = {}
    for row in unassembled:
        key = f"{row['task']}:{row['reason']}"
        reasons[key] = reasons.get(key, 0) + 1
    stats = AssemblyStats(
        stage=ctx.stage,
        rows_in=images,
        kept=result.benchmark.num_rows,
        dropped=len(unassembled),
        dropped_by_reason=dict(sorted(reasons.items())),
        reuse=result.reuse,
        extra={"rq3_rows": result.benchmark_cd.num_rows},
    )
    side = {"benchmark_cd": result.benchmark_cd, "unassembled": result.unassembled}
    return StageOutput(result.benchmark, side, stats)


def _validation(ctx: StageContext) -> StageOutput:
    report = validate_tables(ctx.config, published_tables(ctx.ws), ctx.pack, ctx.on_progress(ctx.stage))
    table = schemas.from_rows([v.model_dump() for v in report.violations], schemas.VIOLATIONS)
    if not report.ok:
        # Kept for inspection, but without a completion marker: a rerun validates again and never releases this.
        path = f"{ctx.ws.stage_dir('validation')}/violations-{ctx.fingerprint[:12]}.parquet"
        ctx.ws.storage.write_parquet(path, table)
        raise BuildValidationError(f"{report.summary()}\nall violations: {path}")
    stats = StageStats(
        stage=ctx.stage,
        rows_in=sum(report.rows_checked.values()),
        kept=0,
        extra={"rows_checked": report.rows_checked, "summary": report.summary()},
    )
    return StageOutput(table, stats=stats)


@dataclass(frozen=True)
class PublishedTables:
    """What a 3XCM release publishes, read (and checked against the workspace's markers) once."""

    images: pa.Table
    benchmark: pa.Table
    benchmark_cd: pa.Table
    unassembled: pa.Table
    translations: pa.Table


def published_tables(ws: Workspace) -> PublishedTables:
    return PublishedTables(
        images=ws.read_table("image_metadata"),
        benchmark=ws.read_table("assembly"),
        benchmark_cd=ws.read_extra_table("assembly", "benchmark_cd"),
        unassembled=ws.read_extra_table("assembly", "unassembled"),
        translations=ws.read_table("translations"),
    )


def validate_tables(
    config: Build3XCMConfig, tables: PublishedTables, pack: ReferencePack, progress: StepProgress | None = None
) -> ValidationReport:
    """Every benchmark rule, on exactly these tables: the validation stage runs it, and so does the release where
    that stage's verdict no longer holds for the tables it is about to publish (`flows/xcm/build.py`
    `validation_verdict`)."""
    return validate_benchmark(
        tables.images,
        tables.benchmark,
        tables.benchmark_cd if config.assembly.rq3 else None,
        translations=tables.translations,
        max_reuse=config.assembly.max_candidate_reuse,
        unassembled=tables.unassembled,
        progress=progress,
        pack=pack,
    )


def embedding_settings(config: Build3XCMConfig) -> Any:
    """Only what changes the vectors: thresholds are the dedup stage's business."""
    tier = config.image_dedup.embedding
    return None if tier is None else tier.embedder.model_dump(exclude={"batch_size"})


STAGES: tuple[Stage[Build3XCMConfig], ...] = (
    # Version 3: the pictures no longer depend on concept id numbers. Version 2 of concepts: the authors' ids.
    Stage("demo_corpus", 3, (), lambda c: c.demo_corpus, _demo_corpus, schemas.DEMO_CORPUS),
    Stage("concepts", 2, (), concepts_settings, _concepts, schemas.CONCEPTS),
    Stage("concept_dedup", 1, ("concepts",), lambda c: c.concept_dedup, _concept_dedup, schemas.CONCEPT_DEDUP),
    Stage(
        "translations",
        1,
        ("concept_dedup",),
        lambda c: (c.translations, c.language_codes),
        _translations,
        schemas.TRANSLATIONS,
        {"conflicts": schemas.TRANSLATION_CONFLICTS, "llm_failures": schemas.LLM_FAILURES},
    ),
    # Version 2: hits carry their provenance (region, licence filter, declared licence, retrieval time, web URL).
    Stage(
        "search", 2, ("demo_corpus", "translations"), lambda c: (c.search, c.countries), _search, schemas.SEARCH_HITS
    ),
    # Version 2: the image pass; the table carries the hashes and names the thumbnails (the image_hashes stage's
    # work, from the same read and decode).
    Stage("images", 2, ("search",), lambda c: c.download, _images, schemas.IMAGES_PASSED),
    Stage(
        "image_embeddings", 1, ("images",), embedding_settings, _image_embeddings, schemas.IMAGE_EMBEDDINGS, gpu=True
    ),
    Stage(
        "image_dedup",
        3,
        ("images", "image_embeddings"),
        lambda c: c.image_dedup.model_dump(exclude={"shard_size", "workers"}),
        _image_dedup,
        schemas.IMAGE_DEDUP,
        {
            "pairs": schemas.DEDUP_PAIRS,
            "review_queue": schemas.REVIEW_QUEUE,
            "concept_summary": schemas.CONCEPT_DEDUP_SUMMARY,
            "copies": schemas.COPIES,
        },
    ),
    Stage(
        "review",
        2,
        ("image_dedup",),
        lambda c: build_review(c).settings(),
        _review,
        schemas.REVIEW,
        {"decisions": schemas.REVIEW_DECISIONS},
    ),
    Stage(
        "tags",
        1,
        ("concept_dedup", "review"),
        lambda c: c.tagging,
        _tags,
        schemas.TAGS,
        {"llm_failures": schemas.LLM_FAILURES},
    ),
    # Version 3: every image row carries its provenance columns (schemas.IMAGE_METADATA).
    Stage("image_metadata", 3, ("tags",), catalog_settings, _image_metadata, schemas.IMAGE_METADATA),
    Stage(
        "assembly",
        1,
        ("image_metadata",),
        lambda c: c.assembly.model_dump(exclude={"max_candidate_reuse"}),
        _assembly,
        schemas.BENCHMARK,
        {"benchmark_cd": schemas.BENCHMARK_CD, "unassembled": schemas.UNASSEMBLED},
        stats_model=AssemblyStats,
    ),
    Stage("validation", 2, ("assembly",), lambda c: c.assembly.max_candidate_reuse, _validation, schemas.VIOLATIONS),
)
GRAPH: BuildGraph[Build3XCMConfig] = BuildGraph("3xcm", lambda config: STAGES)


def run_stage(
    name: str, config: Build3XCMConfig, progress: Progress | None = None, accept_incomplete: bool = False
) -> tuple[StageMarker, bool]:
    """One stage of the build of `config` (the tests drive stages one by one)."""
    return GRAPH.build(config).run(name, progress, accept_incomplete)
