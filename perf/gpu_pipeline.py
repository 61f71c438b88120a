"""The MixCuBe GPU stages through the real pipeline on saved random models (issue 61).

    python3 perf/gpu_pipeline.py --models-dir /tmp/models --root /tmp/gpu-build [--steps 60] [--cultures 2]

`perf/gpu.py --models-dir DIR` saves the models this reads: the SDXL inpainting pipeline (`sdxl-inpaint/`, fp16
variant), SAM ViT-H (`sam_vit_h.pth`) and the open_clip ViT-B/32 image tower (`open_clip-ViT-B-32.pt`), all at their
published sizes with random weights. This builds a small MixCuBe on them with the CLI as an operator runs it
(`culturebench build mixcube --demo --config FILE --engine local`): the demo's composed originals, one per culture x
Food, SAM masks, SDXL inpainting (fp16 on CUDA, the stage's batching) and the CLIP filter on the GPU, auto-accepted.
It then runs the same command again (every stage skipped, so the cache keys hold on the device) and prints one JSON
line with the wall times and the device and dtype the stages recorded.

Random weights draw noise, so the CLIP filter's bounds are opened to [-1, 1]: the point is the CUDA path (device
placement, fp16, the `gpu` slot, cache keys with device and dtype), not the pictures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build_config(models: Path, root: Path, steps: int, cultures: int, sam: bool = True) -> dict:
    names = ["Azerbaijan", "South Korea", "Myanmar", "United Kingdom", "United States"][:cultures]
    return {
        "workspace_root": str(root / "workspace"),
        "originals": {"backend": "demo", "per_cell": 1, "cultures": names, "categories": ["Food"]},
        "target_per_cell": 1,
        "masks": {"backend": "sam", "checkpoint": str(models / "sam_vit_h.pth"), "model_type": "vit_h"}
        if sam
        else {"backend": "ellipse"},
        "inpaint": {
            "backend": "sdxl",
            "model": str(models / "sdxl-inpaint"),
            "variant": "fp16",
            "batch_size": 4,
            "num_inference_steps": steps,
        },
        "filters": {
            "brisque": None,
            "clip": {
                "embedder": {
                    "backend": "open_clip",
                    "model_name": "ViT-B-32",
                    "pretrained": str(models / "open_clip-ViT-B-32.pt"),
                    "precision": "fp16",
                },
                "min_similarity": -1.0,
                "max_similarity": 1.0,
            },
        },
        "max_attempts": 1,
        "release": {"root": str(root / "releases"), "version": "0.1.0-gpu"},
    }


def run_build(config: Path, env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    # The `culturebench` entry point, as the package is not installed on the device (PYTHONPATH is the checkout).
    cli = "import sys; from flows.cli import app; sys.argv[0] = 'culturebench'; app()"
    cmd = [sys.executable, "-c", cli, "build", "mixcube", "--demo", "--config", str(config), "--engine", "local"]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    print(done.stdout[-6000:], done.stderr[-4000:], sep="\n", flush=True)
    if done.returncode:
        raise SystemExit(f"build exited {done.returncode}")
    return wall, done.stdout


def resolved_runtimes(cfg: dict) -> dict[str, object]:
    """The device and dtype each GPU stage's backend resolves to here, and the inpainting's cache-key part."""
    from curation.image_embeddings import OpenClipEmbeddingConfig, build_embedder
    from synthesis.inpaint import SdxlInpaintConfig, build_inpainter, cache_settings
    from synthesis.masks import SamMaskConfig, build_masker

    inpaint_config = SdxlInpaintConfig(**cfg["inpaint"])
    inpainter = build_inpainter(inpaint_config)  # the pipeline loads on first use: nothing is read here
    embedder = build_embedder(OpenClipEmbeddingConfig(**cfg["filters"]["clip"]["embedder"]))
    masks = cfg["masks"]
    masker_device = build_masker(SamMaskConfig(**masks)).device if masks["backend"] == "sam" else None
    return {
        "inpaint": [inpainter.device, inpainter.precision],
        "inpaint_cache_key_runtime": cache_settings(inpaint_config, inpainter)[2:],
        "clip_filter": [embedder.device, embedder.precision],
        "sam": masker_device,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models-dir", type=Path, required=True)
    parser.add_argument("--root", type=Path, required=True, help="workspace and release root (made if missing)")
    parser.add_argument("--steps", type=int, default=60, help="SDXL steps (App. C.2: 60)")
    parser.add_argument("--cultures", type=int, default=2, help="originals: one per culture x Food")
    parser.add_argument("--no-sam", action="store_true", help="ellipse masks (the CPU smoke run: no tiny SAM type)")
    args = parser.parse_args()
    args.root.mkdir(parents=True, exist_ok=True)
    config = args.root / "mixcube-gpu.json"
    cfg = build_config(args.models_dir, args.root, args.steps, args.cultures, not args.no_sam)
    config.write_text(json.dumps(cfg, indent=1))
    env = {**os.environ, "PREFECT_HOME": str(args.root / "prefect-home"), "DO_NOT_TRACK": "1", "COLUMNS": "400"}
    first, out = run_build(config, env)
    again, out_again = run_build(config, env)
    line = out.strip().splitlines()[-1]
    summary = json.loads(line) if line.startswith("{") else {}
    print(
        json.dumps(
            {
                "measure": "mixcube_gpu_pipeline",
                "cultures": args.cultures,
                "steps": args.steps,
                "first_build_s": round(first, 1),
                "rerun_s": round(again, 1),
                "rerun_skipped": next((ln for ln in out_again.splitlines() if ln.startswith("skipped")), None),
                "release": summary.get("release_path"),
                "runtimes": resolved_runtimes(cfg),
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
