"""GPU throughput of the model stages at their real sizes, with random weights (issue 61).

    python3 perf/gpu.py --tiny                                  # CPU smoke run at tiny sizes (tests/perf)
    python3 perf/gpu.py --out gpu.jsonl --models-dir /tmp/models --budget-s 300
    python3 perf/gpu.py --only sdxl_compile,llava --budget-s 240  # the second device call

Model hubs cannot be reached, so every model is built at its published architecture with random weights: timing
does not depend on the weights' values. Sizes (`--tiny` shrinks each to a few layers):

- SDXL inpainting: the UNet of diffusers/stable-diffusion-xl-1.0-inpainting-0.1 (9 input channels, 2.6B
  parameters), CLIP ViT-L/14 and OpenCLIP bigG/14 text encoders, the SDXL VAE; MixCuBe App. C.2: 60 steps,
  guidance 7 (two UNet passes per step, run as one call at twice the batch), 1024 x 1024.
- SAM ViT-H (segment_anything's `vit_h`), open_clip ViT-L/14 and ViT-B/32 image towers, BGE-M3 (XLM-R large),
  LLaVA-1.5-7B (CLIP ViT-L/14-336 + Llama 7B).

Each measurement prints one JSON line (`"measure": ...`), and `--out` appends the same lines to a file. A section that
fails prints a line with its `error` and the rest go on; `--budget-s` stops starting new measurements once spent,
so a device call ends inside its limit with what it has. MFU is the UNet's counted FLOPs
(`torch.utils.flop_counter.FlopCounterMode`) per second against the dense bf16 peak of `--peak-tflops` (H100/H200
SXM: 989 TFLOP/s, the datasheet's; KINDS.md measured 769-798 on an 8192^3 bf16 matmul on the H200 lent here).
`--models-dir` saves the random SDXL (fp16 variant), SAM ViT-H and open_clip ViT-B/32 there, as the pipeline's
backends load them (perf/gpu_pipeline.py runs the MixCuBe stages on them).
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch
from PIL import Image

Record = dict[str, Any]
SECTIONS = ("sdxl", "open_clip", "sam", "bge_m3", "sdxl_compile", "llava")

# diffusers/stable-diffusion-xl-1.0-inpainting-0.1, unet/config.json (the SDXL base UNet with 9 input channels:
# latents, the masked image's latents and the mask).
SDXL_UNET = dict(
    act_fn="silu",
    addition_embed_type="text_time",
    addition_embed_type_num_heads=64,
    addition_time_embed_dim=256,
    attention_head_dim=[5, 10, 20],
    block_out_channels=[320, 640, 1280],
    cross_attention_dim=2048,
    down_block_types=["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"],
    in_channels=9,
    layers_per_block=2,
    mid_block_type="UNetMidBlock2DCrossAttn",
    norm_num_groups=32,
    out_channels=4,
    projection_class_embeddings_input_dim=2816,  # 6 time ids x 256 + text_encoder_2's 1280 projection
    sample_size=128,
    transformer_layers_per_block=[1, 2, 10],
    up_block_types=["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"],
    use_linear_projection=True,
)
TINY_UNET = {
    **SDXL_UNET,
    "attention_head_dim": [2, 4],
    "block_out_channels": [32, 64],
    "cross_attention_dim": 64,
    "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D"],
    "up_block_types": ["CrossAttnUpBlock2D", "UpBlock2D"],
    "addition_time_embed_dim": 8,
    "addition_embed_type_num_heads": 2,
    "transformer_layers_per_block": [1, 2],
    "projection_class_embeddings_input_dim": 80,  # 6 x 8 + 32
    "sample_size": 32,
}
# The SDXL VAE (vae/config.json): force_upcast, so fp16 runs decode in fp32 as the published model does.
SDXL_VAE = dict(
    act_fn="silu",
    block_out_channels=[128, 256, 512, 512],
    down_block_types=["DownEncoderBlock2D"] * 4,
    up_block_types=["UpDecoderBlock2D"] * 4,
    in_channels=3,
    out_channels=3,
    latent_channels=4,
    layers_per_block=2,
    norm_num_groups=32,
    sample_size=1024,
    scaling_factor=0.13025,
    force_upcast=True,
)
TINY_VAE = {**SDXL_VAE, "block_out_channels": [32, 64], "down_block_types": ["DownEncoderBlock2D"] * 2,
            "up_block_types": ["UpDecoderBlock2D"] * 2, "sample_size": 128}  # fmt: skip
# text_encoder (CLIP ViT-L/14) and text_encoder_2 (OpenCLIP ViT-bigG/14) config.json.
TEXT_ENCODERS = (
    dict(hidden_size=768, intermediate_size=3072, num_attention_heads=12, num_hidden_layers=12,
         hidden_act="quick_gelu", projection_dim=768),
    dict(hidden_size=1280, intermediate_size=5120, num_attention_heads=20, num_hidden_layers=32,
         hidden_act="gelu", projection_dim=1280),
)  # fmt: skip
TINY_TEXT = (
    dict(hidden_size=32, intermediate_size=37, num_attention_heads=4, num_hidden_layers=2, hidden_act="gelu",
         projection_dim=32),
) * 2  # fmt: skip


class Bench:
    """Emits records and keeps the time budget."""

    def __init__(self, out: Path | None, budget_s: float, tiny: bool, peak_tflops: float) -> None:
        self.out, self.deadline, self.tiny = out, time.monotonic() + budget_s, tiny
        self.peak = peak_tflops * 1e12
        self.device = "cuda" if torch.cuda.is_available() and not tiny else "cpu"
        self.gpu = torch.cuda.get_device_name() if self.device == "cuda" else "cpu"

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def emit(self, measure: str, **fields: Any) -> None:
        line = json.dumps({"measure": measure, "device": self.gpu, **fields}, default=str)
        print(line, flush=True)
        if self.out:
            with self.out.open("a") as f:
                f.write(line + "\n")

    def sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def times(self, fn: Callable[[], Any], reps: int, warmup: int = 1) -> list[float]:
        for _ in range(warmup):
            fn()
        self.sync()
        out = []
        for _ in range(reps):
            started = time.perf_counter()
            fn()
            self.sync()
            out.append(time.perf_counter() - started)
        return out

    def peak_gib(self) -> float | None:
        return round(torch.cuda.max_memory_allocated() / 2**30, 2) if self.device == "cuda" else None

    def reset_peak(self) -> None:
        if self.device == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def counted_flops(fn: Callable[[], Any]) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


# -- SDXL inpainting ----------------------------------------------------------------------------------------------


def build_sdxl(bench: Bench, dtype: torch.dtype) -> Any:
    """The inpainting pipeline at the published sizes, random weights, built straight on the device."""
    from diffusers import AutoencoderKL, EulerDiscreteScheduler, StableDiffusionXLInpaintPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    from tests.support.tiny_sdxl import build_tiny_clip_tokenizer  # byte-level CLIP tokenizer: no Hub vocab offline

    unet_cfg, vae_cfg, text_cfgs = (TINY_UNET, TINY_VAE, TINY_TEXT) if bench.tiny else (SDXL_UNET, SDXL_VAE,
                                                                                       TEXT_ENCODERS)  # fmt: skip
    torch.manual_seed(0)
    with torch.device(bench.device):
        unet = UNet2DConditionModel(**unet_cfg).to(dtype)
        vae = AutoencoderKL(**vae_cfg).to(dtype)
        common = dict(vocab_size=49408, max_position_embeddings=77, bos_token_id=49406, eos_token_id=49407,
                      pad_token_id=1, layer_norm_eps=1e-5)  # fmt: skip
        text_encoder = CLIPTextModel(CLIPTextConfig(**common, **text_cfgs[0])).to(dtype)
        text_encoder_2 = CLIPTextModelWithProjection(CLIPTextConfig(**common, **text_cfgs[1])).to(dtype)
    scheduler = EulerDiscreteScheduler(  # scheduler/scheduler_config.json
        beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", steps_offset=1,
        timestep_spacing="leading", num_train_timesteps=1000, prediction_type="epsilon",
    )  # fmt: skip
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        tokenizer = build_tiny_clip_tokenizer(Path(scratch))
    pipe = StableDiffusionXLInpaintPipeline(
        vae=vae, text_encoder=text_encoder, text_encoder_2=text_encoder_2, tokenizer=tokenizer,
        tokenizer_2=tokenizer, unet=unet, scheduler=scheduler, requires_aesthetics_score=False,
    )  # fmt: skip
    pipe.set_progress_bar_config(disable=True)
    return pipe


def unet_inputs(pipe: Any, batch: int, device: str, dtype: torch.dtype) -> dict[str, Any]:
    """One denoising step's UNet call with classifier-free guidance: twice the batch."""
    cfg = pipe.unet.config
    side = cfg.sample_size
    n = 2 * batch
    cross = cfg.cross_attention_dim
    pooled = pipe.text_encoder_2.config.projection_dim
    return dict(
        sample=torch.randn(n, cfg.in_channels, side, side, device=device, dtype=dtype),
        timestep=torch.tensor(500, device=device),
        encoder_hidden_states=torch.randn(n, 77, cross, device=device, dtype=dtype),
        added_cond_kwargs={
            "text_embeds": torch.randn(n, pooled, device=device, dtype=dtype),
            "time_ids": torch.tensor([[1024.0, 1024.0, 0.0, 0.0, 1024.0, 1024.0]] * n, device=device, dtype=dtype),
        },
    )


def sdxl_call(pipe: Any, batch: int, steps: int, side: int) -> Any:
    image = Image.fromarray(np.random.default_rng(0).integers(0, 255, (side, side, 3), dtype=np.uint8))
    mask = Image.new("L", (side, side), 0)
    mask.paste(255, (side // 4, side // 4, 3 * side // 4, 3 * side // 4))
    return pipe(
        prompt=["a photo of a person at a festival"] * batch, image=[image] * batch, mask_image=[mask] * batch,
        height=side, width=side, num_inference_steps=steps, guidance_scale=7.0, strength=0.99, output_type="np",
    )  # fmt: skip


def measure_sdxl(bench: Bench, models_dir: Path | None) -> Iterator[None]:
    steps = 3 if bench.tiny else 60  # MixCuBe App. C.2
    side = 64 if bench.tiny else 1024
    batches = (1, 2) if bench.tiny else (1, 2, 4, 8)
    full_runs = {("fp16", 1), ("fp16", 4)} if not bench.tiny else {("fp16", 1)}
    built = time.perf_counter()
    pipe = build_sdxl(bench, torch.float16 if bench.device == "cuda" else torch.float32)
    unet = pipe.unet
    params = sum(p.numel() for p in unet.parameters())
    attn = sorted({type(p).__name__ for p in unet.attn_processors.values()})
    bench.emit("sdxl_build", unet_params=params, attention=attn, build_s=round(time.perf_counter() - built, 1))
    yield
    flops: dict[int, int] = {}
    for name, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        if bench.device == "cpu" and name == "bf16":
            continue
        run_dtype = dtype if bench.device == "cuda" else torch.float32
        pipe.to(dtype=run_dtype)
        for batch in batches:
            if bench.left() < 20:
                return
            inputs = unet_inputs(pipe, batch, bench.device, run_dtype)
            with torch.inference_mode():
                if batch not in flops:
                    flops[batch] = counted_flops(partial(unet, **inputs))
                reps = 2 if bench.tiny else 5
                step = median(bench.times(partial(unet, **inputs), reps=reps, warmup=2))
            fields: Record = dict(dtype=name, batch=batch, unet_call_batch=2 * batch, unet_step_ms=round(step * 1e3, 2),
                                  unet_tflop_per_step=round(flops[batch] / 1e12, 3),
                                  achieved_tflops=round(flops[batch] / step / 1e12, 1),
                                  mfu=round(flops[batch] / step / bench.peak, 3),
                                  unet_only_images_per_s=round(batch / (steps * step), 4))  # fmt: skip
            if (name, batch) in full_runs and bench.left() > 8 * steps * step + 20:
                bench.reset_peak()
                with torch.inference_mode():
                    sdxl_call(pipe, batch, 2, side)  # warm the VAE and the text encoders
                    bench.reset_peak()
                    wall = bench.times(partial(sdxl_call, pipe, batch, steps, side), reps=1, warmup=0)[0]
                fields.update(steps=steps, side=side, pipeline_s=round(wall, 2), images_per_s=round(batch / wall, 4),
                              unet_share=round(steps * step / wall, 3), peak_gib=bench.peak_gib())  # fmt: skip
            bench.emit("sdxl_inpaint", **fields)
            yield
    # channels_last on the batch the stage uses by default (operators.md: batch_size 4), fp16.
    if bench.device == "cuda" and bench.left() > 30:
        pipe.to(dtype=torch.float16)
        inputs = unet_inputs(pipe, 4, bench.device, torch.float16)
        with torch.inference_mode():
            base = median(bench.times(partial(unet, **inputs), reps=5, warmup=2))
            unet.to(memory_format=torch.channels_last)
            last = median(bench.times(partial(unet, **inputs), reps=5, warmup=2))
            unet.to(memory_format=torch.contiguous_format)
        bench.emit("sdxl_channels_last", dtype="fp16", batch=4, contiguous_ms=round(base * 1e3, 2),
                   channels_last_ms=round(last * 1e3, 2), speedup=round(base / last, 3))  # fmt: skip
    if models_dir is not None:
        started = time.perf_counter()
        pipe.to(dtype=torch.float16)
        # The fp16 variant files where the stage runs fp16 (CUDA); CPU runs load the full weights (fp32).
        pipe.save_pretrained(models_dir / "sdxl-inpaint", variant="fp16" if bench.device == "cuda" else None)
        bench.emit("sdxl_saved", path=str(models_dir / "sdxl-inpaint"), save_s=round(time.perf_counter() - started, 1))


def measure_sdxl_compile(bench: Bench, models_dir: Path | None) -> Iterator[None]:
    """torch.compile of the UNet (default mode): compile time, step time, and images to pay the compile back."""
    pipe = build_sdxl(bench, torch.float16 if bench.device == "cuda" else torch.float32)
    dtype = pipe.unet.dtype
    steps = 3 if bench.tiny else 60
    for batch in (1,) if bench.tiny else (1, 4):
        if bench.left() < 150 and not bench.tiny:
            return
        inputs = unet_inputs(pipe, batch, bench.device, dtype)
        with torch.inference_mode():
            eager = median(bench.times(partial(pipe.unet, **inputs), reps=5, warmup=2))
            compiled = torch.compile(pipe.unet)
            started = time.perf_counter()
            compiled(**inputs)
            bench.sync()
            compile_s = time.perf_counter() - started
            fast = median(bench.times(partial(compiled, **inputs), reps=5, warmup=2))
        saved_per_image = steps * (eager - fast) / batch
        bench.emit("sdxl_compile", dtype=str(dtype).split(".")[-1], batch=batch, eager_ms=round(eager * 1e3, 2),
                   compiled_ms=round(fast * 1e3, 2), speedup=round(eager / fast, 3), compile_s=round(compile_s, 1),
                   images_to_break_even=round(compile_s / saved_per_image, 1) if saved_per_image > 0
                   else None)  # fmt: skip
        torch._dynamo.reset()
        yield


# -- open_clip embedding ------------------------------------------------------------------------------------------


def photo_jpegs(n: int, tiny: bool) -> list[bytes]:
    """JPEG photos of web sizes from scikit-image's samples, each cropped and scaled differently."""
    from skimage import data as samples

    photos = [
        samples.astronaut(),
        samples.chelsea(),
        samples.coffee(),
        samples.rocket(),
        samples.immunohistochemistry(),
    ]
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        image = Image.fromarray(photos[i % len(photos)])
        w, h = image.size
        x, y = int(rng.integers(0, w // 4)), int(rng.integers(0, h // 4))
        side = 96 if tiny else int(rng.choice([480, 640, 800]))
        image = image.crop((x, y, x + 3 * w // 4, y + 3 * h // 4)).resize((side, side * 3 // 4))
        buf = io.BytesIO()
        image.save(buf, "JPEG", quality=90)
        out.append(buf.getvalue())
    return out


def preprocessed(preprocess: Callable[[Image.Image], Any], data: bytes) -> Any:
    """The embedding stage's CPU side: decode_normalized, then open_clip's preprocess."""
    from curation.image_thumbnails import decode_normalized

    return preprocess(decode_normalized(data))


def measure_open_clip(bench: Bench, models_dir: Path | None) -> Iterator[None]:
    import open_clip

    from curation.embed_images import embed_images
    from curation.image_embeddings import OpenClipEmbeddingConfig, build_embedder

    corpus = photo_jpegs(64 if bench.tiny else 2048, bench.tiny)
    threads = 2 if bench.tiny else 16
    for name in ("ViT-B-32",) if bench.tiny else ("ViT-L-14", "ViT-B-32"):
        if bench.left() < 30:
            return
        precision = "fp16" if bench.device == "cuda" else "fp32"
        model, _, preprocess = open_clip.create_model_and_transforms(name, pretrained=None, precision=precision,
                                                                      device=bench.device)  # fmt: skip
        model.eval()
        dtype = next(model.visual.parameters()).dtype
        gpu_rate = 0.0
        for batch in (8,) if bench.tiny else (256, 512, 1024):
            x = torch.randn(batch, 3, 224, 224, device=bench.device, dtype=dtype)
            with torch.inference_mode():
                t = median(bench.times(partial(model.visual, x), reps=2 if bench.tiny else 5, warmup=1))
            bench.emit("open_clip_gpu", model=name, precision=precision, batch=batch,
                       images_per_s=round(batch / t, 1))  # fmt: skip
            gpu_rate = gpu_rate or batch / t  # the stage's batch (256)

        cpu_one = partial(preprocessed, preprocess)

        started = time.perf_counter()
        for data in corpus[: len(corpus) // 4]:
            cpu_one(data)
        one_thread = (len(corpus) // 4) / (time.perf_counter() - started)
        with ThreadPoolExecutor(threads) as pool:
            started = time.perf_counter()
            list(pool.map(cpu_one, corpus))
            pooled = len(corpus) / (time.perf_counter() - started)
        bench.emit("open_clip_cpu_side", model=name, one_thread_images_per_s=round(one_thread, 1), threads=threads,
                   threaded_images_per_s=round(pooled, 1))  # fmt: skip
        # End to end through the stage's own code (curation/embed_images.py): a weights file as a user gives it.
        if models_dir is not None:
            weights = models_dir / f"open_clip-{name}.pt"
            torch.save(model.state_dict(), weights)
            embedder = build_embedder(OpenClipEmbeddingConfig(model_name=name, pretrained=str(weights),
                                                              precision=precision, batch_size=256))  # fmt: skip
            loaders = [lambda d=d: d for d in corpus]
            embed_images(embedder, loaders[:256], batch_size=256)  # load and warm
            started = time.perf_counter()
            embed_images(embedder, loaders, batch_size=256)
            bench.sync()
            wall = time.perf_counter() - started
            bench.emit("open_clip_pipeline", model=name, precision=precision, images=len(corpus),
                       images_per_s=round(len(corpus) / wall, 1),
                       bound="cpu" if len(corpus) / wall < 0.8 * gpu_rate else "gpu")  # fmt: skip
            # Overlapped: decode + preprocess on `threads` threads while the GPU runs the previous batch.
            started = time.perf_counter()
            with ThreadPoolExecutor(threads) as pool, torch.inference_mode():
                for s in range(0, len(corpus), 256):
                    pixels = torch.stack(list(pool.map(cpu_one, corpus[s : s + 256])))
                    model.visual(pixels.to(bench.device, dtype=dtype, non_blocking=True))
                bench.sync()
            overlapped = len(corpus) / (time.perf_counter() - started)
            bench.emit("open_clip_threaded", model=name, threads=threads, images_per_s=round(overlapped, 1))
        yield


# -- SAM ViT-H ----------------------------------------------------------------------------------------------------


def measure_sam(bench: Bench, models_dir: Path | None) -> Iterator[None]:
    from segment_anything.build_sam import _build_sam, sam_model_registry  # type: ignore[import-untyped]

    from synthesis.faces import FaceBox
    from synthesis.masks import SamMaskConfig, build_masker, sam_masker_from_model

    torch.manual_seed(0)
    if bench.tiny:
        sam = _build_sam(encoder_embed_dim=32, encoder_depth=2, encoder_num_heads=2, encoder_global_attn_indexes=[1])
    else:
        sam = sam_model_registry["vit_h"](checkpoint=None)
    sam = sam.to(bench.device).eval()
    bench.emit("sam_build", params=sum(p.numel() for p in sam.parameters()))
    side = 1024  # SAM's input frame, whatever the model size
    for name, autocast in (("fp32", None), ("bf16", torch.bfloat16)):
        if bench.device == "cpu" and autocast is not None:
            continue
        for batch in (1, 2) if bench.tiny else (1, 2, 4, 8, 16):
            if bench.left() < 20:
                return
            x = torch.randn(batch, 3, side, side, device=bench.device)
            with torch.inference_mode(), torch.autocast("cuda", dtype=autocast, enabled=autocast is not None):
                t = median(bench.times(partial(sam.image_encoder, x), reps=2 if bench.tiny else 4, warmup=1))
            bench.emit("sam_encoder", precision=name, batch=batch, images_per_s=round(batch / t, 2))
        yield
    if models_dir is not None:  # the stage's own path: SamPredictor, all of an image's boxes in one call
        checkpoint = models_dir / "sam_vit_h.pth"
        torch.save(sam.state_dict(), checkpoint)
        config = SamMaskConfig(checkpoint=str(checkpoint), model_type="vit_h")
        # The tiny model is no registry architecture: the in-memory route (the same predictor code) serves it.
        masker = sam_masker_from_model(sam, config) if bench.tiny else build_masker(config)
        image = np.asarray(Image.open(io.BytesIO(photo_jpegs(1, bench.tiny)[0])).convert("RGB").resize((1024, 768)))
        boxes = [FaceBox(x=100 + 200 * i, y=200, w=150, h=180, score=0.9) for i in range(4)]
        t = median(bench.times(lambda: masker._masks(image, boxes), reps=2 if bench.tiny else 5, warmup=1))
        bench.emit(
            "sam_pipeline", model_type="tiny" if bench.tiny else "vit_h", boxes=len(boxes), images_per_s=round(1 / t, 2)
        )


# -- BGE-M3 -------------------------------------------------------------------------------------------------------


def measure_bge_m3(bench: Bench, models_dir: Path | None) -> Iterator[None]:
    from transformers import XLMRobertaConfig, XLMRobertaModel

    size = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64) if bench.tiny else \
        dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)  # fmt: skip
    config = XLMRobertaConfig(vocab_size=250002, max_position_embeddings=8194, type_vocab_size=1, **size)
    config._attn_implementation = "sdpa"
    dtype = torch.float16 if bench.device == "cuda" else torch.float32
    with torch.device(bench.device):
        model = XLMRobertaModel(config, add_pooling_layer=False).to(dtype).eval()
    tokens = 16  # a concept string ("Durga Puja pandal") is 4-12 tokens with its specials: padded to 16
    for batch in (8,) if bench.tiny else (256, 1024):
        ids = torch.randint(5, 250000, (batch, tokens), device=bench.device)
        mask = torch.ones_like(ids)
        with torch.inference_mode():
            t = median(bench.times(partial(model, input_ids=ids, attention_mask=mask), reps=3, warmup=1))
        bench.emit("bge_m3", dtype=str(dtype).split(".")[-1], batch=batch, tokens=tokens,
                   sentences_per_s=round(batch / t, 1))  # fmt: skip
        yield


# -- LLaVA-1.5-7B ------------------------------------------------------------------------------------------------


def measure_llava(bench: Bench, models_dir: Path | None) -> Iterator[None]:
    """MixCuBe's question (country of the image) answered by a LLaVA-1.5-7B-sized model: a short generation."""
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

    if bench.tiny:
        vision = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                                  image_size=56, patch_size=14, projection_dim=32)  # fmt: skip
        text = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                           num_key_value_heads=4, vocab_size=32064)  # fmt: skip
    else:  # llava-hf/llava-1.5-7b-hf config.json
        vision = CLIPVisionConfig(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
                                  num_attention_heads=16, image_size=336, patch_size=14,
                                  projection_dim=768)  # fmt: skip
        text = LlamaConfig(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                           num_key_value_heads=32, vocab_size=32064, max_position_embeddings=4096)  # fmt: skip
    config = LlavaConfig(vision_config=vision, text_config=text, image_token_index=32000,
                         vision_feature_layer=-2, vision_feature_select_strategy="default")  # fmt: skip
    dtype = torch.float16 if bench.device == "cuda" else torch.float32
    started = time.perf_counter()
    with torch.device(bench.device):
        model = LlavaForConditionalGeneration(config).to(dtype).eval()
    bench.emit("llava_build", build_s=round(time.perf_counter() - started, 1),
               params=sum(p.numel() for p in model.parameters()))  # fmt: skip
    patches = (vision.image_size // vision.patch_size) ** 2
    for batch in (1, 2) if bench.tiny else (1, 8, 32):
        if bench.left() < 30:
            return
        prompt = [1] + [32000] * patches + list(range(100, 140))  # BOS, the image's tokens, a 40-token question
        ids = torch.tensor([prompt] * batch, device=bench.device)
        pixels = torch.randn(batch, 3, vision.image_size, vision.image_size, device=bench.device, dtype=dtype)
        new = 8  # "Japan", "South Korea": a few tokens, then the answer is matched (evaluation/mixcube)

        answer = partial(model.generate, input_ids=ids, attention_mask=torch.ones_like(ids), pixel_values=pixels,
                         max_new_tokens=new, min_new_tokens=new, do_sample=False)  # fmt: skip

        with torch.inference_mode():
            t = median(bench.times(answer, reps=2 if bench.tiny else 3, warmup=1))
        bench.emit("llava_answer", dtype=str(dtype).split(".")[-1], batch=batch, prompt_tokens=len(prompt),
                   new_tokens=new, answers_per_s=round(batch / t, 2), peak_gib=bench.peak_gib())  # fmt: skip
        yield


MEASURES: dict[str, Callable[[Bench, Path | None], Iterator[None]]] = {
    "sdxl": measure_sdxl,
    "open_clip": measure_open_clip,
    "sam": measure_sam,
    "bge_m3": measure_bge_m3,
    "sdxl_compile": measure_sdxl_compile,
    "llava": measure_llava,
}


def main(argv: list[str] | None = None) -> int:
    import diffusers

    diffusers.utils.logging.set_verbosity_error()  # one "kept in float32" line per dtype cast otherwise
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="tiny models on the CPU (a smoke run)")
    parser.add_argument("--only", default=",".join(SECTIONS[:4]), help=f"comma-separated, of {', '.join(SECTIONS)}")
    parser.add_argument("--out", type=Path, help="append the JSON lines here too")
    parser.add_argument("--models-dir", type=Path, help="save the random models here, as the pipeline loads them")
    parser.add_argument("--budget-s", type=float, default=300.0, help="start no measurement after this")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak (H100/H200 SXM: 989)")
    args = parser.parse_args(argv)
    wanted = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(wanted) - set(SECTIONS))
    if unknown:
        parser.error(f"--only: unknown section(s) {', '.join(unknown)}; known: {', '.join(SECTIONS)}")
    if args.models_dir:
        args.models_dir.mkdir(parents=True, exist_ok=True)
    bench = Bench(args.out, args.budget_s, args.tiny, args.peak_tflops)
    started = time.perf_counter()
    bench.emit("start", torch=torch.__version__, cuda=torch.version.cuda, sections=wanted)
    failed = []
    for section in wanted:
        if bench.left() <= 0:
            bench.emit("skipped", section=section, reason="budget spent")
            continue
        section_started = time.perf_counter()
        try:
            for _ in MEASURES[section](bench, args.models_dir):
                pass
        except Exception as exc:  # one section's failure is a line; the others still run
            failed.append(section)
            bench.emit("error", section=section, error=f"{type(exc).__name__}: {str(exc)[:400]}")
        gc.collect()  # the section's models go with its generator: free their device memory for the next
        bench.reset_peak()
        bench.emit("section_done", section=section, wall_s=round(time.perf_counter() - section_started, 1))
    bench.emit("done", wall_s=round(time.perf_counter() - started, 1), failed=failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
