"""The MixCuBe stage graph: which tables each stage reads and writes. Stage logic lives in the stage packages;
fingerprints and skip-if-done are the shared `flows.engine.graph`.

originals -> faces -> masks -> (synthesis_rN -> filters_rN -> qa_rN) for N = 1..max_attempts -> quintets

Round 1 inpaints every (original, ethnicity); round N+1 only what round N's filters or reviewers sent back
(synthesis/resynthesis.py), so a round with nothing to redo is an empty table and costs nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import cache, partial
from typing import Any, TypeVar

import pyarrow as pa

from annotation.backends import BuildReview
from annotation.synthesis_qa import run_synthesis_qa
from collectors.mixcube_originals import collect_originals, upright_fetched
from collectors.mixcube_search import SearchOriginalsConfig, search_originals
from curation.filter_rows import filter_stats, filters_table
from curation.quintets import assemble_quintets
from curation.synthesis_filters import build_synthesis_filter
from data import schemas
from data.publish.manifest import CellBelowTarget, IncompleteOriginal
from data.review_labels import KEEP
from data.schemas import STATUS_OK
from data.stage import stats_from_table
from data.stage_stats import ReviewSummary, StageStats
from flows.engine.graph import BuildGraph, Stage, StageOutput
from flows.engine.graph import StageContext as GraphContext
from flows.engine.shards import ShardPlan
from flows.engine.slots import gpu_slot
from flows.mixcube.config import BuildMixCubeConfig
from flows.mixcube.takedown import fetcher_without_taken_down, originals_settings, originals_without_taken_down
from synthesis.attempts import AttemptPlan, ResultCache, first_plans, run_attempts
from synthesis.face_rows import faces_table
from synthesis.faces import build_face_detector
from synthesis.inpaint import build_inpainter
from synthesis.mask_rows import masks_table
from synthesis.resynthesis import Outcome, left_over, outcomes, retry_plans

StageContext = GraphContext[BuildMixCubeConfig]
T = TypeVar("T")


# -- the details each stage reports (written inside the stats' `extra`; read back typed, by the provenance) --------


class FacesStats(StageStats):
    detector: str | None = None  # the face detector's model id


class MasksStats(StageStats):
    masker: str | None = None  # the masker's model id


class SynthesisStats(StageStats):
    models: list[str] | None = None  # the inpainting models used


class QuintetsStats(StageStats):
    incomplete: list[IncompleteOriginal] | None = None  # originals left without a full quintet
    left_over_by_outcome: dict[str, int] | None = None
    cells_below_target: list[CellBelowTarget] | None = None  # culture x category cells short of target


def lazily(build: Callable[[], T]) -> Callable[[], T]:
    """Build a model at the first shard that needs it: a resumed stage may need none."""
    return cache(build)


def _gpu_slot_of(ctx: StageContext) -> Callable[[], AbstractContextManager[None]]:
    return lambda: gpu_slot(ctx.config.gpu_concurrency_limit)


def collected(ctx: StageContext) -> list[dict]:
    return [o for o in ctx.table("originals").to_pylist() if o["status"] == STATUS_OK]


def original_sha256(ctx: StageContext) -> dict[str, str]:
    """original id -> blob of the collected original."""
    return {o["original_id"]: o["sha256"] for o in collected(ctx)}


def masked_originals(ctx: StageContext) -> tuple[list[dict], dict[str, str]]:
    """The originals that reached synthesis, and their mask blobs."""
    masks = {m["original_id"]: m["mask_sha256"] for m in ctx.table("masks").to_pylist() if m["status"] == STATUS_OK}
    return [o for o in collected(ctx) if o["original_id"] in masks], masks


# -- stage adapters -----------------------------------------------------------------------------------------------


def _originals(ctx: StageContext) -> StageOutput:
    config = ctx.config.originals
    if isinstance(config, SearchOriginalsConfig):
        fetcher = fetcher_without_taken_down(config.download.build()(ctx.ws), ctx, "mixcube")
        table = search_originals(config, config.search.build(), fetcher, ctx.ws.blobs, ctx.pack.mixcube())
        # The downloader stores the bytes as received: turn them upright here, as the other backends do at ingest.
        table = upright_fetched(table, ctx.ws.blobs.get, ctx.ws.blobs.put)
    else:
        table = collect_originals(config, ctx.ws.blobs.put, ctx.pack.mixcube())
    table = originals_without_taken_down(table, ctx)  # the release root's denylist (culturebench takedown)
    return StageOutput(table, stats=stats_from_table(ctx.stage, table, demo=ctx.config.is_demo))


def _faces(ctx: StageContext) -> ShardPlan:
    """App. A.4 and the issue: every original must show at least one detectable face; those without are rows."""
    detector = lazily(partial(build_face_detector, ctx.config.faces))
    return ShardPlan(
        collected(ctx),
        shard_size=ctx.config.shard_size,
        process=lambda chunk: faces_table(chunk, detector, ctx.ws.blobs.get),
        summarize=lambda t: stats_from_table("faces", t, detector=_first(t, "detector")),
    )


def _masks(ctx: StageContext) -> ShardPlan:
    masker = lazily(ctx.config.masks.build)
    sha = original_sha256(ctx)
    faces = [f for f in ctx.table("faces").to_pylist() if f["status"] == STATUS_OK]
    return ShardPlan(
        faces,
        shard_size=ctx.config.shard_size,
        process=lambda chunk: masks_table(chunk, masker, sha, ctx.ws.blobs.get, ctx.ws.blobs.put, _gpu_slot_of(ctx)),
        summarize=lambda t: stats_from_table("masks", t, masker=_first(t, "masker")),
    )


def _synthesis(round_: int) -> Callable[[StageContext], ShardPlan]:
    name = f"synthesis_r{round_}"

    def run(ctx: StageContext) -> ShardPlan:
        originals, masks = masked_originals(ctx)
        if round_ == 1:
            plans = first_plans(originals, masks, ctx.pack.mixcube(), ctx.config.seed)
        else:
            previous = round_tables(ctx, round_ - 1).outcomes()
            requests = ctx.ws.read_extra_table(f"qa_r{round_ - 1}", "requests")
            sha = {o["original_id"]: o["sha256"] for o in originals}
            plans = retry_plans(previous, requests, sha, round_, ctx.config.seed, ctx.pack.mixcube())
        inpainter = lazily(partial(build_inpainter, ctx.config.inpaint))
        results = lazily(
            lambda: ResultCache(ctx.ws.storage, ctx.ws.file_path("inpaint_cache"), ctx.config.inpaint, inpainter())
        )

        def process(chunk: Sequence[AttemptPlan]) -> pa.Table:
            return run_attempts(inpainter(), chunk, ctx.ws.blobs.get, ctx.ws.blobs.put, results(), _gpu_slot_of(ctx))

        def summarize(table: pa.Table) -> StageStats:
            return stats_from_table(
                name,
                table,
                retry_kinds=dict(Counter(table["retry_kind"].to_pylist())),
                placeholders=sum(table["placeholder"].to_pylist()),
                models=sorted(set(table["model_id"].to_pylist())),
            )

        return ShardPlan(
            plans,
            shard_size=ctx.config.shard_size,
            process=process,
            summarize=summarize,
        )

    return run


def _filters(round_: int) -> Callable[[StageContext], ShardPlan]:
    name = f"filters_r{round_}"

    def run(ctx: StageContext) -> ShardPlan:
        scorer = lazily(lambda: build_synthesis_filter(ctx.config.filters))
        sha = original_sha256(ctx)
        return ShardPlan(
            ctx.table(f"synthesis_r{round_}").to_pylist(),
            shard_size=ctx.config.shard_size,
            process=lambda chunk: filters_table(chunk, scorer, sha, ctx.ws.blobs.get, _gpu_slot_of(ctx)),
            summarize=lambda table: filter_stats(name, table),
        )

    return run


def _first(table: pa.Table, column: str) -> str | None:
    return table[column][0].as_py() if table.num_rows else None


def build_review(config: BuildMixCubeConfig) -> BuildReview:
    """The build's human review: the synthesis QA of every round (the record's `review`, each QA stage's
    fingerprint share)."""
    return BuildReview(config.qa, "synthesis_qa")


def _qa(round_: int) -> Callable[[StageContext], StageOutput]:
    name = f"qa_r{round_}"

    def run(ctx: StageContext) -> StageOutput:
        scores = {r["attempt_id"]: r for r in ctx.table(f"filters_r{round_}").to_pylist()}
        passed = {attempt_id for attempt_id, r in scores.items() if r["verdict"] == KEEP}
        sha = original_sha256(ctx)
        candidates = [
            {
                "attempt_id": a["attempt_id"],
                "original_id": a["original_id"],
                "ethnicity": a["ethnicity"],
                "attempt": a["attempt"],
                "original_sha256": sha[a["original_id"]],
                "synthesized_sha256": a["sha256"],
                "mask_sha256": a["mask_sha256"],
                "prompt": a["prompt"],
                "brisque": scores[a["attempt_id"]]["brisque"],
                "clip_similarity": scores[a["attempt_id"]]["clip_similarity"],
            }
            for a in ctx.table(f"synthesis_r{round_}").to_pylist()
            if a["attempt_id"] in passed
        ]
        out = run_synthesis_qa(
            ctx.config.qa,
            schemas.from_rows(candidates, schemas.SYNTHESIS_QA_CANDIDATES),
            ctx.review_context(),
            ctx.ws.blobs.put,
        )
        decisions = Counter(r["decision"] or r["status"] for r in out.qa.to_pylist() if not r["keep"])
        # Set only when there was a round: published as a table artifact by the flow.
        published_decisions: dict[str, Any] = {"summary_table": "decisions"} if out.round else {}
        stats = StageStats(
            stage=name,
            rows_in=out.qa.num_rows,
            kept=out.qa.num_rows - sum(decisions.values()),
            dropped=sum(decisions.values()),
            dropped_by_reason=dict(sorted(decisions.items())),
            review=ReviewSummary.model_validate(out.round.stats() if out.round else {"reviewer": _reviewer(out.qa)}),
            **published_decisions,
            extra={"retry_requests": out.requests.num_rows},
        )
        review_decisions = out.round.decisions if out.round else schemas.empty(schemas.REVIEW_DECISIONS)
        return StageOutput(out.qa, {"requests": out.requests, "decisions": review_decisions}, stats)

    return run


def _reviewer(qa: pa.Table) -> str:
    return _first(qa, "reviewer") or "none (no attempt reached QA)"


@dataclass
class RoundTables:
    attempts: pa.Table  # SYNTHESIS_ATTEMPTS
    filters: pa.Table  # MIXCUBE_FILTERS
    qa: pa.Table  # SYNTHESIS_QA

    def outcomes(self) -> list[Outcome]:
        return outcomes(self.attempts, self.filters, self.qa)


def round_tables(ctx: StageContext, round_: int) -> RoundTables:
    return RoundTables(ctx.table(f"synthesis_r{round_}"), ctx.table(f"filters_r{round_}"), ctx.table(f"qa_r{round_}"))


def _quintets(ctx: StageContext) -> StageOutput:
    """Curation decides: the ordered release rows, and every (original, ethnicity) left without a synthesis."""
    originals, _ = masked_originals(ctx)
    rounds = [round_tables(ctx, n) for n in range(1, ctx.config.max_attempts + 1)]
    attempts = pa.concat_tables([r.attempts for r in rounds])
    filters = pa.concat_tables([r.filters for r in rounds]).select(["attempt_id", "brisque", "clip_similarity"])
    scores = {r["attempt_id"]: r for r in filters.to_pylist()}
    qa = pa.concat_tables([r.qa for r in rounds])
    shas = [o["sha256"] for o in originals] + [s for s in attempts["sha256"].to_pylist() if s]
    sizes = {sha: ctx.ws.blobs.size(sha) for sha in set(shas)}
    mix = ctx.pack.mixcube()
    quintets = assemble_quintets(
        schemas.from_rows(originals, schemas.MIXCUBE_ORIGINALS), attempts, scores, qa, sizes, mix
    )
    leftover = left_over([o for r in rounds for o in r.outcomes()], ctx.config.max_attempts)
    by_original: dict[str, Counter] = {}
    for row in leftover.to_pylist():
        by_original.setdefault(row["original_id"], Counter())[row["outcome"]] += 1
    reasons = Counter(min(c.items(), key=lambda kv: (-kv[1], kv[0]))[0] for c in by_original.values())
    stats = QuintetsStats(
        stage=ctx.stage,
        rows_in=len(originals),
        kept=quintets.rows.num_rows // (1 + len(mix.ethnicities)),
        dropped=len(quintets.incomplete),
        dropped_by_reason=dict(sorted(reasons.items())),
        left_over_by_outcome=dict(sorted(Counter(leftover["outcome"].to_pylist()).items())),
        incomplete=quintets.incomplete,
        cells_below_target=below_target(ctx, quintets.rows),
        extra={
            "images": quintets.rows.num_rows,
            "left_over_pairs": leftover.num_rows,
            "cap_reached": sum(leftover["cap_reached"].to_pylist()),
        },
    )
    return StageOutput(quintets.rows, {"left_over": leftover}, stats)


def below_target(ctx: StageContext, rows: pa.Table) -> list[CellBelowTarget]:
    """Culture x category cells with fewer released originals than `target_per_cell`."""
    mix = ctx.pack.mixcube()
    wanted = ctx.config.originals.wanted_cells(mix)
    released = Counter(
        (r["country"], r["category"])
        for r in rows.select(["country", "category", "ethnicity"]).to_pylist()
        if r["ethnicity"] == mix.original_label
    )
    target = ctx.config.target_per_cell
    return [
        {"country": c.adjective, "category": k, "originals": released[(c.adjective, k)], "target": target}
        for c, k in wanted
        if released[(c.adjective, k)] < target
    ]


# -- the graph ----------------------------------------------------------------------------------------------------


def _stages(config: BuildMixCubeConfig) -> tuple[Stage[BuildMixCubeConfig], ...]:
    stages: list[Stage[BuildMixCubeConfig]] = [
        # Version 2: originals are stored upright (EXIF orientation applied) with the received bytes' sha256.
        # Version 3: with their provenance (schemas.SOURCE_FIELDS).
        Stage("originals", 3, (), originals_settings, _originals, schemas.MIXCUBE_ORIGINALS),
        Stage("faces", 1, ("originals",), lambda c: c.faces, _faces, schemas.MIXCUBE_FACES, stats_model=FacesStats),
        Stage(
            "masks", 1, ("faces",), lambda c: c.masks, _masks, schemas.MIXCUBE_MASKS, gpu=True, stats_model=MasksStats
        ),
    ]
    for n in range(1, config.max_attempts + 1):
        upstream = ("masks",) if n == 1 else ("masks", f"qa_r{n - 1}")
        stages += [
            # The seed and the inpainter decide the pixels; the attempt cap only how many rounds there are.
            Stage(
                f"synthesis_r{n}",
                1,
                upstream,
                lambda c: (c.inpaint, c.seed),
                _synthesis(n),
                schemas.SYNTHESIS_ATTEMPTS,
                gpu=True,
                stats_model=SynthesisStats,
            ),
            Stage(
                f"filters_r{n}",
                1,
                (f"synthesis_r{n}",),
                lambda c: c.filters,
                _filters(n),
                schemas.MIXCUBE_FILTERS,
                gpu=True,
            ),
            Stage(
                f"qa_r{n}",
                1,
                (f"filters_r{n}",),
                lambda c: build_review(c).settings(),
                _qa(n),
                schemas.SYNTHESIS_QA,
                {"requests": schemas.RESYNTHESIS_REQUESTS, "decisions": schemas.REVIEW_DECISIONS},
            ),
        ]
    stages.append(
        Stage(  # version 2: rows carry their original's provenance and `synthesized`
            "quintets",
            2,
            (f"qa_r{config.max_attempts}",),
            lambda c: c.max_attempts,
            _quintets,
            schemas.MIXCUBE_ROWS,
            {"left_over": schemas.MIXCUBE_LEFT_OVER},
            stats_model=QuintetsStats,
        )
    )
    return tuple(stages)


GRAPH: BuildGraph[BuildMixCubeConfig] = BuildGraph("mixcube", _stages)
