"""One evaluation, from its config to its result folder: the typed configs the CLI, the `evaluate` flow and its
deployment share, and the two runners (3XCM retrieval, MixCuBe VLM questions). Model calls hold the `gpu` slot
when the model runs here; precomputed vectors and remote APIs hold none."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from curation.evaluation import mixcube as mx
from curation.evaluation.embedding_cache import CachedEncoder
from curation.evaluation.encoders import EncoderConfig, TextImageEncoder
from curation.evaluation.results import EvaluationResult, default_out, write_results
from curation.evaluation.vlm import VlmConfig
from curation.evaluation.xcm import Progress, evaluate_3xcm
from data.release import ReleaseResult
from data.released import Release
from data.retry import prefect_slot


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
        if getattr(self, "model", None) is None and not self.demo:
            raise ValueError("name a model (or set demo: true for a tiny random one)")
        return self


class Evaluate3XCMConfig(_Common):
    benchmark: Literal["3xcm"] = "3xcm"
    model: EncoderConfig | None = Field(default=None, description="The model; none with demo: a random open_clip.")
    query: Literal["text", "image"] = Field(
        default="text", description="text: the paper's text-to-image retrieval; image: the query image instead."
    )
    bootstrap_resamples: int = Field(default=1000, ge=0, description="Resamples for the 95% intervals (0: none).")
    seed: int = Field(default=0, description="Seed of the bootstrap.")
    embedding_cache: str | None = Field(
        default="./workspace/embedding-cache",
        description="Image vectors cached per model by image sha256 (none: no cache).",
    )


class EvaluateMixCubeConfig(_Common):
    benchmark: Literal["mixcube"] = "mixcube"
    model: VlmConfig | None = Field(default=None, description="The model; none with demo: a random local VLM.")
    judge: VlmConfig | None = Field(
        default=None,
        description="The judge LLM of Cultural Marker Identification (MixCuBe App. B.3, Food only); none: not run.",
    )
    workers: int = Field(default=4, ge=1, description="Questions in flight at once (remote APIs).")
    batch_rows: int = Field(default=256, ge=1, description="Release rows (with their images) read at a time.")


EvaluationConfig = Annotated[Evaluate3XCMConfig | EvaluateMixCubeConfig, Field(discriminator="benchmark")]
log = logging.getLogger(__name__)
LOCAL_ENCODERS = ("open_clip", "transformers", "sentence-transformers")


@dataclass
class Written:
    result: EvaluationResult
    out: str
    release: ReleaseResult  # status created | unchanged


def demo_encoder(root: str) -> EncoderConfig:
    from curation.evaluation.demo_models import random_open_clip

    configs, weights = random_open_clip(Path(root) / "open_clip", name="demo-random-clip")
    model = {"backend": "open_clip", "model_name": "demo-random-clip", "pretrained": str(weights)}
    return TypeAdapter(EncoderConfig).validate_python({**model, "model_config_dir": str(configs), "device": "cpu"})


def demo_vlm(root: str) -> VlmConfig:
    from curation.evaluation.demo_models import random_vlm

    folder = random_vlm(Path(root) / "demo-random-vlm")
    return TypeAdapter(VlmConfig).validate_python({"backend": "transformers", "model": str(folder), "device": "cpu"})


def run_3xcm(config: Evaluate3XCMConfig, progress: Progress | None = None) -> EvaluationResult:
    release = Release.open(config.release)
    model = config.model or demo_encoder(config.demo_models)
    encoder: TextImageEncoder = model.build()
    if config.embedding_cache and model.backend != "embeddings":
        encoder = CachedEncoder(encoder, config.embedding_cache)
    holds_gpu = model.backend in LOCAL_ENCODERS
    with prefect_slot(config.gpu_concurrency_limit if holds_gpu else None):
        evaluation = evaluate_3xcm(
            release,
            encoder,
            query=config.query,
            n_resamples=config.bootstrap_resamples,
            seed=config.seed,
            progress=progress,
        )
    return EvaluationResult(
        benchmark="3xcm",
        release=release,
        model=encoder.identity.model_dump(mode="json"),
        per_query=evaluation.per_query,
        tables=evaluation.tables,
        metrics=evaluation.metrics,
        figures=evaluation.figures,
        settings={"query": config.query, "bootstrap_resamples": config.bootstrap_resamples, "seed": config.seed},
        skipped=evaluation.skipped,
        demo=config.demo,
    )


def run_mixcube(config: EvaluateMixCubeConfig, progress: Progress | None = None) -> EvaluationResult:
    release = Release.open(config.release)
    model = config.model or demo_vlm(config.demo_models)
    judge_config = config.judge or (model if config.model is None else None)  # the demo model judges itself
    vlm = model.build()
    judge = judge_config.build() if judge_config is not None else None
    files = sorted((release.path / "default").glob("*.parquet"))
    if not files:
        raise ValueError(f"{release.path}: the release has no default table")
    total = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    done = 0

    def advance(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress("ask the model", done, total)

    parts = []
    holds_gpu = "transformers" in (model.backend, judge_config.backend if judge_config else None)
    with prefect_slot(config.gpu_concurrency_limit if holds_gpu else None):
        for file in files:  # a batch of rows (with their image bytes) at a time, not the whole release
            for batch in pq.ParquetFile(file).iter_batches(batch_size=config.batch_rows):
                rows = pa.Table.from_batches([batch])
                parts.append(mx.evaluate_images(rows, vlm, judge, progress=advance, workers=config.workers))
    per_image = pa.concat_tables(parts)
    cached = sum(per_image["cached"].to_pylist())
    log.info("%d of %d answers came from the cache", cached, per_image.num_rows)
    # How a run went (retries, cache hits) is not part of the result: a rerun from the cache publishes the same bytes.
    per_image = per_image.drop_columns(["attempts", "cached"])
    skipped = [] if judge is not None else ["Cultural Marker Identification (Food): no judge model configured"]
    figures = {
        "accuracy_bars.png": mx.fig3_bars_png(per_image),
        "swap_difference.png": mx.fig4_heatmap_png(per_image),
    }
    if judge is not None:  # the paper's Fig. 8b: the same bars for Cultural Marker Identification
        figures["marker_accuracy_bars.png"] = mx.fig3_bars_png(per_image, task="marker")
    return EvaluationResult(
        benchmark="mixcube",
        release=release,
        model=vlm.identity.model_dump(mode="json"),
        per_query=per_image,
        tables={"accuracy": mx.accuracy_table(per_image), "swap_drops": mx.swap_drops(per_image)},
        metrics=_with_intervals(mx.summary(per_image), per_image),
        figures=figures,
        settings={"judge": judge.identity.model_dump(mode="json") if judge is not None else None},
        skipped=skipped,
        demo=config.demo,
    )


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
        "marker_accuracy": wilson_interval(sum(judged), len(judged)),
    }
    return summary


def run(config: Evaluate3XCMConfig | EvaluateMixCubeConfig, progress: Progress | None = None) -> EvaluationResult:
    if isinstance(config, Evaluate3XCMConfig):
        return run_3xcm(config, progress)
    return run_mixcube(config, progress)


def evaluate_and_write(config: Evaluate3XCMConfig | EvaluateMixCubeConfig, progress: Progress | None = None) -> Written:
    result = run(config, progress)
    out = config.out or default_out(config.results_root, result.benchmark, result.release, result.model_id)
    return Written(result, out, write_results(result, out))
