"""What a sharded stage pays per shard for its inputs' digests, on a kept `perf/build_scale.py` workspace: each
upstream completion marker parsed and serialised again (`marker(dep).digest()`, the code before issue 43's fifth
step) against `Workspace.marker_digest`, which remembers the digest by the marker's bytes.

    .venv/bin/python perf/build_scale.py --images 1m --keep
    .venv/bin/python perf/marker_digests.py /tmp/culturebench-build-scale/spec-<shape>.json

Every shard of a stage asks once (`Build.write_shard`), so the cost per call times the stage's shards is what the
stage spent on it. Prints a line per sharded stage, checks that both give the same digests, and ends with one JSON
line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def per_call_ms(call: Callable[[], object], calls: int) -> float:
    """Median of `calls` timed calls, in ms (the first one included: a worker's first shard is cold too)."""
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("spec", type=Path, help="the spec-<shape>.json a kept build_scale run wrote")
    parser.add_argument("--stages", default="search,images", help="sharded stages to measure")
    parser.add_argument("--calls", type=int, default=21)
    args = parser.parse_args()
    sys.path[:0] = [str(ROOT), str(ROOT / "perf")]
    import build_scale as bs

    from flows.xcm.stages import GRAPH

    spec = json.loads(args.spec.read_text())
    shape = bs.Shape(**{**spec["shape"], "real_countries": tuple(spec["shape"]["real_countries"])})
    build = GRAPH.build(bs.build_config(shape, Path(spec["corpus"]), Path(spec["work"]), spec["reference"]))
    ws = build.ws

    def parsed(name: str) -> dict[str, str]:
        digests = {}
        for dep in build.stage(name).deps:
            marker = ws.marker(dep)
            assert marker is not None, f"{dep} has not completed in {spec['work']}"
            digests[dep] = marker.digest()
        return digests

    rows = []
    for name in args.stages.split(","):
        assert build.input_digests(name) == parsed(name), name
        marker = ws.marker(name)
        shards = marker.parts if marker else 0
        before = per_call_ms(partial(parsed, name), args.calls)
        after = per_call_ms(partial(build.input_digests, name), args.calls)
        marker_bytes = sum(len(ws.storage.read_bytes(f"{ws.stage_dir(d)}/_SUCCESS")) for d in build.stage(name).deps)
        row = {
            "stage": name,
            "shards": shards,
            "input_marker_bytes": marker_bytes,
            "before_ms_per_shard": round(before, 2),
            "after_ms_per_shard": round(after, 2),
            "before_s_per_stage": round(before * shards / 1000, 1),
            "after_s_per_stage": round(after * shards / 1000, 1),
        }
        print(
            f"{name:<14} {shards:6d} shards, inputs' markers {marker_bytes / 1e3:8.0f} KB: "
            f"{before:7.2f} -> {after:6.2f} ms per shard, {row['before_s_per_stage']:6.1f} -> "
            f"{row['after_s_per_stage']:5.1f} s per stage (CPU, one process)",
            flush=True,
        )
        rows.append(row)
    print(json.dumps({"benchmark": "marker_digests", "spec": str(args.spec), "calls": args.calls, "stages": rows}))


if __name__ == "__main__":
    main()
