"""MixCuBe's benchmark record: the backend check, the release and its provenance; the record makes the
`build-mixcube` Prefect flow and the same build without Prefect for the CLI (`flows/engine/benchmark.py`).

Wiring only: the backends are checked before anything runs (a missing weights file must not surface after hours
of inpainting), then one task per stage in graph order, then the release. An open synthesis QA suspends the run
like 3XCM's duplicate review does.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from curation.synthesis_filters import resolve_brisque_weights
from curation.validate import ValidationReport
from curation.validate_mixcube import shipped_masks, validate_quintets
from data.provenance import code_version
from data.publish.folder import ReleaseResult
from data.publish.format import ReleaseReadError
from data.publish.manifest import Provenance, validated
from data.publish.reader import read_parquet_parts, release_pack
from data.publish.release import with_phash
from data.reference import ReferencePack
from data.schemas import MIXCUBE_ROWS
from data.workspace import Workspace
from flows.engine.benchmark import Benchmark
from flows.engine.graph import Build, Progress
from flows.engine.placement import local_workers
from flows.mixcube import takedown
from flows.mixcube.config import BuildMixCubeConfig
from flows.mixcube.deviations import mixcube_deviations
from flows.mixcube.release import IMAGES, write_mixcube_release
from flows.mixcube.stages import GRAPH, FacesStats, MasksStats, QuintetsStats, SynthesisStats, build_review


class NothingToRelease(RuntimeError):
    """No original has an accepted synthesis for every ethnicity."""


def check_backends(config: BuildMixCubeConfig) -> None:
    """Fail now, naming the field, when a model or weights file is missing. Cheap: nothing large is loaded."""
    config.faces.build()
    config.masks.build()
    config.inpaint.build()
    if config.filters.brisque is not None:
        resolve_brisque_weights(config.filters.brisque)


def check_reference(config: BuildMixCubeConfig, pack: ReferencePack, location: str, ws: Workspace) -> None:
    """Before the first stage: the pack has MixCuBe's cultures, categories, ethnicities and prompts."""
    pack.mixcube()  # a PackError naming mixcube.json when it has none


def backends(config: BuildMixCubeConfig) -> dict[str, Any]:
    """The backends as the manifest names them."""
    return {
        "originals": config.originals.backend,
        "faces": config.faces.backend,
        "masks": config.masks.backend,
        "inpaint": config.inpaint.backend,
        "brisque": "off" if config.filters.brisque is None else config.filters.brisque.backend,
        "clip": "off" if config.filters.clip is None else config.filters.clip.embedder.backend,
        "qa": config.qa.backend,
    }


def provenance(build: Build[BuildMixCubeConfig]) -> Provenance:
    """What the release's manifest states of the build, checked as the writer checks it (ManifestError names the
    field)."""
    config, names = build.config, build.names
    stats = {s.stage: s for s in build.stats()}
    quintets = build.ws.stats("quintets", QuintetsStats)
    reviewers = sorted({review.reviewer if (review := stats[n].review) else "?" for n in names if n.startswith("qa_")})
    stated = {
        "build_id": build.build_id,
        "demo": config.is_demo,
        "config": config.released_config(),
        "code_version": code_version(),
        "reference_data_sha256": build.pack.digest,
        "reference": build.pack.record(),
        "seeds": {"synthesis": config.seed, "demo_originals": config.originals.demo_seed},
        "backends": {**backends(config), "qa": reviewers},
        "deviations": mixcube_deviations(config, reviewers),
        "models": {
            "faces": build.ws.stats("faces", FacesStats).detector,
            "masks": build.ws.stats("masks", MasksStats).masker,
            "inpaint": sorted(
                {m for n in names if n.startswith("synthesis_") for m in build.ws.stats(n, SynthesisStats).models or []}
            ),
        },
        "incomplete": quintets.incomplete,
        "left_over_by_outcome": quintets.left_over_by_outcome,
        "cells_below_target": quintets.cells_below_target,
        "dropped_before_synthesis": {
            name: stats[name].dropped_by_reason for name in ("originals", "faces", "masks") if stats[name].dropped
        },
        "stage_fingerprints": build.fingerprints,
        "stage_stats": [s.model_dump(mode="json") for s in stats.values()],
    }
    return validated(Provenance, stated)


def release(build: Build[BuildMixCubeConfig], progress: Progress | None = None) -> ReleaseResult:
    """Materialise the quintets into `<release.root>/mixcube/<version>/`."""
    ws = build.ws
    rows = ws.read_table("quintets")
    if rows.num_rows == 0:
        left = ws.stats("quintets")
        raise NothingToRelease(
            f"no original has an accepted synthesis for every ethnicity ({left.dropped} originals left out: "
            f"{left.reasons_text()}); see tables/quintets/left_over.parquet in {ws.url}"
        )
    if build.config.release.mode == "urls":  # each original is named by its URL, sha256 and pHash
        from curation.image_hashing import hash_batch

        shas = sorted(set(rows["sha256"].to_pylist()))
        batch = hash_batch([partial(ws.blobs.get, sha) for sha in shas])
        phash = {sha: None if batch.errors[i] else int(batch.phash[i]) for i, sha in enumerate(shas)}
        rows = with_phash(rows, phash)
    written = None if progress is None else partial(progress, "release")
    # As the build stated it (`exclude_unset`, python values: the writer's JSON is byte for byte the same).
    stated = provenance(build).model_dump(exclude_unset=True)
    return write_mixcube_release(
        build.config.release,
        ws.blobs,
        rows,
        stated,
        build.pack,
        progress=written,
        workers=local_workers(build.config.task_runner, rows.num_rows),  # as the 3XCM release writes its shards
    )


def validate_release(folder: Path, patch: bool = False) -> ValidationReport:
    """Every quintet rule on a MixCuBe release folder; ReleaseReadError when its table is missing or unreadable. A
    takedown `patch` keeps the same rules (removing a quintet breaks none)."""
    rows = read_parquet_parts(folder / IMAGES.config, list(MIXCUBE_ROWS.names))
    if rows is None:
        raise ReleaseReadError(f"{folder} has no {IMAGES.config}/*.parquet")
    return validate_quintets(rows, release_pack(folder).mixcube(), shipped_masks(folder))


MIXCUBE: Benchmark[BuildMixCubeConfig] = Benchmark(
    name="mixcube",
    title="MixCuBe",
    flow_name="build-mixcube",
    entrypoint="flows/mixcube/build.py:build_mixcube",
    description=(
        "Build and release MixCuBe; stages that already finished for this config are skipped. An open synthesis QA\n"
        "suspends the run until the reviewers are done (resume it from the UI, or let the sync-reviews deployment do\n"
        "it). `close_reviews` imports open reviews as they stand: attempts short of annotations stay undecided."
    ),
    config=BuildMixCubeConfig,
    graph=GRAPH,
    review=build_review,
    preflight=check_backends,
    check_reference=check_reference,
    release=release,
    provenance=provenance,
    nothing_released=NothingToRelease,
    validate_release=validate_release,
    image_config=IMAGES,
    derive_patch=takedown.derive_patch,
    write_patch=takedown.write_patch,
)

# The Prefect flow, `(config, close_reviews)`, as prefect.yaml's entrypoint names it; and the same build without
# Prefect. Both check the backends first (`MIXCUBE.run` is the entry point that checks them once and runs either).
build_mixcube = MIXCUBE.flow
build_locally = MIXCUBE.build_locally
