"""3XCM's evaluation config and runner: an encoder on a 3XCM release, the paper's triplet task (RQ2/RQ3,
`evaluation.xcm.task`) and/or the whole-pool retrieval (GlobalRG's and RAVENEA's protocols, `evaluation.xcm.retrieval`,
its `retrieval/` part). The registry (`evaluation/xcm/benchmark.py`) points here."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from data.publish.reader import Release
from evaluation.config import EmbeddingSettings, EvaluateCommon, GpuSlot, Prepared, build_encoder, no_slot, open_release
from evaluation.models.embed import Progress
from evaluation.models.encoders import EncoderConfig, TextImageEncoder
from evaluation.results.folder import EvaluationResult, with_parts
from evaluation.results.parts import ResultPart
from evaluation.xcm.task import XcmEvaluation, evaluate_3xcm


class Evaluate3XCMConfig(EvaluateCommon, EmbeddingSettings):
    benchmark: Literal["3xcm"] = "3xcm"
    task: Literal["triplet", "retrieval", "all"] = Field(
        default="triplet",
        description="triplet: the paper's (RQ2/RQ3 candidates); retrieval: GlobalRG/RAVENEA retrieval over the "
        "whole pool (its `retrieval/` part); all: both.",
    )
    model: EncoderConfig | None = Field(default=None, description="The model; none with demo: a random open_clip.")
    query: Literal["text", "image"] = Field(
        default="text", description="text: the paper's text-to-image retrieval; image: the query image instead."
    )


def settings_3xcm(config: Evaluate3XCMConfig) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "query": config.query,
        "bootstrap_resamples": config.bootstrap_resamples,
        "seed": config.seed,
    }
    if config.task != "triplet":  # named only when not the paper's: earlier results keep their bytes
        settings["task"] = config.task
    return settings


def run_3xcm(
    config: Evaluate3XCMConfig,
    progress: Progress | None = None,
    *,
    release: Release | None = None,
    encoder: TextImageEncoder | None = None,
    gpu_slot: GpuSlot = no_slot,
) -> EvaluationResult:
    release = release or open_release(config)
    encoder = encoder or build_encoder(config)
    evaluation: XcmEvaluation | None = None
    parts: dict[str, ResultPart] = {}
    with gpu_slot(config.gpu_concurrency_limit if encoder.runs_locally else None):
        if config.task in ("triplet", "all"):
            evaluation = evaluate_3xcm(
                release,
                encoder,
                query=config.query,
                n_resamples=config.bootstrap_resamples,
                seed=config.seed,
                progress=progress,
            )
        if config.task in ("retrieval", "all"):
            from evaluation.xcm.retrieval import evaluate_retrieval

            parts["retrieval"] = evaluate_retrieval(
                release, encoder, n_resamples=config.bootstrap_resamples, seed=config.seed, progress=progress
            )
    return EvaluationResult(
        benchmark="3xcm",
        release=release,
        model=encoder.identity.model_dump(mode="json"),
        per_query=evaluation.per_query if evaluation else None,
        tables=evaluation.tables if evaluation else {},
        metrics=with_parts("3xcm", config.task, evaluation.metrics if evaluation else {}, parts),
        figures=evaluation.figures if evaluation else {},
        settings=settings_3xcm(config),
        skipped=(evaluation.skipped if evaluation else []) + [s for p in parts.values() for s in p.skipped],
        demo=config.demo,
        warnings=(evaluation.warnings if evaluation else []) + [w for p in parts.values() for w in p.warnings],
        parts=parts,
    )


def prepare(config: Evaluate3XCMConfig, release: Release) -> Prepared:
    encoder = build_encoder(config)

    def run(progress: Progress | None, gpu_slot: GpuSlot) -> EvaluationResult:
        return run_3xcm(config, progress, release=release, encoder=encoder, gpu_slot=gpu_slot)

    return Prepared(encoder.identity, settings_3xcm(config), run)
