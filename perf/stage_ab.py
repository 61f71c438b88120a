"""Interleaved A/B of build stages (by default the image stages, images and image_dedup) on one kept
`perf/build_scale.py` workspace.

    git worktree add /tmp/before <commit>
    .venv/bin/python perf/build_scale.py --images 100k --keep
    .venv/bin/python perf/stage_ab.py /tmp/culturebench-build-scale/spec-<shape>.json /tmp/before . --rounds 2
    .venv/bin/python perf/stage_ab.py SPEC /tmp/before . --stages image_dedup
    .venv/bin/python perf/stage_ab.py SPEC /tmp/before . --stages release   # the release folder, written again

Each round runs every code root in turn, each in a fresh process: the stages' tables (and, with `images`, the blob
store) are removed, then the stages run in order with the packages under that root (its folder first on the path,
so its worker processes import it too). The same corpus, workspace and config for every root, so only the code differs;
interleaving spreads the machine's drift over both. Prints each run, the medians, and ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

STAGES = ("images", "image_dedup")


def run_child(root: Path, spec_path: Path, stages: list[str]) -> dict[str, float]:
    sys.path[:0] = [str(root), str(root / "perf")]
    import build_scale as bs

    from flows.xcm.stages import GRAPH

    spec = json.loads(spec_path.read_text())
    shape = bs.Shape(**{**spec["shape"], "real_countries": tuple(spec["shape"]["real_countries"])})
    build = GRAPH.build(bs.build_config(shape, Path(spec["corpus"]), Path(spec["work"]), spec["reference"]))
    workspace = Path(build.ws.stage_dir("images")).parents[1]
    for name in stages:
        if name == "release":
            shutil.rmtree(Path(build.config.release.root) / "3xcm" / build.config.release.version, ignore_errors=True)
        else:
            shutil.rmtree(workspace / "tables" / name, ignore_errors=True)
    if "images" in stages:
        shutil.rmtree(workspace / "blobs", ignore_errors=True)
    # Run as the build's table measures them (`build_scale.run_in_process`, which also knows the release).
    return {measure.name: round(measure.wall_s, 1) for measure in bs.run_in_process(spec, stages)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("spec", type=Path, help="the spec-<shape>.json a kept build_scale run wrote")
    parser.add_argument("roots", type=Path, nargs="+", help="code roots (checkouts) to compare, in run order")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--stages", default=",".join(STAGES), help="comma-separated, in build order")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_child(args.child.resolve(), args.spec, args.stages.split(","))))
        return
    if not args.spec.is_file():
        sys.exit(f"stage_ab: {args.spec}: no such spec file (a kept perf/build_scale.py run writes it)")
    for root in args.roots:  # a missing root would silently import the installed code instead
        if not (root / "flows" / "engine" / "graph.py").is_file() or not (root / "perf" / "build_scale.py").is_file():
            sys.exit(f"stage_ab: {root}: not a culturebench checkout (no flows/engine/graph.py or perf/build_scale.py)")
    runs: dict[str, list[dict[str, float]]] = {str(root): [] for root in args.roots}
    for _ in range(args.rounds):
        for root in args.roots:
            command = [
                sys.executable,
                __file__,
                str(args.spec),
                str(root),
                "--child",
                str(root),
                "--stages",
                args.stages,
            ]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                sys.exit(f"stage_ab: {root}: {done.stderr.strip().splitlines()[-1] if done.stderr else 'failed'}")
            runs[str(root)].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"{root}: {runs[str(root)][-1]}", flush=True)
    stages = args.stages.split(",")
    medians = {root: {s: statistics.median(r[s] for r in found) for s in stages} for root, found in runs.items()}
    for root, found in medians.items():
        print(f"median {root}: {found}")
    print(json.dumps({"benchmark": "stage_ab", "runs": runs, "medians": medians}))


if __name__ == "__main__":
    main()
