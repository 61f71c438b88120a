"""The 3XCM demo build under Prefect on the default task runner and on a local Dask cluster, timed in the same run.

The demo corpus with the open_clip tier on a random ViT (224 px, 6 layers, width 384: about 1 GFLOP per image, so
embedding is real work) and 32-image shards. Each repeat builds the same config into a fresh workspace on both
runners and checks the two releases are byte-identical. The default runner embeds in the flow's process with
torch's threads; the Dask runner spreads the shards over `--workers` processes of one thread each (Dask sets
OMP_NUM_THREADS=1 in its workers), so on a machine with few cores the comparison shows the cost of the per-shard
tasks and the cluster start more than a speed-up. Prints medians and ends with one JSON line of the figures.

    .venv/bin/python benchmarks/scale_out.py [--repeats 3] [--workers 2] [--shard-size 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

SHARDED = ("search", "images", "image_hashes", "image_embeddings")
VIT = {
    "embed_dim": 256,
    "vision_cfg": {"image_size": 224, "layers": 6, "width": 384, "patch_size": 32, "head_width": 64},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 128, "heads": 2, "layers": 1},
}


def random_vit(folder: Path) -> tuple[Path, Path]:
    import open_clip
    import torch

    configs = folder / "configs"
    configs.mkdir(parents=True)
    (configs / "bench-vit.json").write_text(json.dumps(VIT))
    open_clip.add_model_config(configs)
    torch.manual_seed(0)
    weights = folder / "bench-vit.pt"
    torch.save(open_clip.create_model("bench-vit", pretrained=None).state_dict(), weights)
    return configs, weights


def config(models: Path, shard_size: int, task_runner: dict[str, Any]) -> Any:
    from flows.config import Build3XCMConfig

    configs, weights = models
    embedder = {"model_name": "bench-vit", "pretrained": str(weights), "model_config_dir": str(configs)}
    tier = {"embedder": {**embedder, "device": "cpu"}, "merge_min_cosine": 1.0, "review_min_cosine": 1.0}
    return Build3XCMConfig.demo(
        download={"backend": "local", "shard_size": shard_size},
        image_dedup={"shard_size": shard_size, "embedding": {**tier, "shard_size": shard_size}},
        release={"version": "0.0.1"},
        task_runner=task_runner,
    )


def stage_seconds(flow_run_id: Any) -> dict[str, float]:
    """Each sharded stage task's run time, from the API."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    async def read() -> list:
        async with get_client() as client:
            return await client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])), limit=200
            )

    runs = asyncio.run(read())
    return {r.name: (r.end_time - r.start_time).total_seconds() for r in runs if r.name in SHARDED}


def build(folder: Path, cfg: Any) -> tuple[float, dict[str, float], dict[str, bytes], int]:
    from flows.build_3xcm import build_3xcm

    folder.mkdir()
    os.chdir(folder)  # relative roots: the two releases' manifests name the same ones
    start = time.perf_counter()
    state = build_3xcm(cfg, return_state=True)
    wall = time.perf_counter() - start
    if not state.is_completed():
        raise SystemExit(f"build failed: {state}")
    releases = folder / "releases"
    files = {str(p.relative_to(releases)): p.read_bytes() for p in sorted(releases.rglob("*")) if p.is_file()}
    workers = len({w for counts in state.result().shard_placement.values() for w in counts})
    return wall, stage_seconds(state.state_details.flow_run_id), files, workers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--shard-size", type=int, default=32)
    args = parser.parse_args()
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    from prefect.testing.utilities import prefect_test_harness

    dask = {"kind": "dask", "n_workers": args.workers, "threads_per_worker": 1, "processes": True}
    walls: dict[str, list[float]] = {"default": [], "dask": []}
    stages: dict[str, dict[str, list[float]]] = {"default": {}, "dask": {}}
    with tempfile.TemporaryDirectory() as tmp, prefect_test_harness(server_startup_timeout=120):
        models = random_vit(Path(tmp) / "models")
        images = 0
        for repeat in range(args.repeats):
            releases = {}
            for runner, settings in (("default", {"kind": "default"}), ("dask", dask)):
                cfg = config(models, args.shard_size, settings)
                wall, seconds, releases[runner], workers = build(Path(tmp) / f"{runner}-{repeat}", cfg)
                walls[runner].append(wall)
                for stage, value in seconds.items():
                    stages[runner].setdefault(stage, []).append(value)
                print(f"repeat {repeat + 1} {runner}: {wall:.1f} s" + (f" on {workers} workers" if workers else ""))
            if releases["default"] != releases["dask"]:
                raise SystemExit("the Dask release differs from the default runner's")
            images = images or _embedded(Path(tmp) / f"default-{repeat}")

    med = {runner: statistics.median(values) for runner, values in walls.items()}
    per_stage = {
        runner: {stage: round(statistics.median(v), 2) for stage, v in by_stage.items()}
        for runner, by_stage in stages.items()
    }
    print(f"{images} images embedded per build, shards of {args.shard_size}, {os.cpu_count()} CPUs")
    print(f"{'stage':<18}{'default s':>10}{'dask s':>10}")
    for stage in SHARDED:
        print(f"{stage:<18}{per_stage['default'].get(stage, 0):>10.2f}{per_stage['dask'].get(stage, 0):>10.2f}")
    print(f"whole build, median of {args.repeats}: default {med['default']:.1f} s, dask {med['dask']:.1f} s")
    figures = {
        "repeats": args.repeats,
        "dask_workers": args.workers,
        "shard_size": args.shard_size,
        "images_embedded": images,
        "cpus": os.cpu_count(),
        "build_s_median_default": round(med["default"], 2),
        "build_s_median_dask": round(med["dask"], 2),
        "build_ratio_dask_over_default": round(med["dask"] / med["default"], 3),
        "embedding_s_median_default": per_stage["default"].get("image_embeddings"),
        "embedding_s_median_dask": per_stage["dask"].get("image_embeddings"),
        "embedding_ratio_dask_over_default": round(
            per_stage["dask"]["image_embeddings"] / per_stage["default"]["image_embeddings"], 3
        ),
        "releases_identical": True,
    }
    print(json.dumps(figures))


def _embedded(folder: Path) -> int:
    import pyarrow.parquet as pq

    tables = list((folder / "workspace").glob("*/tables/image_embeddings/part-*.parquet"))
    return sum(pq.read_metadata(t).num_rows for t in tables)


if __name__ == "__main__":
    main()
