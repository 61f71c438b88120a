"""MixCuBe's evaluation config and runners: a vision-language model asked the paper's questions on every image of a
MixCuBe release (Country Identification, App. B.2; Cultural Marker Identification with a judge, App. B.3;
`evaluation.mixcube.task`), or a harness's prediction file scored instead, or the multilingual CLIP bias audit of
an encoder on the quintets (Al Sahili et al. §3.5-3.6, `evaluation.mixcube.bias_audit`, its `audit/` part). The
registry (`evaluation/mixcube/benchmark.py`) points here."""

from __future__ import annotations

import logging
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import (
    Field,
    TypeAdapter,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)

from data.publish.reader import Release
from evaluation.config import (
    ENCODER_CONFIGS,
    EmbeddingSettings,
    EvaluateCommon,
    GpuSlot,
    Prepared,
    build_encoder,
    demo_vlm,
    no_slot,
    open_release,
    vlm_config,
)
from evaluation.harnesses.predictions import PredictionsConfig, PredictionsVlm
from evaluation.intervals import wilson_interval
from evaluation.mixcube import task as mx
from evaluation.models.embed import Progress
from evaluation.models.encoders import EncoderConfig, TextImageEncoder
from evaluation.models.vlm import VisionLanguageModel, VlmConfig
from evaluation.results.folder import EvaluationResult, with_parts

log = logging.getLogger(__name__)


class EvaluateMixCubeConfig(EvaluateCommon, EmbeddingSettings):
    benchmark: Literal["mixcube"] = "mixcube"
    task: Literal["questions", "audit"] = Field(
        default="questions",
        description="questions: the paper's VLM questions (a VLM model); audit: the Multilingual CLIP bias audit "
        "(§3.5-3.6) of a text-image encoder on the quintets (an encoder model, as 3XCM's; its `audit/` part).",
    )
    model: VlmConfig | EncoderConfig | None = Field(
        default=None,
        description="The model: a VLM for questions, an encoder for audit; none with demo: a random local one.",
    )
    judge: VlmConfig | None = Field(
        default=None,
        description="The judge LLM of Cultural Marker Identification (MixCuBe App. B.3, Food only); none: not run.",
    )
    workers: int = Field(default=4, ge=1, description="Questions in flight at once (remote APIs).")
    batch_rows: int = Field(default=256, ge=1, description="Release rows (with their images) read at a time.")
    predictions: PredictionsConfig | None = Field(
        default=None,
        description="A harness's prediction file (VLMEvalKit's <model>_MixCuBe.xlsx) scored instead of asking a model.",
    )

    @field_validator("model", mode="wrap")
    @classmethod
    def _model_for_task(cls, value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
        """The model is a VLM or an encoder by the task (declared before it): backend names alone do not tell (both
        have `transformers`), so a section is validated as the task's kind of model, its errors named as usual."""
        if isinstance(value, dict):
            kind: Any = EncoderConfig if info.data.get("task") == "audit" else VlmConfig
            return TypeAdapter(kind).validate_python(value)
        return handler(value)

    @model_validator(mode="after")
    def _task_inputs(self) -> EvaluateMixCubeConfig:
        encoder = isinstance(self.model, ENCODER_CONFIGS)
        if self.task == "audit" and (self.predictions is not None or self.judge is not None):
            raise ValueError("the audit embeds images and prompts with an encoder: no predictions and no judge")
        if self.model is not None and encoder != (self.task == "audit"):
            raise ValueError(f"task {self.task!r} takes {'an encoder' if self.task == 'audit' else 'a VLM'} model")
        return self


def build_vlms(
    config: EvaluateMixCubeConfig, release: Release | None = None
) -> tuple[VisionLanguageModel, VisionLanguageModel | None]:
    """The configured (or demo) model and its judge, built: config errors raised, nothing asked yet. With
    `predictions`, the model answers from that file, read and checked against the release's rows here."""
    if config.predictions is not None:
        release = release or open_release(config)
        answers = config.predictions.build(release.path / "default", release.pack().mixcube().evaluation_prompts)
        return answers, config.judge.build() if config.judge is not None else None
    model = vlm_config(config.model or demo_vlm(config.demo_models), config.task)
    judge_config = config.judge or (model if config.model is None else None)  # the demo model judges itself
    vlm = model.build()
    judge = judge_config.build() if judge_config is not None else None
    return vlm, judge


def settings_audit(config: EvaluateMixCubeConfig, release: Release) -> dict[str, Any]:
    return {
        "task": "audit",
        "bootstrap_resamples": config.bootstrap_resamples,
        "seed": config.seed,
        "prompts": release.pack().prompts().version_key(),  # the release's own prompt sets
    }


def settings_mixcube(judge: VisionLanguageModel | None, vlm: VisionLanguageModel | None = None) -> dict[str, Any]:
    settings: dict[str, Any] = {"judge": judge.identity.model_dump(mode="json") if judge is not None else None}
    if isinstance(vlm, PredictionsVlm):  # answers read from a harness's file: which file (only then: model runs
        settings["predictions"] = dict(vlm.source)  # keep their settings, and so their bytes, unchanged)
    return settings


def run_audit(
    config: EvaluateMixCubeConfig,
    progress: Progress | None = None,
    *,
    release: Release | None = None,
    encoder: TextImageEncoder | None = None,
    gpu_slot: GpuSlot = no_slot,
) -> EvaluationResult:
    """The Multilingual CLIP bias audit (§3.5-3.6) of an encoder on the release's quintets: its `audit/` part only."""
    from evaluation.mixcube.bias_audit.audit import evaluate_audit

    release = release or open_release(config)
    encoder = encoder or build_encoder(config)
    with gpu_slot(config.gpu_concurrency_limit if encoder.runs_locally else None):
        part = evaluate_audit(
            release, encoder, n_resamples=config.bootstrap_resamples, seed=config.seed, progress=progress
        )
    return EvaluationResult(
        benchmark="mixcube",
        release=release,
        model=encoder.identity.model_dump(mode="json"),
        per_query=None,
        tables={},
        metrics=with_parts("mixcube", "audit", {}, {"audit": part}),
        figures={},
        settings=settings_audit(config, release),
        skipped=part.skipped,
        demo=config.demo,
        warnings=part.warnings,
        parts={"audit": part},
    )


def run_mixcube(
    config: EvaluateMixCubeConfig,
    progress: Progress | None = None,
    *,
    release: Release | None = None,
    models: tuple[VisionLanguageModel, VisionLanguageModel | None] | None = None,
    gpu_slot: GpuSlot = no_slot,
) -> EvaluationResult:
    release = release or open_release(config)
    vlm, judge = models or build_vlms(config, release)
    # A prediction file answers rows that share image and question in row order: ask them in that order.
    workers = 1 if isinstance(vlm, PredictionsVlm) else config.workers
    files = sorted((release.path / "default").glob("*.parquet"))
    if not files:
        raise ValueError(f"{release.path}: the release has no default table")
    # A partial prediction file (lmms-eval's --limit, an interrupted run) is scored on the rows it answers alone.
    partial = vlm if isinstance(vlm, PredictionsVlm) and vlm.partial else None
    # The answered ids as one Arrow array, built once for every batch's filter.
    answered = pa.array(sorted(partial.answered), pa.string()) if partial is not None else None
    total = len(answered) if answered is not None else sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    done = 0

    def advance(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress("ask the model", done, total)

    parts = []
    mix = release.pack().mixcube()  # the release's own cultures, ethnicities, prompts and aliases
    holds_gpu = vlm.runs_locally or (judge is not None and judge.runs_locally)
    with gpu_slot(config.gpu_concurrency_limit if holds_gpu else None):
        for file in files:  # a batch of rows (with their image bytes) at a time, not the whole release
            for batch in pq.ParquetFile(file).iter_batches(batch_size=config.batch_rows):
                rows = pa.Table.from_batches([batch])
                if answered is not None:
                    rows = rows.filter(pc.is_in(rows["sample_id"], answered))
                parts.append(mx.evaluate_images(rows, vlm, judge, mix=mix, progress=advance, workers=workers))
    per_image = pa.concat_tables(parts)
    cached = sum(per_image["cached"].to_pylist())
    log.info("%d of %d answers came from the cache", cached, per_image.num_rows)
    # How a run went (retries, cache hits) is not part of the result: a rerun from the cache publishes the same bytes.
    per_image = per_image.drop_columns(["attempts", "cached"])
    skipped = [] if judge is not None else ["Cultural Marker Identification (Food): no judge model configured"]
    figures = {
        "accuracy_bars.png": mx.fig3_bars_png(per_image, mix),
        "swap_difference.png": mx.fig4_heatmap_png(per_image, mix),
    }
    if judge is not None:  # the paper's Fig. 8b: the same bars for Cultural Marker Identification
        figures["marker_accuracy_bars.png"] = mx.fig3_bars_png(per_image, mix, task="marker")
    metrics = _with_intervals(mx.summary(per_image, mix), per_image)
    if partial is not None:
        metrics["coverage"] = dict(partial.coverage)  # never silently: the card's warning says it too
    return EvaluationResult(
        benchmark="mixcube",
        release=release,
        model=vlm.identity.model_dump(mode="json"),
        per_query=per_image,
        tables={"accuracy": mx.accuracy_table(per_image, mix), "swap_drops": mx.swap_drops(per_image, mix)},
        metrics=metrics,
        figures=figures,
        settings=settings_mixcube(judge, vlm) | _demo_vlm_settings(config),
        skipped=skipped,
        demo=config.demo,
        warnings=[
            *_coverage_warnings(metrics),
            *_failure_warnings(metrics),
            *mx.several_cultures_warnings(metrics),
            *mx.answer_rule_warnings(metrics),
        ],
    )


def _demo_vlm_settings(config: EvaluateMixCubeConfig) -> dict[str, Any]:
    """The demo model's answer cap, for its card: only when the demo model answered."""
    if config.model is not None or config.predictions is not None:
        return {}
    from demo.models import DEMO_MAX_NEW_TOKENS

    return {"demo_answer_cap": DEMO_MAX_NEW_TOKENS}


def _coverage_warnings(metrics: dict[str, Any]) -> list[str]:
    """What a partial prediction file's result covers (an empty list for a full one)."""
    coverage = metrics.get("coverage")
    if not coverage:
        return []
    return [
        f"Partial run: the prediction file answers {coverage['answered_images']} of the release's "
        f"{coverage['release_images']} images ({coverage['share']:.1%}). Every figure here is over those images "
        "alone, not the benchmark; it is comparable only with runs on the same images."
    ]


def _failure_warnings(metrics: dict[str, Any]) -> list[str]:
    """What the accuracy rests on when some questions got no scored answer (an empty list when all did)."""
    failed = metrics["failed"]
    if not failed:
        return []
    classes = ", ".join(f"`{error}`: {count}" for error, count in metrics["failures"].items())
    return [
        f"{failed} of {metrics['images']} images have no scored answer ({classes}): they are counted as failed and "
        "kept out of every accuracy and its interval, whose denominators are the answered images."
    ]


def _with_intervals(summary: dict[str, Any], per_image: pa.Table) -> dict[str, Any]:
    judged = [v for v in per_image["marker_correct"].to_pylist() if v is not None]
    summary["ci95"] = {
        "accuracy": wilson_interval(summary["correct"], summary["answered"]),
        "accuracy_with_our_aliases": wilson_interval(summary["correct_with_our_aliases"], summary["answered"]),
        "marker_accuracy": wilson_interval(sum(judged), len(judged)),
    }
    return summary


def prepare(config: EvaluateMixCubeConfig, release: Release) -> Prepared:
    if config.task == "audit":
        encoder = build_encoder(config)

        def audit(progress: Progress | None, gpu_slot: GpuSlot) -> EvaluationResult:
            return run_audit(config, progress, release=release, encoder=encoder, gpu_slot=gpu_slot)

        return Prepared(encoder.identity, settings_audit(config, release), audit)
    models = build_vlms(config, release)

    def questions(progress: Progress | None, gpu_slot: GpuSlot) -> EvaluationResult:
        return run_mixcube(config, progress, release=release, models=models, gpu_slot=gpu_slot)

    # the settings the result will record (the demo model's cap included): a rerun into its folder is `unchanged`
    settings = settings_mixcube(models[1], models[0]) | _demo_vlm_settings(config)
    return Prepared(models[0].identity, settings, questions)
