"""One evaluation, from its config to its result folder: the typed configs the CLI, the `evaluate` flow and its
deployment share, and the two runners (3XCM retrieval, MixCuBe VLM questions). Model calls hold the `gpu` slot
when the model runs here; precomputed vectors and remote APIs hold none.

`evaluate_and_write` refuses whatever it can refuse cheaply before any model works: the release's manifest (read
strictly) and the tables the benchmark reads (hashed against it), the result path (never an input, never inside a
release or result folder), the model's config (built, which checks its files, not run), and an existing result at
the path that holds another release, model or settings (an identical rerun stays `unchanged`)."""

from __future__ import annotations

import logging
import typing
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)

from data.output_paths import OutputPathError, check_output
from data.publish.folder import ReleaseExistsError, ReleaseResult
from data.publish.reader import Release
from data.takedown.older_versions import refuse_taken_down
from evaluation.harnesses.predictions import PredictionsConfig, PredictionsVlm
from evaluation.mixcube import task as mx
from evaluation.models.embedding_cache import CachedEncoder
from evaluation.models.encoders import EncoderConfig, ModelIdentity, TextImageEncoder
from evaluation.models.vlm import VisionLanguageModel, VlmConfig, VlmIdentity
from evaluation.results.folder import EvaluationResult, default_out, existing_result_conflict, with_parts, write_results
from evaluation.results.parts import ResultPart
from evaluation.xcm.task import Progress, XcmEvaluation, evaluate_3xcm


class _Common(BaseModel):
    model_config = ConfigDict(extra="forbid")

    release: str = Field(description="The release folder to evaluate (it holds manifest.json).")
    out: str | None = Field(
        default=None, description="Result folder; default <results_root>/<benchmark>/<release version>/<model id>."
    )
    results_root: str = Field(default="./evaluations", description="Root of the default result folders.")
    gpu_concurrency_limit: str | None = Field(
        default="gpu", description="Prefect global concurrency limit that local model calls hold (none: no slot)."
    )
    demo: bool = Field(
        default=False,
        description="A random demo model: without `model`, a tiny random one is built under demo_models; the card "
        "says the numbers are meaningless.",
    )
    demo_models: str = Field(default="./workspace/demo-models", description="Where demo models are built.")

    @model_validator(mode="after")
    def _model_or_demo(self) -> _Common:
        predictions = getattr(self, "predictions", None)
        if predictions is not None and (getattr(self, "model", None) is not None or self.demo):
            raise ValueError("predictions replace the model: name no model and no demo model with them")
        if getattr(self, "model", None) is None and predictions is None and not self.demo:
            raise ValueError("name a model (or set demo: true for a tiny random one)")
        return self


class _Embedding(BaseModel):
    """What an encoder's evaluation shares: the intervals' bootstrap and the cache of image vectors."""

    bootstrap_resamples: int = Field(default=1000, ge=0, description="Resamples for the 95% intervals (0: none).")
    seed: int = Field(default=0, description="Seed of the bootstrap.")
    embedding_cache: str | None = Field(
        default="./workspace/embedding-cache",
        description="Image vectors cached per model by image sha256 (none: no cache).",
    )


class Evaluate3XCMConfig(_Common, _Embedding):
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


class EvaluateMixCubeConfig(_Common, _Embedding):
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


#: The encoder backends' config classes (EncoderConfig is Annotated[A | B | ..., discriminator]).
ENCODER_CONFIGS = typing.get_args(typing.get_args(EncoderConfig)[0])
EvaluationConfig = Annotated[Evaluate3XCMConfig | EvaluateMixCubeConfig, Field(discriminator="benchmark")]
log = logging.getLogger(__name__)
#: The tables (config folders) each benchmark's evaluation reads: checked against the release manifest first.
READS: dict[str, tuple[str, ...]] = {"3xcm": ("benchmark", "benchmark_cd", "image_metadata"), "mixcube": ("default",)}


@dataclass
class Written:
    result: EvaluationResult
    out: str
    release: ReleaseResult  # status created | unchanged


#: Held around the work that runs a model on this machine, with the config's `gpu_concurrency_limit`: the engine's
#: `flows.engine.slots.gpu_slot` in a Prefect run (builds and evaluations sharing a GPU take turns), nothing by
#: default.
GpuSlot = Callable[[str | None], AbstractContextManager[None]]


def no_slot(limit_name: str | None) -> AbstractContextManager[None]:
    """The default `GpuSlot`: holds nothing."""
    return nullcontext()


def demo_encoder(root: str) -> EncoderConfig:
    from demo.models import random_open_clip

    configs, weights = random_open_clip(Path(root) / "open_clip", name="demo-random-clip")
    model = {"backend": "open_clip", "model_name": "demo-random-clip", "pretrained": str(weights)}
    return TypeAdapter(EncoderConfig).validate_python({**model, "model_config_dir": str(configs), "device": "cpu"})


def demo_vlm(root: str) -> VlmConfig:
    from demo.models import DEMO_BATCH_SIZE, DEMO_MAX_NEW_TOKENS, random_vlm

    folder = random_vlm(Path(root) / "demo-random-vlm")
    model = {
        "backend": "transformers",
        "model": str(folder),
        "device": "cpu",
        "max_new_tokens": DEMO_MAX_NEW_TOKENS,
        "batch_size": DEMO_BATCH_SIZE,
    }
    return TypeAdapter(VlmConfig).validate_python(model)


def open_release(config: Evaluate3XCMConfig | EvaluateMixCubeConfig) -> Release:
    """The release, its manifest read strictly and the tables the benchmark reads hashed against it, its reference
    pack the one it states: numbers are never computed from tables (or a pack) other than those the manifest (cited
    by the results card) lists."""
    release = Release.open(config.release)
    release.verify(READS[config.benchmark])
    release.pack()  # its pack against what its manifest and card state: refused before any model runs
    refuse_taken_down(release.path, release.name, "evaluate")  # an older version's images taken down since
    return release


def build_encoder(config: Evaluate3XCMConfig | EvaluateMixCubeConfig) -> TextImageEncoder:
    """The configured (or demo) encoder, built: its files checked and its identity known, nothing embedded yet."""
    model = _encoder_config(config.model or demo_encoder(config.demo_models), config.task)
    encoder: TextImageEncoder = model.build()
    if config.embedding_cache and encoder.needs_image_bytes:  # vectors looked up by id have nothing to cache
        encoder = CachedEncoder(encoder, config.embedding_cache)
    return encoder


def _encoder_config(model: VlmConfig | EncoderConfig, task: str) -> EncoderConfig:
    if not isinstance(model, ENCODER_CONFIGS):  # the config validators make this unreachable from outside
        raise ValueError(f"task {task!r} embeds with an encoder, not the VLM backend {model.backend!r}")
    return typing.cast(EncoderConfig, model)


def _vlm_config(model: VlmConfig | EncoderConfig, task: str) -> VlmConfig:
    if isinstance(model, ENCODER_CONFIGS):
        raise ValueError(f"task {task!r} asks a vision-language model, not the encoder backend {model.backend!r}")
    return typing.cast(VlmConfig, model)


def build_vlms(
    config: EvaluateMixCubeConfig, release: Release | None = None
) -> tuple[VisionLanguageModel, VisionLanguageModel | None]:
    """The configured (or demo) model and its judge, built: config errors raised, nothing asked yet. With
    `predictions`, the model answers from that file, read and checked against the release's rows here."""
    if config.predictions is not None:
        release = release or open_release(config)
        answers = config.predictions.build(release.path / "default", release.pack().mixcube().evaluation_prompts)
        return answers, config.judge.build() if config.judge is not None else None
    model = _vlm_config(config.model or demo_vlm(config.demo_models), config.task)
    judge_config = config.judge or (model if config.model is None else None)  # the demo model judges itself
    vlm = model.build()
    judge = judge_config.build() if judge_config is not None else None
    return vlm, judge


def settings_3xcm(config: Evaluate3XCMConfig) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "query": config.query,
        "bootstrap_resamples": config.bootstrap_resamples,
        "seed": config.seed,
    }
    if config.task != "triplet":  # named only when not the paper's: earlier results keep their bytes
        settings["task"] = config.task
    return settings


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


def wilson_interval(successes: int, trials: int) -> list[float | None]:
    """The 95% Wilson score interval of a proportion (better than the normal one near 0 and 1)."""
    if trials == 0:
        return [None, None]
    from scipy.stats import binomtest

    interval = binomtest(successes, trials).proportion_ci(confidence_level=0.95, method="wilson")
    return [float(interval.low), float(interval.high)]


def _with_intervals(summary: dict[str, Any], per_image: pa.Table) -> dict[str, Any]:
    judged = [v for v in per_image["marker_correct"].to_pylist() if v is not None]
    summary["ci95"] = {
        "accuracy": wilson_interval(summary["correct"], summary["answered"]),
        "accuracy_with_our_aliases": wilson_interval(summary["correct_with_our_aliases"], summary["answered"]),
        "marker_accuracy": wilson_interval(sum(judged), len(judged)),
    }
    return summary


def run(
    config: Evaluate3XCMConfig | EvaluateMixCubeConfig, progress: Progress | None = None, gpu_slot: GpuSlot = no_slot
) -> EvaluationResult:
    if isinstance(config, Evaluate3XCMConfig):
        return run_3xcm(config, progress, gpu_slot=gpu_slot)
    if config.task == "audit":
        return run_audit(config, progress, gpu_slot=gpu_slot)
    return run_mixcube(config, progress, gpu_slot=gpu_slot)


def evaluate_and_write(
    config: Evaluate3XCMConfig | EvaluateMixCubeConfig, progress: Progress | None = None, gpu_slot: GpuSlot = no_slot
) -> Written:
    """Check everything cheap (release, tables, result path, model config, an existing result there), then run the
    model and write the result folder: a refusal never comes after the model has worked."""
    release = open_release(config)
    if config.out is not None:
        check_result_path(config.out, release, "--out")
    identity: ModelIdentity | VlmIdentity
    if isinstance(config, Evaluate3XCMConfig):
        encoder = build_encoder(config)
        identity, settings = encoder.identity, settings_3xcm(config)
    elif config.task == "audit":
        encoder = build_encoder(config)
        identity, settings = encoder.identity, settings_audit(config, release)
    else:
        models = build_vlms(config, release)
        identity, settings = models[0].identity, settings_mixcube(models[1], models[0])
    out = config.out or default_out(config.results_root, config.benchmark, release, identity.model_id, config.task)
    if config.out is None:
        check_result_path(out, release, "--results-root")
    conflict = existing_result_conflict(out, config.benchmark, release, identity.model_dump(mode="json"), settings)
    if conflict is not None:
        raise ReleaseExistsError(conflict)
    if isinstance(config, Evaluate3XCMConfig):
        result = run_3xcm(config, progress, release=release, encoder=encoder, gpu_slot=gpu_slot)
    elif config.task == "audit":
        result = run_audit(config, progress, release=release, encoder=encoder, gpu_slot=gpu_slot)
    else:
        result = run_mixcube(config, progress, release=release, models=models, gpu_slot=gpu_slot)
    return Written(result, out, write_results(result, out))


def check_result_path(out: str, release: Release, option: str) -> None:
    """A result folder may be written at `out`: not a file, not the release nor inside it, not inside a release or
    result folder (`data.output_paths.check_output`). An earlier result at exactly `out` is allowed here: it is
    compared with (`existing_result_conflict`, then the writer), so an identical rerun is `unchanged`."""
    if "://" in out and not out.startswith("file://"):
        return  # an object store: no local folder to compare paths with; the writer never overwrites
    path = Path(out.removeprefix("file://"))
    if path.exists() and not path.is_dir():
        raise OutputPathError(f"{option} {out} is a file: a result is a folder; choose another path")
    check_output(path, inputs=[release.path], option=option, immutable_target=True)
