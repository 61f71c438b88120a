"""The 3XCM demo build under Prefect on the default task runner and on Dask, timed in the same run.

The demo corpus with the open_clip tier on a random ViT (224 px, 6 layers, width 384: about 1 GFLOP per image, so
embedding is real work) and 32-image shards. Each repeat builds the same config into a fresh workspace three ways
and checks that the releases are byte-identical:
- `default`: the shards run in the stage's own task, in the flow's process (torch uses every core);
- `dask_local`: `task_runner: {kind: dask, n_workers: W}`, a local cluster started for the build (what a one-off
  run pays: worker processes start, import the stages and torch, and load the model);
- `dask_standing`: the same on a cluster that outlives the builds, reached by address (warmed by one build first).
Dask workers run one thread each (Dask sets OMP_NUM_THREADS=1 in them). Prints medians and ends with one JSON line
of the figures.

    .venv/bin/python perf/scale_out.py [--repeats 3] [--workers 2] [--shard-size 32]
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

SHARDED = ("search", "images", "image_embeddings")
MODES = ("default", "dask_local", "dask_standing")
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
    from flows.xcm.config import Build3XCMConfig

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
    # A stage task's run is named `<stage>-<suffix>`; its shard tasks `<stage>-shard-<n>`.
    named = {r.name.rsplit("-", 1)[0]: r for r in runs if r.end_time and r.start_time}
    return {name: (named[name].end_time - named[name].start_time).total_seconds() for name in SHARDED if name in named}


def build(folder: Path, cfg: Any) -> tuple[float, dict[str, float], dict[str, bytes], int]:
    from flows.xcm.build import build_3xcm

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

    from distributed import LocalCluster
    from prefect.testing.utilities import prefect_test_harness

    local = {"kind": "dask", "n_workers": args.workers, "threads_per_worker": 1, "processes": True}
    walls: dict[str, list[float]] = {mode: [] for mode in MODES}
    stages: dict[str, dict[str, list[float]]] = {mode: {} for mode in MODES}
    with (
        tempfile.TemporaryDirectory() as tmp,
        prefect_test_harness(server_startup_timeout=120),
        LocalCluster(n_workers=args.workers, threads_per_worker=1, dashboard_address=None) as cluster,
    ):
        models = random_vit(Path(tmp) / "models")
        runners = {
            "default": {"kind": "default"},
            "dask_local": local,
            "dask_standing": {"kind": "dask", "address": cluster.scheduler_address},
        }
        build(Path(tmp) / "warm-up", config(models, args.shard_size, runners["dask_standing"]))
        images = _embedded(Path(tmp) / "warm-up")
        for repeat in range(args.repeats):
            releases = {}
            for mode in MODES:
                cfg = config(models, args.shard_size, runners[mode])
                wall, seconds, releases[mode], workers = build(Path(tmp) / f"{mode}-{repeat}", cfg)
                walls[mode].append(wall)
                for stage, value in seconds.items():
                    stages[mode].setdefault(stage, []).append(value)
                print(f"repeat {repeat + 1} {mode}: {wall:.1f} s" + (f" on {workers} workers" if workers else ""))
            if any(releases[mode] != releases["default"] for mode in MODES):
                raise SystemExit("a Dask release differs from the default runner's")

    med = {mode: statistics.median(values) for mode, values in walls.items()}
    per_stage = {
        mode: {stage: round(statistics.median(v), 2) for stage, v in by_stage.items()}
        for mode, by_stage in stages.items()
    }
    print(f"{images} images embedded per build, shards of {args.shard_size}, {os.cpu_count()} CPUs")
    print(f"{'stage (median s)':<18}" + "".join(f"{mode:>15}" for mode in MODES))
    for stage in SHARDED:
        print(f"{stage:<18}" + "".join(f"{per_stage[mode].get(stage, 0):>15.2f}" for mode in MODES))
    print(f"{'whole build':<18}" + "".join(f"{med[mode]:>15.2f}" for mode in MODES))
    figures: dict[str, Any] = {
        "repeats": args.repeats,
        "dask_workers": args.workers,
        "shard_size": args.shard_size,
        "images_embedded": images,
        "cpus": os.cpu_count(),
        "releases_identical": True,
    }
    for mode in MODES:
        figures[f"build_s_median_{mode}"] = round(med[mode], 2)
        figures[f"embedding_s_median_{mode}"] = per_stage[mode].get("image_embeddings")
    for mode in MODES[1:]:
        figures[f"build_ratio_{mode}_over_default"] = round(med[mode] / med["default"], 3)
        figures[f"embedding_ratio_{mode}_over_default"] = round(
            per_stage[mode]["image_embeddings"] / per_stage["default"]["image_embeddings"], 3
        )
    print(json.dumps(figures))


def _embedded(folder: Path) -> int:
    import pyarrow.parquet as pq

    tables = list((folder / "workspace").glob("*/tables/image_embeddings/part-*.parquet"))
    return sum(pq.read_metadata(t).num_rows for t in tables)


if __name__ == "__main__":
    main()
