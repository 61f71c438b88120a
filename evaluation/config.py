"""What every benchmark's evaluation config shares (`EvaluateCommon`, and `EmbeddingSettings` for those that embed),
the release a config names opened and verified, the models a config names built (the demo ones included), and what
a benchmark's `prepare` hands the runner (`Prepared`). Nothing here names a benchmark: the registry says what each
one reads."""

from __future__ import annotations

import typing
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from data.publish.reader import Release
from data.takedown.older_versions import refuse_taken_down
from evaluation import registry
from evaluation.models.display_name import MAX_DISPLAY_NAME, DisplayName, check_display_name
from evaluation.models.embedding_cache import CachedEncoder
from evaluation.models.encoders import EncoderConfig, ModelIdentity, TextImageEncoder
from evaluation.models.vlm import VlmConfig, VlmIdentity

if TYPE_CHECKING:
    from evaluation.models.embed import Progress
    from evaluation.results.folder import EvaluationResult


class EvaluateCommon(BaseModel):
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
    display_name: DisplayName | None = Field(
        default=None,
        description="A short human name of the model, whatever runs it (any backend, a prediction file, the demo "
        f"model): one line of printable text, at most {MAX_DISPLAY_NAME} characters. metrics.json's "
        "`model.display_name`; never part of the model id, the result folder or a cache key. None: no such key.",
    )

    @model_validator(mode="after")
    def _model_or_demo(self) -> EvaluateCommon:
        predictions = getattr(self, "predictions", None)
        if predictions is not None and (getattr(self, "model", None) is not None or self.demo):
            raise ValueError("predictions replace the model: name no model and no demo model with them")
        if getattr(self, "model", None) is None and predictions is None and not self.demo:
            raise ValueError("name a model (or set demo: true for a tiny random one)")
        return self

    # Every benchmark's config names these (as Literal fields); declared here for the generic code's type checking.
    if TYPE_CHECKING:
        benchmark: str
        task: str


class EmbeddingSettings(BaseModel):
    """What an encoder's evaluation shares: the intervals' bootstrap and the cache of image vectors."""

    bootstrap_resamples: int = Field(default=1000, ge=0, description="Resamples for the 95% intervals (0: none).")
    seed: int = Field(default=0, description="Seed of the bootstrap.")
    embedding_cache: str | None = Field(
        default="./workspace/embedding-cache",
        description="Image vectors cached per model by image sha256 (none: no cache).",
    )


#: Held around the work that runs a model on this machine, with the config's `gpu_concurrency_limit`: the engine's
#: `flows.engine.slots.gpu_slot` in a Prefect run (builds and evaluations sharing a GPU take turns), nothing by
#: default.
GpuSlot = Callable[[str | None], AbstractContextManager[None]]


def no_slot(limit_name: str | None) -> AbstractContextManager[None]:
    """The default `GpuSlot`: holds nothing."""
    return nullcontext()


@dataclass(frozen=True)
class Prepared:
    """A benchmark's evaluation ready to run: its model built (files checked, identity known) and the settings that
    decide its numbers, so the runner can refuse a result path or an existing result before any model works."""

    identity: ModelIdentity | VlmIdentity
    settings: dict[str, Any]
    run: Callable[[Progress | None, GpuSlot], EvaluationResult]


def with_display_name(prepared: Prepared, display_name: str | None) -> Prepared:
    """`prepared` whose identity, and whose result's `model`, carry `display_name` (the config's): a label beside the
    identity the backend built (its model_id, and so the result folder and every cache key, unchanged). None: as it
    is, so a result without a display name is byte for byte what it was before the field existed."""
    if display_name is None:
        return prepared
    identity = prepared.identity.model_copy(update={"display_name": check_display_name(display_name)})

    def run(progress: Progress | None, gpu_slot: GpuSlot) -> EvaluationResult:
        result = prepared.run(progress, gpu_slot)
        # after `name`, as the identity's dump places it (the runner's dict otherwise as it is)
        model = {key: value for key, value in result.model.items() if key != "display_name"}
        at = list(model).index("name") + 1 if "name" in model else len(model)
        items = list(model.items())
        result.model = dict([*items[:at], ("display_name", display_name), *items[at:]])
        return result

    return Prepared(identity, prepared.settings, run)


def open_release(config: EvaluateCommon) -> Release:
    """The release, its manifest read strictly and the tables the benchmark reads hashed against it, its reference
    pack the one it states: numbers are never computed from tables (or a pack) other than those the manifest (cited
    by the results card) lists."""
    release = Release.open(config.release)
    release.verify(registry.get(config.benchmark).reads)
    release.pack()  # its pack against what its manifest and card state: refused before any model runs
    refuse_taken_down(release.path, release.name, "evaluate")  # an older version's images taken down since
    return release


#: The encoder backends' config classes (EncoderConfig is Annotated[A | B | ..., discriminator]).
ENCODER_CONFIGS = typing.get_args(typing.get_args(EncoderConfig)[0])


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


def encoder_config(model: VlmConfig | EncoderConfig, task: str) -> EncoderConfig:
    if not isinstance(model, ENCODER_CONFIGS):  # the config validators make this unreachable from outside
        raise ValueError(f"task {task!r} embeds with an encoder, not the VLM backend {model.backend!r}")
    return typing.cast(EncoderConfig, model)


def vlm_config(model: VlmConfig | EncoderConfig, task: str) -> VlmConfig:
    if isinstance(model, ENCODER_CONFIGS):
        raise ValueError(f"task {task!r} asks a vision-language model, not the encoder backend {model.backend!r}")
    return typing.cast(VlmConfig, model)


def build_encoder(config: EvaluateCommon) -> TextImageEncoder:
    """The configured (or demo) encoder, built: its files checked and its identity known, nothing embedded yet."""
    model = encoder_config(getattr(config, "model", None) or demo_encoder(config.demo_models), config.task)
    encoder: TextImageEncoder = model.build()
    cache = getattr(config, "embedding_cache", None)
    if cache and encoder.needs_image_bytes:  # vectors looked up by id have nothing to cache
        encoder = CachedEncoder(encoder, cache)
    return encoder
