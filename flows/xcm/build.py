"""3XCM's benchmark record: the preflight, the release and its provenance; the record makes the `build-3xcm` Prefect
flow and the same build without Prefect for the CLI (`flows/engine/benchmark.py`).

The flow is wiring only: one task per stage (named after the stage) in graph order, then the release. Finished
stages are skipped through the workspace's completion markers, so a rerun of the same config resumes.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from collectors.pack_needs import PackIncomplete, missing_csv, missing_for_build, missing_summary
from curation.validate import ValidationReport, validate_benchmark
from data.provenance import code_version
from data.publish.folder import ReleaseResult
from data.publish.format import ReleaseReadError
from data.publish.manifest import Provenance, validated
from data.publish.reader import read_parquet_parts, read_parts_as, release_pack
from data.publish.release import with_phash
from data.reference import ReferencePack, load_pack
from data.schemas import CATALOG
from data.workspace import Workspace
from flows.engine.benchmark import Benchmark
from flows.engine.config import ConfigError
from flows.engine.graph import Build, Progress
from flows.engine.placement import local_workers, run_apart
from flows.xcm import takedown
from flows.xcm.config import Build3XCMConfig
from flows.xcm.deviations import xcm_deviations
from flows.xcm.release import IMAGES, write_3xcm_release
from flows.xcm.stages import (
    GRAPH,
    AssemblyStats,
    BuildValidationError,
    build_review,
    published_tables,
    validate_tables,
)


def backends(config: Build3XCMConfig) -> dict[str, str]:
    """The backends as the manifest names them."""
    return {
        "concepts": config.concepts.backend,
        "concept_dedup": config.concept_dedup.backend,
        "translations": config.translations.backend,
        "search": config.search.backend,
        "images": config.download.backend,
        "image_dedup": config.image_dedup.tiers_label(),
        "review": config.review.backend,
        "tagging": config.tagging.backend,
    }


def preflight(config: Build3XCMConfig) -> None:
    """Fail now, naming the field, when an input or a model is missing: not after search and download have run."""
    missing = config.search.missing_input() if config.demo_corpus is None else ()
    if missing:
        fields = " or ".join(f"search.{name}" for name in missing)
        raise ConfigError(f"{fields} is required (or use --demo for the generated corpus)")
    # Building a model backend checks its files, extra and device; the weights load at first use.
    config.concept_dedup.build()
    if config.image_dedup.embedding is not None:
        config.image_dedup.embedding.embedder.build()


def check_reference(config: Build3XCMConfig, pack: ReferencePack, location: str, ws: Workspace) -> None:
    """Before the first stage: the pack holds every language, translation and country name the build needs. What
    it lacks is drafted into the build's copy where the translation backend can (Gemini), else refused in one
    line naming the file (in the workspace) that lists each missing entry."""
    known = config.concepts.pack_concepts(pack)
    concepts = [(c.concept_id, c.concept) for c in known] if known is not None else None
    missing = missing_for_build(pack, config.countries, concepts)
    cache = ws.storage.fs.unstrip_protocol(ws.file_path("model_cache"))
    ids = [cid for cid, _ in concepts] if concepts is not None else None
    languages = sorted({m.language for m in missing})
    if missing and config.translations.complete_pack(pack, location, languages, ids, cache):
        missing = missing_for_build(load_pack(location), config.countries, concepts)
    if not missing:
        return
    path = ws.file_path("reference_missing.csv")
    ws.storage.write_bytes(path, missing_csv(missing))
    source = config.reference or "the default pack"
    raise PackIncomplete(
        f"the reference pack {pack.info.name} lacks {missing_summary(missing)} that this build needs, each listed "
        f"in {ws.storage.display(path)}: add them to {source}, draft them with `culturebench reference translate "
        f"PACK --languages {','.join(languages)}`, or build with translations.backend: gemini"
    )


def provenance(build: Build[Build3XCMConfig]) -> Provenance:
    """What the release's manifest states of the build, checked as the writer checks it (ManifestError names the
    field)."""
    config, stats = build.config, build.stats()
    by_name = {s.stage: s for s in stats}
    summary = by_name["review"].review
    review = summary.model_dump(mode="json", exclude_unset=True) if summary else {}
    reviewer = summary.reviewer if summary else "?"
    stated = {
        "build_id": build.build_id,
        "config": config.released_config(),
        "code_version": code_version(),
        "reference_data_sha256": build.pack.digest,
        "reference": build.pack.record(),
        "seeds": {
            "assembly": config.assembly.seed,
            "demo_corpus": config.demo_corpus.seed if config.demo_corpus else None,
        },
        # Who actually reviewed: the files backend falls back on auto-accept until a completed export arrives.
        "backends": {**backends(config), "review": reviewer},
        "review": review,
        "deviations": xcm_deviations(config, reviewer),
        "stage_fingerprints": build.fingerprints,
        "stage_stats": [s.model_dump(mode="json") for s in stats],
        "reuse": build.ws.stats("assembly", AssemblyStats).reuse or {},
    }
    return validated(Provenance, stated)


def release(build: Build[Build3XCMConfig], progress: Progress | None = None) -> ReleaseResult:
    """Materialise exactly the validated tables into `<release.root>/3xcm/<version>/`. The validation stage's verdict
    guards them where it vouches for these very tables (`validation_verdict`); otherwise the release validates them
    itself first. The card and manifest state the verdict on the bytes they publish."""
    config, ws = build.config, build.ws
    verdict = validation_verdict(ws)
    if verdict is not None:
        summary, validated_tables = verdict
    else:
        report, validated_tables = validate_published(build)
        if not report.ok:
            raise BuildValidationError(f"the tables to release break the benchmark rules:\n{report.summary()}")
        summary = report.summary()
    tables = published_tables(ws)  # each part checked against its marker's sha256 (`Workspace.read_table`)
    if _table_digests(ws) != validated_tables:
        raise BuildValidationError("the tables to release changed while they were validated: build again")
    images = tables.images
    # Each image is named by its URL, sha256 and pHash (docs/release-managers.md, "URL-only releases").
    if config.release.mode == "urls":
        hashes = ws.read_table("images").select(["sha256", "phash"]).to_pylist()
        images = with_phash(images, {h["sha256"]: h["phash"] for h in hashes})
    return write_3xcm_release(
        config.release,
        ws.blobs,
        images,
        tables.benchmark,
        tables.benchmark_cd,
        tables.unassembled,
        # As the build stated it (`exclude_unset`, python values: the writer's JSON is byte for byte the same).
        {**provenance(build).model_dump(exclude_unset=True), "validation": {"summary": summary}},
        build.pack,
        progress=None if progress is None else partial(progress, "release"),
        # The shards on every core, as the image stages run theirs (`task_runner.processes_from_items`).
        workers=local_workers(config.task_runner, images.num_rows),
    )


def validation_verdict(ws: Workspace) -> tuple[str, dict[str, str]] | None:
    """The validation stage's verdict, where it vouches for exactly the tables to release, with their digests; else
    None, and the release validates them itself (`validate_published`).

    It vouches when every stage upstream of it is as it was when it ran: each marker's recorded input digests are
    those stages' digests now, all the way up (`Workspace.inputs_are_current`). A digest covers the stage's files
    and its inputs, so the tables the release reads (image_metadata, assembly, translations) are the ones it
    validated. One validation then guards the release; a table rewritten since (its marker too, as a bug could)
    breaks the chain, and the release validates again."""
    if not ws.inputs_are_current("validation"):
        return None
    summary = ws.stats("validation").extra.get("summary")
    if not isinstance(summary, str):  # a marker from before the stage recorded its summary
        return None
    return summary, _table_digests(ws)


def validate_published(build: Build[Build3XCMConfig]) -> tuple[ValidationReport, dict[str, str]]:
    """Every benchmark rule on the tables to release, and the digests of the stages it read them from. From
    `task_runner.processes_from_items` images on, in a worker process of its own (`run_apart`): the validator's
    Python objects leave with it, so the release writes its shards without them. One process, not two in parallel:
    the release reads the tables only after it, so that they are never held twice."""
    marker = build.ws.marker("image_metadata")
    images = marker.rows if marker is not None else 0
    if local_workers(build.config.task_runner, images) < 2:
        return _validate_published(build)
    return run_apart(partial(_validate_published, build), "the release's validation")()


def _validate_published(build: Build[Build3XCMConfig]) -> tuple[ValidationReport, dict[str, str]]:
    digests = _table_digests(build.ws)
    return validate_tables(build.config, published_tables(build.ws), build.pack), digests


def _table_digests(ws: Workspace) -> dict[str, str]:
    """The content digests of the stages whose tables a release publishes (`published_tables`)."""
    return {stage: ws.marker_digest(stage) or "" for stage in ("image_metadata", "assembly", "translations")}


def validate_release(folder: Path, patch: bool = False) -> ValidationReport:
    """Every benchmark rule on a 3XCM release folder. Raises `ReleaseReadError` when a table is missing or
    unreadable (releases older than `unassembled` are checked without it). A takedown `patch` is checked without
    the balance replay (its kept rows were chosen least-used over its parent's pool): `flows/operations/validate.py`
    derives it again from its parent instead."""
    # The catalog the validator reads, without the image bytes; releases written before pixel hashes were published
    # have a null `pixel_sha256`.
    images = read_parts_as(folder / IMAGES.config, CATALOG, missing_as_null=["pixel_sha256"])
    tables = {name: read_parquet_parts(folder / name) for name in ("benchmark", "benchmark_cd", "unassembled")}
    missing = [name for name, table in ((IMAGES.config, images), *tables.items()) if table is None]
    if set(missing) - {"unassembled"}:
        raise ReleaseReadError(f"{folder} has no {missing[0]}/*.parquet")
    return validate_benchmark(
        images,
        tables["benchmark"],
        tables["benchmark_cd"],
        unassembled=tables["unassembled"],
        balance=not patch,
        pack=release_pack(folder),
    )


XCM: Benchmark[Build3XCMConfig] = Benchmark(
    name="3xcm",
    title="3XCM",
    flow_name="build-3xcm",
    entrypoint="flows/xcm/build.py:build_3xcm",
    description=(
        "Build and release 3XCM; stages that already finished for this config are skipped. An open review suspends\n"
        "the run until the reviewers are done (resume it from the UI, or let the sync-reviews deployment do it).\n"
        "`close_reviews` imports open reviews as they stand: items short of annotations are undecided and reported."
    ),
    config=Build3XCMConfig,
    graph=GRAPH,
    review=build_review,
    preflight=preflight,
    check_reference=check_reference,
    release=release,
    provenance=provenance,
    nothing_released=BuildValidationError,
    validate_release=validate_release,
    image_config=IMAGES,
    derive_patch=takedown.derive_patch,
    write_patch=takedown.write_patch,
)

# The Prefect flow, `(config, close_reviews)`, as prefect.yaml's entrypoint names it; and the same build without
# Prefect. Both check the config first (`XCM.run` is the entry point that checks it once and runs either).
build_3xcm = XCM.flow
build_locally = XCM.build_locally
