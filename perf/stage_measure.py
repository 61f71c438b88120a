"""Stages of a kept `perf/build_scale.py` workspace measured again with this checkout's code, each in a fresh
process as the build's table measures it (wall, CPU of the process and its children, peak RSS), its tables (or, for
`release`, the release folder) removed first.

    .venv/bin/python perf/build_scale.py --images 1m --keep
    .venv/bin/python perf/stage_measure.py /tmp/culturebench-build-scale/spec-<shape>.json assembly,validation,release

Run it in each checkout to compare (a stage's inputs are the kept workspace's, so only the code differs; a stage
rewrites its own tables). Prints a line per stage and ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("spec", type=Path, help="the spec-<shape>.json a kept build_scale run wrote")
    parser.add_argument("stages", help="comma-separated stages (and `release`), in build order")
    args = parser.parse_args()
    sys.path[:0] = [str(ROOT), str(ROOT / "perf")]  # this checkout's packages, and build_scale beside this script
    import build_scale as bs

    from flows.xcm.stages import GRAPH

    spec = json.loads(args.spec.read_text())
    shape = bs.Shape(**{**spec["shape"], "real_countries": tuple(spec["shape"]["real_countries"])})
    build = GRAPH.build(bs.build_config(shape, Path(spec["corpus"]), Path(spec["work"]), spec["reference"]))
    rows = []
    for name in args.stages.split(","):
        if name == "release":
            shutil.rmtree(Path(spec["work"]) / "releases" / "3xcm" / "0.1.0-scale", ignore_errors=True)
        else:
            shutil.rmtree(build.ws.stage_dir(name), ignore_errors=True)
        [measure] = bs.run_stage_process(args.spec, [name])
        row = {
            "stage": name,
            "wall_s": round(measure.wall_s, 1),
            "cpu_s": round(measure.cpu_s, 1),
            "peak_rss_mb": round(measure.peak_rss_mb),
            "tree_peak_rss_mb": measure.extra.get("tree_peak_rss_mb"),
        }
        print(
            f"{name:<16} {row['wall_s']:8.1f} s wall {row['cpu_s']:8.1f} s CPU {row['peak_rss_mb']:6d} MB", flush=True
        )
        rows.append(row)
    print(json.dumps({"benchmark": "stage_measure", "root": str(ROOT), "spec": str(args.spec), "stages": rows}))


if __name__ == "__main__":
    main()
