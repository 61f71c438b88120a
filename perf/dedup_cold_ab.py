"""The file deduplicator's cold first call, two source trees against each other, interleaved on one corpus.

    .venv/bin/python perf/dedup_cold_ab.py BEFORE AFTER [--mix small-crops] [--seed 3] [--rounds 8] [--bases 240]

BEFORE and AFTER are checkouts of this repository (`git worktree add /tmp/before HEAD~1`, and `.`). The corpus is
perf/dedup_vs_imagededup's mix at that seed, generated once. Each round runs one fresh process per tree, BEFORE then
AFTER: it imports `curation.file_dedup` (not timed), then times its first call of `dedup_files(paths, workers=2)`
(what perf/dedup_vs_imagededup calls cold) and a second, warm call. Interleaving the trees round by round is what
makes the two comparable on a machine whose speed drifts within minutes. Prints each tree's medians and the ratio
AFTER / BEFORE, and ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perf.dedup_vs_imagededup.corpus import generate_corpus  # noqa: E402

_CALLS = """
import json, sys, time
paths = json.loads(sys.stdin.read())
from curation.file_dedup import dedup_files
times = []
for _ in range(2):
    start = time.perf_counter()
    dedup_files(paths, workers=2)
    times.append(time.perf_counter() - start)
print(json.dumps(times))
"""


def _calls(tree: Path, paths: list[str]) -> list[float]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(tree)
    proc = subprocess.run(
        [sys.executable, "-c", _CALLS], input=json.dumps(paths), capture_output=True, text=True, env=env, cwd=tree
    )
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: the timed process failed: {proc.stderr.strip().splitlines()[-1:]}")
    times: list[float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return times


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--mix", default="small-crops")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--bases", type=int, default=240, help="the corpus size (perf/dedup_vs_imagededup's default)")
    args = parser.parse_args(argv)
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    with tempfile.TemporaryDirectory(prefix="dedup-cold-ab-") as work:
        paths = generate_corpus(
            Path(work) / "corpus", seed=args.seed, bases=args.bases, workers=2, mix=args.mix
        ).paths()
        runs: dict[str, list[list[float]]] = {name: [] for name in trees}
        for round_ in range(args.rounds):
            for name, tree in trees.items():
                runs[name].append(_calls(tree, paths))
            print(f"round {round_ + 1}/{args.rounds}: " + ", ".join(f"{n} {r[-1][0]:.3f} s" for n, r in runs.items()))
    figures: dict[str, object] = {"mix": args.mix, "seed": args.seed, "files": len(paths), "rounds": args.rounds}
    for name in trees:
        figures[f"{name}_first_call_median_s"] = statistics.median(r[0] for r in runs[name])
        figures[f"{name}_warm_call_median_s"] = statistics.median(r[1] for r in runs[name])
    for kind in ("first_call", "warm_call"):
        ratio = figures[f"after_{kind}_median_s"] / figures[f"before_{kind}_median_s"]  # type: ignore[operator]
        figures[f"{kind}_ratio"] = ratio
        print(f"{kind.replace('_', ' ')}: before {figures[f'before_{kind}_median_s']:.3f} s, "
              f"after {figures[f'after_{kind}_median_s']:.3f} s, after/before {ratio:.3f}")  # fmt: skip
    figures["runs"] = runs
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
