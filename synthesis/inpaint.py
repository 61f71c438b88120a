"""Inpainting stage: replace the masked person in an original with one of a target ethnicity (MixCuBe §3, App. B/C).

Backends:
- `sdxl` (production): diffusers' `StableDiffusionXLInpaintPipeline`, loaded with `from_pretrained` from a local
  folder or the local Hugging Face cache; fp16 on CUDA. 60 steps and guidance 7.0 as in App. C.2.
- `placeholder` (embedded default): no model. It paints the masked region with a hatched colour and the word
  PLACEHOLDER, and marks every result `placeholder=True`, so the pipeline runs offline and its output can never
  pass for a real synthesis.

Rules:
- Each request carries its own seed (see `synthesis.prompts.attempt_seed`); one `torch.Generator` per request, also
  inside a batch, so a batched image matches the unbatched one up to kernel rounding.
- The pipeline runs at the original's size rounded down to a multiple of 8 (it otherwise defaults to 1024x1024),
  and the output is resized back to the original's size.
- A bad request or a failed pipeline call is a result with `error` set, never an exception that loses the batch.
  A wrong setup (model folder missing, CUDA asked but absent) raises when the inpainter is built.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

import numpy as np
from PIL import Image, ImageDraw, ImageFont
from pydantic import Field, JsonValue

from data.clients.devices import resolve_device
from data.clients.model_ids import folder_sha256
from data.row_errors import error_text
from data.stage import BackendConfig, require

log = logging.getLogger(__name__)

PLACEHOLDER_TEXT = "PLACEHOLDER"
PLACEHOLDER_MODEL_ID = "placeholder"
PLACEHOLDER_BASE = (255, 0, 255)  # magenta: no photo has a flat region of it
PLACEHOLDER_TEXT_FILL = (255, 255, 255)
PLACEHOLDER_TEXT_STROKE = (0, 0, 0)
DTYPES = {"fp16": "float16", "fp32": "float32"}  # effective precision -> the torch dtype the pipeline runs in
SIZE_MULTIPLE = 8  # the SDXL pipeline's check_inputs needs height and width divisible by 8
MAX_ERROR_CHARS = 500
_error_text = functools.partial(error_text, limit=MAX_ERROR_CHARS)


@dataclass
class InpaintRequest:
    """One attempt at one (original, ethnicity). `mask` is white (255) where the person is repainted."""

    original_id: str
    ethnicity: str
    attempt: int
    image: Image.Image
    mask: Image.Image
    prompt: str
    seed: int
    negative_prompt: str | None = None  # None: the config's negative_prompt


@dataclass
class InpaintResult:
    """The outcome of one request; `image` is None exactly when `error` is set."""

    original_id: str
    ethnicity: str
    attempt: int
    image: Image.Image | None  # RGB, the original's size
    prompt: str
    seed: int
    model_id: str
    scheduler: str  # the scheduler's class name, e.g. EulerDiscreteScheduler
    steps: int
    guidance: float
    placeholder: bool
    error: str | None = None  # "ErrorClass: detail"
    seconds: float = field(default=0.0)  # wall time of the pipeline call that produced it (shared by a batch)


class SdxlInpaintConfig(BackendConfig["Inpainter"]):
    """diffusers StableDiffusionXLInpaintPipeline; the weights come from a local folder or the local hub cache."""

    backend: Literal["sdxl"] = "sdxl"
    model: str = Field(
        default="diffusers/stable-diffusion-xl-1.0-inpainting-0.1",
        description="A Hugging Face hub id (looked up in the local cache) or a local folder saved with "
        "save_pretrained (holding model_index.json).",
    )
    local_files_only: bool = Field(
        default=True, description="Never download: a hub id must already be in the local cache."
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        default="auto", description="auto: CUDA when a GPU is usable, else CPU. cuda without a GPU is an error."
    )
    precision: Literal["auto", "fp16", "fp32"] = Field(
        default="auto",
        description="auto: fp16 on CUDA, fp32 on CPU. fp16 on CPU falls back to fp32 with a warning.",
    )
    variant: str | None = Field(
        default="fp16",
        description="Weights variant loaded in fp16 (`*.fp16.safetensors`); when the folder lacks it, the full "
        "weights are loaded and cast. Ignored in fp32.",
    )
    num_inference_steps: int = Field(default=60, ge=1, description="MixCuBe App. C.2: 60 diffusion steps.")
    guidance_scale: float = Field(default=7.0, ge=0, description="MixCuBe App. C.2: guidance scale 7.0.")
    strength: float = Field(
        default=0.99,
        gt=0,
        le=1,
        description="Noise added to the masked region; the SDXL inpainting model card advises just below 1. The "
        "scheduler runs int(num_inference_steps * strength) of the steps (59 of 60).",
    )
    batch_size: int = Field(
        default=1, ge=1, description="Requests per pipeline call; only same-size images share a call."
    )
    negative_prompt: str | None = Field(default=None, description="Used for requests that set none.")

    def build(self) -> SdxlInpainter:
        """Checks the model location and the device now; the pipeline loads on first use."""
        return SdxlInpainter(self)


class PlaceholderInpaintConfig(BackendConfig["Inpainter"]):
    """Offline stand-in: a hatched, labelled fill of the mask. Never a synthesis; every result says placeholder."""

    backend: Literal["placeholder"] = "placeholder"

    def build(self) -> PlaceholderInpainter:
        return PlaceholderInpainter(self)


InpaintConfig = Annotated[SdxlInpaintConfig | PlaceholderInpaintConfig, Field(discriminator="backend")]


class Inpainter(Protocol):
    name: str
    model_id: str  # recorded in every result row

    @property
    def runtime(self) -> dict[str, str]:
        """The effective device type and dtype, where the backend has them: fp16 CUDA kernels do not draw the
        pixels fp32 CPU ones do, so they are part of what decides a result. Empty for a backend without a device."""
        ...

    def inpaint(self, requests: Sequence[InpaintRequest]) -> list[InpaintResult]:
        """One result per request, in request order."""
        ...


def build_inpainter(config: SdxlInpaintConfig | PlaceholderInpaintConfig) -> Inpainter:
    """`config.build()`: the inpainter, with model location and device checked now, the model loaded on first use."""
    return config.build()


# How the config asks for a device and a precision, and how many requests share a call, do not decide the pixels;
# what `device: auto, precision: auto` resolved to on this machine does (`Inpainter.runtime`).
NOT_IN_CACHE_KEY = {"batch_size", "device", "precision"}


def cache_settings(
    config: InpaintConfig, inpainter: Inpainter
) -> tuple[str, dict[str, JsonValue]] | tuple[str, dict[str, JsonValue], dict[str, str]]:
    """Everything of the inpainter that decides a result's pixels, for the result cache's key: the model, the
    settings, and the effective device type and dtype. A backend without a device (the placeholder) keys as it
    always did."""
    runtime = inpainter.runtime
    settings = (inpainter.model_id, config.model_dump(mode="json", exclude=NOT_IN_CACHE_KEY))
    return (*settings, runtime) if runtime else settings


# -- shared request handling ---------------------------------------------------------------------------------------


def _prepared(request: InpaintRequest) -> tuple[Image.Image, Image.Image]:
    """The image as RGB and the mask as L, checked to match; a ValueError says what is wrong."""
    image = request.image if request.image.mode == "RGB" else request.image.convert("RGB")
    mask = request.mask if request.mask.mode == "L" else request.mask.convert("L")
    if mask.size != image.size:
        raise ValueError(f"mask size {mask.size} != image size {image.size}")
    if min(image.size) < SIZE_MULTIPLE:
        raise ValueError(f"image {image.size} is smaller than {SIZE_MULTIPLE} px on a side")
    return image, mask


def _failed(
    request: InpaintRequest, model_id: str, scheduler: str, steps: int, guidance: float, error: str, placeholder: bool
) -> InpaintResult:
    return result_for(request, None, model_id, scheduler, steps, guidance, placeholder, error)


def result_for(
    request: InpaintRequest,
    image: Image.Image | None,
    model_id: str,
    scheduler: str,
    steps: int,
    guidance: float,
    placeholder: bool,
    error: str | None,
    seconds: float = 0.0,
) -> InpaintResult:
    """The result of a request: what was asked (ids, prompt, seed) and how it was answered."""
    return InpaintResult(
        original_id=request.original_id,
        ethnicity=request.ethnicity,
        attempt=request.attempt,
        image=image,
        prompt=request.prompt,
        seed=request.seed,
        model_id=model_id,
        scheduler=scheduler,
        steps=steps,
        guidance=guidance,
        placeholder=placeholder,
        error=error,
        seconds=seconds,
    )


# -- placeholder -----------------------------------------------------------------------------------------------------


def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=size)  # Pillow's bundled scalable font (needs FreeType)
    except (ImportError, OSError):
        return ImageFont.load_default()


def placeholder_fill(image: Image.Image, mask: Image.Image, seed: int) -> Image.Image:
    """`image` with the masked region replaced by magenta hatching and the word PLACEHOLDER; pixels where the mask
    is 0 are untouched. The stripe colour follows the seed, so attempts stay distinguishable downstream."""
    width, height = image.size
    rng = np.random.default_rng(seed)
    stripe = tuple(int(v) for v in rng.integers(0, 160, size=3))  # dark enough to stand out on magenta
    overlay = Image.new("RGB", image.size, PLACEHOLDER_BASE)
    draw = ImageDraw.Draw(overlay)
    spacing = max(6, min(width, height) // 12)
    for offset in range(-height, width, spacing):  # diagonal hatching over the whole frame
        draw.line([(offset, 0), (offset + height, height)], fill=stripe, width=max(1, spacing // 3))
    box = mask.point(lambda v: 255 if v else 0).getbbox()
    if box is not None:
        left, top, right, bottom = box
        # As large as the mask's box allows (90% of its width, half its height).
        size = max(6, (bottom - top) // 2)
        length = draw.textlength(PLACEHOLDER_TEXT, font=_font(size))
        if length > 0.9 * (right - left):
            size = max(6, int(size * 0.9 * (right - left) / length))
        draw.text(
            ((left + right) / 2, (top + bottom) / 2),
            PLACEHOLDER_TEXT,
            fill=PLACEHOLDER_TEXT_FILL,
            font=_font(size),
            anchor="mm",
            # An outline keeps large lettering readable on the stripes; on small lettering it would eat the fill.
            stroke_width=size // 12,
            stroke_fill=PLACEHOLDER_TEXT_STROKE,
        )
    return Image.composite(overlay, image, mask)


class PlaceholderInpainter:
    name = "placeholder"
    model_id = PLACEHOLDER_MODEL_ID

    def __init__(self, config: PlaceholderInpaintConfig) -> None:
        self.config = config

    @property
    def runtime(self) -> dict[str, str]:
        return {}  # no model, no device: the same pixels everywhere

    def inpaint(self, requests: Sequence[InpaintRequest]) -> list[InpaintResult]:
        results = []
        for request in requests:
            started = time.perf_counter()
            try:
                image, mask = _prepared(request)
                filled = placeholder_fill(image, mask, request.seed)
            except Exception as exc:  # a failure is a result row, never a lost batch
                results.append(_failed(request, self.model_id, self.name, 0, 0.0, _error_text(exc), True))
                continue
            seconds = time.perf_counter() - started
            results.append(result_for(request, filled, self.model_id, self.name, 0, 0.0, True, None, seconds))
        return results


# -- SDXL --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ResolvedModel:
    """`model` checked and named before anything is loaded."""

    path: str  # the folder from_pretrained loads (a local folder or the hub cache's snapshot)
    model_id: str  # what results record: never a machine path


def _looks_like_path(model: str) -> bool:
    """Hub ids are `name` or `org/name`; anything else that names a location is a path."""
    return model.startswith((".", "/", "~")) or "\\" in model or model.count("/") > 1


def resolve_model(config: SdxlInpaintConfig) -> ResolvedModel:
    """A folder holding a diffusers pipeline, or a clear error naming SdxlInpaintConfig.model."""
    path = Path(config.model).expanduser()
    if path.is_dir():
        if not (path / "model_index.json").is_file():
            raise FileNotFoundError(
                f"inpainting: folder {config.model!r} (SdxlInpaintConfig.model) has no model_index.json; point it "
                "at a folder written by save_pretrained or downloaded from the hub."
            )
        # The folder's name, never the machine path: the id goes into published tables.
        return ResolvedModel(str(path.resolve()), f"{path.resolve().name}:sha256-{folder_sha256(path)[:12]}")
    if _looks_like_path(config.model):
        raise FileNotFoundError(
            f"inpainting: model folder {config.model!r} (SdxlInpaintConfig.model) does not exist. Point "
            "SdxlInpaintConfig.model at a folder holding the pipeline (e.g. `huggingface-cli download "
            "diffusers/stable-diffusion-xl-1.0-inpainting-0.1 --local-dir <folder>`) or at a cached hub id."
        )
    if not config.local_files_only:
        return ResolvedModel(config.model, config.model)  # diffusers downloads it on load
    hub = require("huggingface_hub", "synthesis")
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        snapshot = Path(hub.snapshot_download(config.model, local_files_only=True))
    except (LocalEntryNotFoundError, HFValidationError) as exc:
        raise FileNotFoundError(
            f"inpainting: {config.model!r} (SdxlInpaintConfig.model) is neither a local folder nor in the Hugging "
            "Face cache, and SdxlInpaintConfig.local_files_only is set. Download it first (`huggingface-cli "
            "download <id>`), point model at a folder, or set local_files_only: false."
        ) from exc
    # The cache's snapshot folder is named by the commit: it pins the weights.
    return ResolvedModel(str(snapshot), f"{config.model}@{snapshot.name[:12]}")


class _DropEmptyFp32Notice(logging.Filter):
    """diffusers warns on every VAE up/down-cast inside the inpaint pipeline that modules 'should be kept in
    float32: []' (an empty list: nothing to keep); four lines per call would bury real warnings."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "should be kept in float32: []" not in record.getMessage()


_notice_filter = _DropEmptyFp32Notice()


@dataclass
class _Loaded:
    pipe: Any
    lock: threading.Lock  # a pipeline is not thread-safe: set_timesteps mutates its scheduler


_pipelines: dict[tuple[str, str, str, str, str | None], _Loaded] = {}
_pipelines_lock = threading.Lock()


def _load(model: ResolvedModel, config: SdxlInpaintConfig, device: str, precision: str) -> _Loaded:
    """One pipeline per (weights, device, precision, variant) in this process."""
    key = (model.path, model.model_id, device, precision, config.variant)
    with _pipelines_lock:
        if key not in _pipelines:
            torch = require("torch", "synthesis")
            diffusers = require("diffusers", "synthesis")
            logging.getLogger("diffusers.models.modeling_utils").addFilter(_notice_filter)
            dtype = getattr(torch, DTYPES[precision])
            variant = config.variant if precision == "fp16" else None
            kwargs = {"torch_dtype": dtype, "local_files_only": config.local_files_only}
            cls = diffusers.StableDiffusionXLInpaintPipeline
            with warnings.catch_warnings():
                # diffusers >= 0.36 renames torch_dtype to dtype; torch_dtype works across the supported range.
                warnings.filterwarnings("ignore", message=".*torch_dtype.*deprecated", category=FutureWarning)
                try:
                    pipe = cls.from_pretrained(model.path, variant=variant, **kwargs)
                except ValueError as exc:
                    if variant is None or "variant" not in str(exc):
                        raise
                    # Same values either way: the fp16 files are the full weights cast to half.
                    log.warning(
                        "inpainting: %s has no %r variant; loading full weights as fp16", model.model_id, variant
                    )
                    pipe = cls.from_pretrained(model.path, **kwargs)
            pipe = pipe.to(device)
            pipe.set_progress_bar_config(disable=True)
            _pipelines[key] = _Loaded(pipe, threading.Lock())
        return _pipelines[key]


def clear_pipeline_cache() -> None:
    """Drop the loaded pipelines (frees GPU memory once nothing else holds them)."""
    with _pipelines_lock:
        _pipelines.clear()


_Item = tuple[int, Image.Image, Image.Image, str | None]  # request index, RGB image, L mask, negative prompt


def _batches(items: list[_Item], size: int) -> list[list[_Item]]:
    """Up to `size` requests per pipeline call, grouped in first-seen order: same image size, and all or none with
    a negative prompt (the pipeline takes a list of strings or None, not a mix)."""
    groups: dict[tuple[tuple[int, int], bool], list[_Item]] = {}
    for item in items:
        groups.setdefault((item[1].size, item[3] is None), []).append(item)
    return [group[i : i + size] for group in groups.values() for i in range(0, len(group), size)]


class SdxlInpainter:
    name = "sdxl"

    def __init__(self, config: SdxlInpaintConfig) -> None:
        self.config = config
        self.model = resolve_model(config)
        self.device, self.precision = resolve_device(
            config.device, config.precision, owner="inpainting: SdxlInpaintConfig", extra="synthesis"
        )
        self.model_id = self.model.model_id
        self._scheduler: str | None = None

    @property
    def runtime(self) -> dict[str, str]:
        # The device type, not its index: cuda:0 and cuda:1 run the same kernels.
        return {"device": self.device.split(":")[0], "dtype": DTYPES[self.precision]}

    def _pipeline(self) -> _Loaded:
        loaded = _load(self.model, self.config, self.device, self.precision)
        self._scheduler = loaded.pipe.scheduler.__class__.__name__
        return loaded

    @property
    def scheduler(self) -> str:
        """The scheduler's class name (loads the pipeline on first use)."""
        if self._scheduler is None:
            self._pipeline()
        assert self._scheduler is not None
        return self._scheduler

    def _result(
        self, request: InpaintRequest, image: Image.Image | None, error: str | None, seconds: float
    ) -> InpaintResult:
        # The scheduler is "" only when every request was rejected before the pipeline loaded.
        scheduler = self._scheduler or ""
        steps, guidance = self.config.num_inference_steps, self.config.guidance_scale
        return result_for(request, image, self.model_id, scheduler, steps, guidance, False, error, seconds)

    def _call(self, loaded: _Loaded, batch: list[_Item], requests: Sequence[InpaintRequest]) -> list[Image.Image]:
        torch = require("torch", "synthesis")
        width, height = batch[0][1].size
        negatives = [item[3] for item in batch]
        out = loaded.pipe(
            prompt=[requests[i].prompt for i, *_ in batch],
            negative_prompt=None if negatives[0] is None else negatives,
            image=[item[1] for item in batch],
            mask_image=[item[2] for item in batch],
            # Explicit size: the pipeline otherwise runs at unet.sample_size * vae_scale_factor.
            height=height - height % SIZE_MULTIPLE,
            width=width - width % SIZE_MULTIPLE,
            num_inference_steps=self.config.num_inference_steps,
            guidance_scale=self.config.guidance_scale,
            strength=self.config.strength,
            # One generator per request: its seed alone decides its noise, batched or not.
            generator=[torch.Generator(self.device).manual_seed(requests[i].seed) for i, *_ in batch],
            output_type="pil",
        )
        images = []
        for image in out.images:
            image = image.convert("RGB")
            if image.size != (width, height):
                image = image.resize((width, height), Image.Resampling.LANCZOS)
            images.append(image)
        return images

    def _run(
        self,
        loaded: _Loaded,
        batch: list[_Item],
        requests: Sequence[InpaintRequest],
        results: list[InpaintResult | None],
    ) -> None:
        started = time.perf_counter()
        try:
            with loaded.lock:
                images = self._call(loaded, batch, requests)
        except Exception as exc:  # a failure is a result row, never a lost batch
            if self.device == "cuda":
                require("torch", "synthesis").cuda.empty_cache()  # an OOM leaves the allocator's cache full
            if len(batch) > 1:
                log.warning("inpainting: a batch of %d failed (%s); retrying one by one", len(batch), _error_text(exc))
                for item in batch:
                    self._run(loaded, [item], requests, results)
                return
            results[batch[0][0]] = self._result(requests[batch[0][0]], None, _error_text(exc), 0.0)
            return
        seconds = time.perf_counter() - started
        for (index, *_), image in zip(batch, images, strict=True):
            results[index] = self._result(requests[index], image, None, seconds)

    def inpaint(self, requests: Sequence[InpaintRequest]) -> list[InpaintResult]:
        results: list[InpaintResult | None] = [None] * len(requests)
        items: list[_Item] = []
        rejected: list[tuple[int, str]] = []
        for index, request in enumerate(requests):
            try:
                image, mask = _prepared(request)
            except Exception as exc:  # a bad request is a result row
                rejected.append((index, _error_text(exc)))
                continue
            negative = request.negative_prompt if request.negative_prompt is not None else self.config.negative_prompt
            items.append((index, image, mask, negative))
        if items:
            loaded = self._pipeline()
            for batch in _batches(items, self.config.batch_size):
                self._run(loaded, batch, requests, results)
        for index, error in rejected:
            results[index] = self._result(requests[index], None, error, 0.0)
        complete = [r for r in results if r is not None]
        assert len(complete) == len(results)  # every request has its result
        return complete
