"""Inpainting stage: App. B.1 prompts, per-attempt seeds, the real SDXL inpaint pipeline class on tiny random
components loaded with from_pretrained, and the placeholder backend."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from pydantic import TypeAdapter, ValidationError

import synthesis.inpaint
from data.clients.devices import DeviceError
from data.reference import default_pack
from data.workspace import Storage, Workspace
from synthesis.attempts import AttemptPlan, ResultCache, run_attempts
from synthesis.inpaint import (
    PLACEHOLDER_BASE,
    PLACEHOLDER_TEXT_FILL,
    InpaintConfig,
    InpaintRequest,
    InpaintResult,
    PlaceholderInpaintConfig,
    SdxlInpaintConfig,
    SdxlInpainter,
    _load,
    _Loaded,
    build_inpainter,
    clear_pipeline_cache,
    resolve_model,
    result_for,
)
from synthesis.prompts import attempt_seed, inpainting_prompt
from tests.support.paths import REPO_ROOT
from tests.support.tiny_sdxl import build_tiny_sdxl_inpaint

MIX = default_pack().mixcube()

# Not a multiple of 8 on purpose: the pipeline must run at 72x56 and the result come back at 77x59.
WIDTH, HEIGHT = 77, 59
MASK_BOX = (20, 12, 60, 48)


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_sdxl_inpaint(tmp_path_factory.mktemp("tiny-sdxl") / "tiny-sdxl-inpaint")


def photo(seed: int, size: tuple[int, int] = (WIDTH, HEIGHT)) -> Image.Image:
    """A smooth random picture (a noise image would hide whether the mask region changed)."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, size=(4, 4, 3), dtype=np.uint8)
    return Image.fromarray(small).resize(size, Image.Resampling.BICUBIC)


def box_mask(size: tuple[int, int] = (WIDTH, HEIGHT), box: tuple[int, int, int, int] = MASK_BOX) -> Image.Image:
    mask = Image.new("L", size, 0)
    mask.paste(255, box)
    return mask


def request(seed: int, original: str = "orig-1", ethnicity: str = "EastAsian", attempt: int = 0,
            size: tuple[int, int] = (WIDTH, HEIGHT), image_seed: int = 0) -> InpaintRequest:  # fmt: skip
    return InpaintRequest(
        original_id=original,
        ethnicity=ethnicity,
        attempt=attempt,
        image=photo(image_seed, size),
        mask=box_mask(size, (size[0] // 4, size[1] // 4, 3 * size[0] // 4, 3 * size[1] // 4)),
        prompt=inpainting_prompt(MIX, "Food", ethnicity),
        seed=seed,
    )


def sdxl(folder: Path, **overrides: object) -> SdxlInpaintConfig:
    return SdxlInpaintConfig(model=str(folder), device="cpu", num_inference_steps=2, **overrides)


def pixels(image: Image.Image) -> np.ndarray:
    return np.asarray(image, dtype=np.int16)


def lettering_pixels(image: Image.Image) -> np.ndarray:
    """Near-white pixels: the lettering (anti-aliased), never the magenta base (G=0) or the dark stripes."""
    fill = np.array(PLACEHOLDER_TEXT_FILL)
    return (np.abs(pixels(image) - fill) < 56).all(axis=2)


# -- prompts and seeds ---------------------------------------------------------------------------------------------


def test_prompts_render_every_category_and_ethnicity() -> None:
    ref = default_pack().mixcube()
    seen = set()
    for category in ref.categories:
        for entry in ref.ethnicities:
            by_label = inpainting_prompt(MIX, category, entry.label)
            assert by_label == inpainting_prompt(MIX, category, entry.prompt_name)
            assert by_label == ref.inpainting_prompts[category].replace("{ethnicity}", entry.prompt_name)
            assert by_label.startswith(entry.prompt_name + " person(s) ") and "{" not in by_label
            seen.add(by_label)
    assert len(seen) == len(ref.categories) * len(ref.ethnicities) == 12
    # The paper's own wording (App. B.1), with the spaced prompt name for the EastAsian label.
    assert inpainting_prompt(MIX, "Food", "EastAsian") == "East Asian person(s) with food"
    assert inpainting_prompt(MIX, "Festival", "African") == "African person(s) at an occasion"


def test_prompts_reject_unknown_category_and_ethnicity() -> None:
    with pytest.raises(ValueError, match=r"unknown category 'Sports'.*'Food'"):
        inpainting_prompt(MIX, "Sports", "African")
    with pytest.raises(ValueError, match=r"unknown ethnicity 'Martian'.*'EastAsian' / 'East Asian'"):
        inpainting_prompt(MIX, "Food", "Martian")
    with pytest.raises(ValueError, match="unknown ethnicity"):
        attempt_seed(MIX, 0, "orig-1", "original", 0)  # the original's label is no inpainting target


def test_attempt_seeds_are_distinct_and_stable(tmp_path: Path) -> None:
    seeds = [attempt_seed(MIX, 7, "orig-1", "African", attempt) for attempt in range(50)]
    assert len(set(seeds)) == 50
    assert all(0 <= s < 2**31 for s in seeds)
    assert seeds == [attempt_seed(MIX, 7, "orig-1", "African", attempt) for attempt in range(50)]
    keys = [(7, "orig-1", "African"), (7, "orig-2", "African"), (7, "orig-1", "Caucasian"), (8, "orig-1", "African")]
    assert len({attempt_seed(MIX, *key, 0) for key in keys}) == len(keys)
    assert attempt_seed(MIX, 7, "orig-1", "EastAsian", 3) == attempt_seed(MIX, 7, "orig-1", "East Asian", 3)
    with pytest.raises(ValueError, match="attempt must be >= 0"):
        attempt_seed(MIX, 7, "orig-1", "African", -1)
    # Another process with another hash salt computes the same seeds (no reliance on Python's hash()).
    code = (
        "from data.reference import default_pack; from synthesis.prompts import attempt_seed as s; "
        "m = default_pack().mixcube(); print([s(m, 7, 'orig-1', 'African', a) for a in range(50)])"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout) == seeds


# -- SDXL on tiny random components ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_sdxl_from_pretrained_runs_at_the_original_size(tmp_path: Path, tiny_folder: Path) -> None:
    inpainter = build_inpainter(sdxl(tiny_folder))
    reqs = [request(11, ethnicity="African"), request(12, original="orig-2", ethnicity="SouthAsian", attempt=2)]
    results = inpainter.inpaint(reqs)
    scheduler = json.loads((tiny_folder / "scheduler" / "scheduler_config.json").read_text())["_class_name"]
    assert [(r.original_id, r.ethnicity, r.attempt) for r in results] == [
        (q.original_id, q.ethnicity, q.attempt) for q in reqs
    ]
    for req, res in zip(reqs, results, strict=True):
        assert res.error is None and res.placeholder is False
        assert res.image is not None and res.image.mode == "RGB" and res.image.size == (WIDTH, HEIGHT)
        assert (res.prompt, res.seed) == (req.prompt, req.seed)
        assert res.model_id == inpainter.model_id and res.model_id.startswith("tiny-sdxl-inpaint:sha256-")
        assert str(tmp_path.parent) not in res.model_id  # a folder name, not a machine path
        assert res.scheduler == scheduler == "EulerDiscreteScheduler"
        assert (res.steps, res.guidance) == (2, 7.0)
        assert np.abs(pixels(res.image) - pixels(req.image)).mean() > 1  # something was painted
    # The id follows the folder's content: a rebuilt folder with other weights gets another id.
    other = build_tiny_sdxl_inpaint(tmp_path / "tiny-sdxl-inpaint")
    weights = other / "unet" / "diffusion_pytorch_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")
    assert build_inpainter(sdxl(other)).model_id != inpainter.model_id


@pytest.mark.slow
def test_sdxl_same_seed_same_pixels_other_seed_other_pixels(tmp_path: Path, tiny_folder: Path) -> None:
    first = build_inpainter(sdxl(tiny_folder)).inpaint([request(5)])[0]
    again = build_inpainter(sdxl(tiny_folder)).inpaint([request(5)])[0]
    other = build_inpainter(sdxl(tiny_folder)).inpaint([request(6)])[0]
    assert np.array_equal(pixels(first.image), pixels(again.image))
    assert np.abs(pixels(first.image) - pixels(other.image)).max() > 10


@pytest.mark.slow
def test_sdxl_batches_match_single_calls(tmp_path: Path, tiny_folder: Path) -> None:
    # Two same-size requests share a call with batch_size 2; the third (another size) runs alone.
    reqs = [request(21, image_seed=1), request(22, original="orig-2", image_seed=2), request(23, size=(64, 48))]
    single = build_inpainter(sdxl(tiny_folder, batch_size=1)).inpaint(reqs)
    batched = build_inpainter(sdxl(tiny_folder, batch_size=2)).inpaint(reqs)
    assert [r.image.size for r in batched] == [(WIDTH, HEIGHT), (WIDTH, HEIGHT), (64, 48)]
    assert [r.seed for r in batched] == [21, 22, 23]
    # One generator per request gives each image its own noise; batched matmuls round differently from
    # single ones, so pixels may differ by a level or two, never by content.
    for one, many in zip(single, batched, strict=True):
        assert np.abs(pixels(one.image) - pixels(many.image)).max() <= 2
    assert np.array_equal(pixels(single[2].image), pixels(batched[2].image))  # ran alone both times
    assert np.abs(pixels(batched[0].image) - pixels(batched[1].image)).max() > 10


@pytest.mark.slow
def test_sdxl_bad_request_is_a_result_not_an_exception(tmp_path: Path, tiny_folder: Path) -> None:
    bad = request(31)
    bad.mask = box_mask((WIDTH + 1, HEIGHT))
    tiny = request(32, size=(6, 40))
    results = build_inpainter(sdxl(tiny_folder)).inpaint([bad, request(33), tiny])
    assert results[0].image is None and results[0].error.startswith("ValueError: mask size")
    assert results[1].error is None and results[1].image.size == (WIDTH, HEIGHT)
    assert results[2].image is None and "smaller than 8 px" in results[2].error
    assert all(r.scheduler == "EulerDiscreteScheduler" and not r.placeholder for r in results)


class FlakyPipe:
    """Wraps the real pipeline: batches fail as an out-of-memory would, and a 'boom' prompt fails alone."""

    def __init__(self, pipe: object) -> None:
        self.pipe = pipe
        self.scheduler = pipe.scheduler
        self.batch_sizes: list[int] = []

    def __call__(self, **kwargs: object) -> object:
        self.batch_sizes.append(len(kwargs["prompt"]))
        if len(kwargs["prompt"]) > 1:
            raise RuntimeError("CUDA out of memory (simulated)")
        if "boom" in kwargs["prompt"][0]:
            raise ValueError("boom")
        return self.pipe(**kwargs)


@pytest.mark.slow
def test_sdxl_failed_batch_is_retried_one_by_one(
    tmp_path: Path, tiny_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inpainter = build_inpainter(sdxl(tiny_folder, batch_size=3))
    real = inpainter._pipeline()
    flaky = FlakyPipe(real.pipe)
    monkeypatch.setattr("synthesis.inpaint._load", lambda *args: _Loaded(flaky, real.lock))
    reqs = [request(61), request(62, original="orig-2"), request(63, original="orig-3")]
    reqs[1].prompt = "boom"
    results = inpainter.inpaint(reqs)
    assert flaky.batch_sizes == [3, 1, 1, 1]
    assert [r.error for r in results] == [None, "ValueError: boom", None]
    assert results[1].image is None and results[0].image.size == results[2].image.size == (WIDTH, HEIGHT)
    assert [r.original_id for r in results] == ["orig-1", "orig-2", "orig-3"]


def test_sdxl_setup_errors_name_the_config_field(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"SdxlInpaintConfig\.model\) does not exist"):
        build_inpainter(SdxlInpaintConfig(model=str(tmp_path / "missing"), device="cpu"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"has no model_index\.json"):
        build_inpainter(SdxlInpaintConfig(model=str(tmp_path / "empty"), device="cpu"))
    with pytest.raises(FileNotFoundError, match="local_files_only is set"):
        build_inpainter(SdxlInpaintConfig(model="culturebench-tests/no-such-inpainting-model", device="cpu"))
    with pytest.raises(ValidationError, match="extra"):
        SdxlInpaintConfig(steps=60)
    defaults = SdxlInpaintConfig()
    assert (defaults.num_inference_steps, defaults.guidance_scale) == (60, 7.0)  # App. C.2


def test_sdxl_fp16_on_cpu_falls_back_to_fp32(
    tmp_path: Path, tiny_folder: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="synthesis.inpaint"):
        inpainter = build_inpainter(sdxl(tiny_folder, precision="fp16"))
    assert (inpainter.device, inpainter.precision) == ("cpu", "fp32")
    assert "fp16 needs CUDA" in caplog.text


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised without a GPU")
def test_sdxl_cuda_without_gpu_is_an_error(tmp_path: Path, tiny_folder: Path) -> None:
    with pytest.raises(DeviceError, match=r"SdxlInpaintConfig\.device is 'cuda'"):
        build_inpainter(SdxlInpaintConfig(model=str(tiny_folder), device="cuda"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_sdxl_fp16_on_cuda(tmp_path: Path) -> None:
    folder = build_tiny_sdxl_inpaint(tmp_path / "tiny-fp16", variant="fp16")
    inpainter = build_inpainter(SdxlInpaintConfig(model=str(folder), device="auto", num_inference_steps=2))
    assert (inpainter.device, inpainter.precision) == ("cuda", "fp16")
    started = time.perf_counter()
    inpainter.inpaint([request(41)])  # loads the pipeline and warms up the kernels
    load_and_first = time.perf_counter() - started
    reqs = [request(42 + i, image_seed=i, size=(512, 512)) for i in range(4)]
    torch.cuda.synchronize()
    started = time.perf_counter()
    results = inpainter.inpaint(reqs)
    torch.cuda.synchronize()
    per_image = (time.perf_counter() - started) / len(reqs)
    print(f"\ntiny SDXL inpaint fp16 on {torch.cuda.get_device_name()}: load+first call {load_and_first:.2f} s, "
          f"512x512 x2 steps {per_image * 1000:.1f} ms/image")  # fmt: skip
    assert inpainter._pipeline().pipe.unet.dtype == torch.float16
    for res in results:
        assert res.error is None and res.image.size == (512, 512)
        assert np.asarray(res.image).std() > 1  # fp16 overflow would decode to a flat (NaN -> black) image
    # A folder without the fp16 files still loads in fp16 (full weights cast to half) and runs.
    plain = build_tiny_sdxl_inpaint(tmp_path / "tiny-plain")
    plain_inpainter = build_inpainter(SdxlInpaintConfig(model=str(plain), num_inference_steps=2))
    assert plain_inpainter.inpaint([request(43)])[0].error is None
    assert plain_inpainter._pipeline().pipe.unet.dtype == torch.float16


@pytest.mark.slow
def test_sdxl_fp16_weights_load_with_and_without_the_variant(
    tmp_path: Path, tiny_folder: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The fp16 loading path (variant files, or the fallback to full weights), checked on CPU without running it:
    resolve_device keeps CPU runs in fp32, so only a GPU run reaches it otherwise."""
    variant_folder = build_tiny_sdxl_inpaint(tmp_path / "tiny-fp16", variant="fp16")
    assert (variant_folder / "unet" / "diffusion_pytorch_model.fp16.safetensors").is_file()
    for folder in (variant_folder, tiny_folder):
        config = SdxlInpaintConfig(model=str(folder), device="cpu")
        with caplog.at_level(logging.WARNING, logger="synthesis.inpaint"):
            pipe = _load(resolve_model(config), config, "cpu", "fp16").pipe
        assert {pipe.unet.dtype, pipe.vae.dtype, pipe.text_encoder.dtype, pipe.text_encoder_2.dtype} == {torch.float16}
    assert caplog.text.count("variant") == 1 and "tiny-sdxl-inpaint" in caplog.text  # the fallback, named
    clear_pipeline_cache()


# -- placeholder ------------------------------------------------------------------------------------------------------


def test_placeholder_marks_results_and_changes_only_the_mask(tmp_path: Path) -> None:
    config = TypeAdapter(InpaintConfig).validate_python({"backend": "placeholder"})
    assert isinstance(config, PlaceholderInpaintConfig)
    inpainter = build_inpainter(config)
    reqs = [request(51, size=(240, 180)), request(52, ethnicity="Caucasian", attempt=1, size=(240, 180))]
    bad = request(53)
    bad.mask = box_mask((10, 10))
    results = inpainter.inpaint([*reqs, bad])
    assert inpainter.model_id == "placeholder"
    assert all(r.placeholder and r.model_id == "placeholder" for r in results)
    assert results[2].image is None and results[2].error.startswith("ValueError")
    for req, res in zip(reqs, results[:2], strict=True):
        assert res.error is None and res.image.size == req.image.size
        assert (res.prompt, res.seed) == (req.prompt, req.seed)
        inside = np.asarray(req.mask) > 0
        before, after = pixels(req.image), pixels(res.image)
        assert np.array_equal(before[~inside], after[~inside])  # outside the mask: untouched
        assert (np.abs(before - after).sum(axis=2)[inside] > 0).mean() > 0.95
        # Visibly marked: magenta fill and the white PLACEHOLDER lettering, both inside the mask only.
        magenta = (after == PLACEHOLDER_BASE).all(axis=2)
        lettering = lettering_pixels(res.image)
        assert magenta[inside].mean() > 0.2 and lettering[inside].sum() >= 100
    assert np.abs(pixels(results[0].image) - pixels(results[1].image)).max() > 0  # seeds give distinct fills


def test_placeholder_lettering_scales_with_the_mask(tmp_path: Path) -> None:
    inpainter = build_inpainter(PlaceholderInpaintConfig())
    big = InpaintRequest("o", "African", 0, photo(1, (400, 300)), box_mask((400, 300), (50, 50, 350, 250)), "p", 1)
    small = InpaintRequest("o", "African", 0, photo(1, (400, 300)), box_mask((400, 300), (180, 140, 240, 170)), "p", 1)
    lettering = [int(lettering_pixels(r.image).sum()) for r in inpainter.inpaint([big, small])]
    assert lettering[0] > 4 * lettering[1] > 0


# -- the result cache --------------------------------------------------------------------------------------------------

PLAN = AttemptPlan("orig-1", "African", 1, "a prompt", 7, "a" * 64, "b" * 64)
# The placeholder's cache key for PLAN before the effective device and dtype joined the SDXL key: a placeholder has
# neither, so its key (and every cached demo attempt) stays as it was.
PLACEHOLDER_KEY = "2824be6301941b7ee90bbc02a70726ce390222fceb0b2fce55cce44b33e425c2"


def model_folder(tmp_path: Path) -> Path:
    """Enough of a pipeline folder for the inpainter to be built (its weights load only on the first call)."""
    folder = tmp_path / "sdxl-folder"
    folder.mkdir(exist_ok=True)
    (folder / "model_index.json").write_text("{}")
    return folder


def on(monkeypatch: pytest.MonkeyPatch, device: str, precision: str) -> None:
    """Make resolve_device answer as it would on that machine (no GPU here)."""
    monkeypatch.setattr(synthesis.inpaint, "resolve_device", lambda *args, **kwargs: (device, precision))


def test_cache_key_holds_the_effective_device_and_dtype(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = SdxlInpaintConfig(model=str(model_folder(tmp_path)))  # device auto, precision auto
    storage = Storage(str(tmp_path / "ws"))
    paths = {}
    for device, precision in [("cpu", "fp32"), ("cuda", "fp16"), ("cuda", "fp32")]:
        on(monkeypatch, device, precision)
        paths[device, precision] = ResultCache(storage, "cache", config, build_inpainter(config))._path(PLAN)
    assert len(set(paths.values())) == 3, paths
    # What decides the pixels, not how the config spelled it: asking for cuda/fp16 is auto on a GPU machine.
    on(monkeypatch, "cuda", "fp16")
    explicit = config.model_copy(update={"device": "cuda", "precision": "fp16", "batch_size": 4})
    assert ResultCache(storage, "cache", explicit, build_inpainter(explicit))._path(PLAN) == paths["cuda", "fp16"]
    placeholder = PlaceholderInpaintConfig()
    assert ResultCache(storage, "cache", placeholder, build_inpainter(placeholder))._path(PLAN) == (
        f"cache/{PLACEHOLDER_KEY[:2]}/{PLACEHOLDER_KEY}.json"
    )


def test_a_result_cached_on_cpu_fp32_is_not_served_on_cuda_fp16(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = Workspace(str(tmp_path / "ws"), "mixcube-cache")
    size = (64, 48)
    original, mask = io.BytesIO(), io.BytesIO()
    photo(0, size).save(original, format="PNG")
    box_mask(size, (16, 12, 48, 36)).save(mask, format="PNG")
    plan = AttemptPlan("orig-1", "African", 1, "p", 7, ws.blobs.put(original.getvalue()), ws.blobs.put(mask.getvalue()))
    drawn: list[tuple[str, str]] = []

    def fake_inpaint(self: SdxlInpainter, requests: list[InpaintRequest]) -> list[InpaintResult]:
        drawn.append((self.device, self.precision))
        fill = (0, 0, 255) if self.precision == "fp16" else (255, 0, 0)  # fp16 pixels differ from fp32 ones
        image = Image.new("RGB", size, fill)
        return [result_for(r, image, self.model_id, "Euler", 2, 7.0, False, None) for r in requests]

    monkeypatch.setattr(SdxlInpainter, "inpaint", fake_inpaint)
    config = SdxlInpaintConfig(model=str(model_folder(tmp_path)))

    def run(device: str, precision: str) -> dict:
        on(monkeypatch, device, precision)
        inpainter = build_inpainter(config)
        cache = ResultCache(ws.storage, ws.file_path("inpaint_cache"), config, inpainter)
        return run_attempts(inpainter, [plan], ws.blobs.get, ws.blobs.put, cache).to_pylist()[0]

    cpu, cuda, again = run("cpu", "fp32"), run("cuda", "fp16"), run("cuda", "fp16")
    assert drawn == [("cpu", "fp32"), ("cuda", "fp16")]  # the third call is served from the cache
    assert cuda["sha256"] != cpu["sha256"] and again["sha256"] == cuda["sha256"]
