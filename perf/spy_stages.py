"""Where each stage of a `perf/build_scale.py` run spends its time, from a py-spy sampling profile of the whole run.

    .venv/bin/uv tool run py-spy record -f raw -s --nonblocking -r 20 -o build.raw -- \
        .venv/bin/python perf/build_scale.py --images 1m --keep
    .venv/bin/python perf/spy_stages.py build.raw --rate 20

py-spy (a sampling profiler outside the process, so the build runs at its own speed) writes one line per distinct
stack, `frame;frame;... COUNT`; with `-s` each stack starts with the processes it runs in, `process PID:"ARGV"`. A
stack belongs to the stage whose child process (`build_scale.py --child SPEC --names STAGE`) is among them, so the
stage's worker processes count towards it; the rest (the corpus, the floors) is `driver`. For each stage this prints
its sampled seconds (samples / rate: active threads only, so about its CPU seconds) and the functions that take the
most of it, by self time and by inclusive time (each function counted once per stack). Ends with one JSON line.
`--within FUNCTION` keeps only the stacks through that function. A thread pool's threads do not carry the frames
of the call that fed them, so their work is left out: profile a script that makes only the calls instead.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DRIVER = "driver"
_STAGE_ARGS = re.compile(r"--child\s+\S+\s+--names\s+([^\s\"]+)")
_LINE_NUMBER = re.compile(r":\d+\)$")


@dataclass
class StageProfile:
    samples: int = 0
    self_samples: Counter[str] = field(default_factory=Counter)
    inclusive_samples: Counter[str] = field(default_factory=Counter)


def function_of(frame: str) -> str:
    """`name (path/file.py:123)` -> `name (path/file.py)`: one entry per function, not per line."""
    return _LINE_NUMBER.sub(")", frame)


def stage_of(processes: Iterable[str]) -> str:
    for process in processes:
        found = _STAGE_ARGS.search(process)
        if found:
            return found.group(1)
    return DRIVER


def read_profile(lines: Iterable[str], within: str | None = None) -> dict[str, StageProfile]:
    """Per stage, the samples of py-spy's raw (collapsed) stacks; with `within`, only the stacks that pass through a
    function whose name starts with it (`dedup_files`: one call's time, without the script around it)."""
    stages: dict[str, StageProfile] = defaultdict(StageProfile)
    for line in lines:
        stack, _, count_text = line.rstrip("\n").rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        processes = [frame for frame in frames if frame.startswith("process ")]
        code = [function_of(frame) for frame in frames if not frame.startswith("process ")]
        if within is not None and not any(frame.startswith(within) for frame in code):
            continue
        profile = stages[stage_of(processes)]
        profile.samples += count
        if code:
            profile.self_samples[code[-1]] += count
            for function in set(code):
                profile.inclusive_samples[function] += count
    return dict(stages)


def summary(stages: dict[str, StageProfile], rate: float, top: int) -> dict[str, dict[str, Any]]:
    def share(counter: Counter[str], total: int) -> list[dict[str, object]]:
        return [
            {"function": name, "s": round(n / rate, 1), "share": round(n / total, 3)}
            for name, n in counter.most_common(top)
        ]

    return {
        name: {
            "sampled_s": round(profile.samples / rate, 1),
            "self": share(profile.self_samples, profile.samples),
            "inclusive": share(profile.inclusive_samples, profile.samples),
        }
        for name, profile in sorted(stages.items(), key=lambda item: -item[1].samples)
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("profile", type=Path, help="py-spy's `-f raw` output, recorded with `-s`")
    parser.add_argument("--rate", type=float, default=100.0, help="py-spy's sampling rate (its -r)")
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--within", help="only the stacks through a function whose name starts with this")
    args = parser.parse_args()
    if args.rate <= 0 or args.top < 1:
        parser.error("--rate must be above 0 and --top at least 1")
    try:
        with args.profile.open(encoding="utf-8", errors="replace") as lines:
            stages = read_profile(lines, args.within)
    except OSError as error:
        parser.error(f"cannot read the profile {args.profile}: {error.strerror or error}")
    result = summary(stages, args.rate, args.top)
    for name, stage in result.items():
        print(f"{name}: {stage['sampled_s']} s sampled")
        for kind in ("self", "inclusive"):
            for row in stage[kind]:
                print(f"  {kind:9} {row['s']:8.1f} s {row['share']:6.1%}  {row['function']}")
    print(json.dumps({"benchmark": "spy_stages", "profile": str(args.profile), "rate": args.rate, "stages": result}))


if __name__ == "__main__":
    main()
