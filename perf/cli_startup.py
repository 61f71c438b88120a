"""`culturebench --help` and `culturebench build --help`: wall time of a fresh process, against the issue's 0.5 s.

Each call is a new subprocess of the installed entry point (the `culturebench` beside this interpreter), output
discarded, timed from spawn to exit; its CPU seconds (user + system of the child) are counted too, a measure other
processes on the machine disturb far less than the wall time. The first call of each command is reported apart
(cold: the first to read the modules after whatever ran before, the one a user meets after a while away); the
median is over the calls after it (warm). Every call must exit 0 and print its usage. The commands run interleaved,
one call of each per round. Prints one line per command and ends with one JSON line of the figures.

    .venv/bin/python perf/cli_startup.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

#: The floor the issue sets for `--help`, `build --help`, `evaluate --help` and argument errors (seconds, wall).
FLOOR_S = 0.5
COMMANDS = (("--help",), ("build", "--help"))


def entry_point() -> Path:
    script = Path(sys.executable).parent / "culturebench"
    if not script.is_file():
        raise SystemExit(f"{script}: no culturebench entry point beside this interpreter (pip install -e .)")
    return script


def one_call(script: Path, args: tuple[str, ...]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one `culturebench ARGS` in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([str(script), *args], capture_output=True, text=True, env={**os.environ, "COLUMNS": "100"})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0 or "Usage: culturebench" not in done.stdout:
        raise SystemExit(f"culturebench {' '.join(args)}: exit {done.returncode}\n{done.stdout}{done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="Calls of each command, the cold first one included.")
    args = parser.parse_args()
    if args.runs < 2:
        parser.error("--runs: at least 2 (a cold call and a warm one)")
    script = entry_point()
    walls: dict[str, list[float]] = {" ".join(c): [] for c in COMMANDS}
    cpus: dict[str, list[float]] = {" ".join(c): [] for c in COMMANDS}
    for _ in range(args.runs):
        for command in COMMANDS:
            wall, cpu = one_call(script, command)
            walls[" ".join(command)].append(wall)
            cpus[" ".join(command)].append(cpu)
    figures: dict[str, object] = {"runs": args.runs, "floor_s": FLOOR_S}
    for name, times in walls.items():
        key = name.replace("--", "").replace(" ", "_")
        cold, warm = times[0], statistics.median(times[1:])
        cpu = statistics.median(cpus[name][1:])
        verdict = "under" if warm < FLOOR_S else "OVER"
        print(
            f"culturebench {name}: cold {cold:.3f} s, warm median {warm:.3f} s (CPU {cpu:.3f} s) over "
            f"{args.runs - 1} calls: {verdict} the {FLOOR_S} s floor"
        )
        figures |= {
            f"{key}_cold_s": round(cold, 3),
            f"{key}_warm_median_s": round(warm, 3),
            f"{key}_warm_cpu_median_s": round(cpu, 3),
            f"{key}_under_floor": warm < FLOOR_S,
        }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
