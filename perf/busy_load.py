"""A busy machine on demand: N processes that each keep a core busy (a pure-Python loop), so that the suite can be run
beside other work, as users and reviewers run it.

    .venv/bin/python perf/busy_load.py --processes 4 &          # until stopped (SIGTERM or Ctrl-C)
    make test
    kill %1

    .venv/bin/python perf/busy_load.py --processes 4 --seconds 60

Stops its processes however it ends, and ends with one JSON line: the processes, the seconds it ran, the cores, and
the load averages (1, 5, 15 minutes) at its start and at its end.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable
from types import FrameType


def spin(parent: int) -> None:
    """Busy until killed, or until its parent is gone (a parent killed with SIGKILL stops no one); SIGINT (a Ctrl-C
    reaches the whole process group) is the parent's to handle."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while os.getppid() == parent:
        for _ in range(1_000_000):
            pass


def positive(kind: Callable[[str], float]) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be above 0: {text!r}")
        return value

    return parse


def _stop(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # SIGTERM ends the run as Ctrl-C does: the finally below stops the processes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=positive(int), default=4, help="busy processes (default 4)")
    parser.add_argument("--seconds", type=positive(float), default=None, help="stop after this long (default: never)")
    args = parser.parse_args(argv)

    signal.signal(signal.SIGTERM, _stop)
    load_before = os.getloadavg()
    start = time.monotonic()
    context = multiprocessing.get_context("spawn")  # a fresh interpreter each: no copy of this one's state
    workers = [context.Process(target=spin, args=(os.getpid(),), daemon=True) for _ in range(args.processes)]
    try:
        for worker in workers:
            worker.start()
        print(f"busy_load: {args.processes} busy processes (pids {[w.pid for w in workers]})", file=sys.stderr)
        if args.seconds is None:
            while True:
                time.sleep(3600)
        time.sleep(args.seconds)
    except KeyboardInterrupt:
        pass
    finally:
        started = [worker for worker in workers if worker.pid is not None]
        for worker in started:
            worker.kill()
        for worker in started:
            worker.join()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(
        json.dumps(
            {
                "benchmark": "busy_load",
                "processes": args.processes,
                "seconds": round(time.monotonic() - start, 1),
                "cores": cores,
                "load_at_start": [round(x, 2) for x in load_before],
                "load_at_end": [round(x, 2) for x in os.getloadavg()],
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
