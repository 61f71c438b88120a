"""The demo corpus generator at paper scale: wall time, files per second and peak memory, against the committed one.

    .venv/bin/python perf/demo_corpus.py                      # 16 countries x 139 concepts (the paper's), 3 runs
    .venv/bin/python perf/demo_corpus.py --countries 8 --concepts 35 --repeats 3 --old-repeats 3  # a quarter

Each run is a fresh child process that draws the corpus into a temporary folder (the shipped countries and concepts
of data/reference, `images_per_query` at its default), CPU seconds of all its processes counted. The old generator
is `git show <--old-ref>:demo/corpus.py`, written to a temporary module and run the same way in the same
invocation, interleaved with the new one. Memory: the child's own peak RSS (ru_maxrss), and the largest worker's and
the peak of their sum over the whole process tree, both sampled every 50 ms (a spawned worker's ru_maxrss would
report its parent's at the fork that started it). The two corpora are compared file by file (sha256). Prints
medians and ends with one JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import itertools
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import psutil  # type: ignore[import-untyped]  # no stubs in the lock

ROOT = Path(__file__).resolve().parents[1]


def _load(module_path: str | None) -> ModuleType:
    if module_path is None:
        import demo.corpus as current

        return current
    spec = importlib.util.spec_from_file_location("old_demo_corpus", module_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_demo_corpus"] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def _child(args: argparse.Namespace) -> None:
    """One generation; prints its figures as JSON."""
    from data.reference import default_pack

    module = _load(args.module)
    countries = [c.name for c in default_pack().countries][: args.countries]
    concepts = sorted(c.concept for c in default_pack().concepts)[: args.concepts]
    config = module.DemoCorpusConfig(countries=countries, concepts=concepts)
    start = time.perf_counter()
    truth = module.generate_demo_corpus(config, args.out)
    wall = time.perf_counter() - start
    files = len(truth.originals) + len(truth.duplicates) + len(truth.lookalikes) + len(truth.bad_files)
    own, workers = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    # The worker processes' CPU time counts; their ru_maxrss does not (see the module's docstring).
    kib = 1024
    print(
        json.dumps(
            {
                "wall_s": wall,
                "files": files,
                # CPU seconds of every process, imports included: a measure other processes on the machine
                # disturb far less than the wall time.
                "cpu_s": own.ru_utime + own.ru_stime + workers.ru_utime + workers.ru_stime,
                "main_rss_mb": own.ru_maxrss / kib,
            }
        )
    )


def _tree_rss(process: psutil.Process) -> tuple[int, int]:
    """The RSS of `process` and all its descendants, and the largest of a descendant's."""
    total = largest = 0
    for p in [process, *process.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):  # a worker that just left
            rss = p.memory_info().rss
            total += rss
            largest = max(largest, rss if p is not process else 0)
    return total, largest


def _run(module: str | None, countries: int, concepts: int, out: Path) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", "--countries", str(countries), "--concepts", str(concepts)]
    command += ["--out", str(out)] + (["--module", module] if module else [])
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    peak = worker_peak = 0
    watched = psutil.Process(process.pid)
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak, worker_peak
        while not stop.wait(0.05):
            try:
                total, largest = _tree_rss(watched)
            except psutil.Error:
                return
            peak, worker_peak = max(peak, total), max(worker_peak, largest)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout, _ = process.communicate()
    stop.set()
    sampler.join()
    if process.returncode:
        raise SystemExit(f"generation failed ({process.returncode})")
    figures: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    figures["tree_rss_peak_mb"] = peak / 2**20
    figures["worker_rss_mb"] = worker_peak / 2**20
    figures["files_per_s"] = figures["files"] / figures["wall_s"]
    return figures


def _digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(run[key] for run in runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--countries", type=int, default=16)
    parser.add_argument("--concepts", type=int, default=139)
    parser.add_argument("--repeats", type=int, default=3, help="runs of the current generator")
    parser.add_argument("--old-repeats", type=int, default=1, help="runs of the old one (0: skip it)")
    parser.add_argument("--old-ref", default="HEAD")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--module", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args)
        return

    work = Path(tempfile.mkdtemp(prefix="demo-corpus-perf-"))
    try:
        old_module = work / "old_demo_corpus.py"
        source = subprocess.run(
            ["git", "show", f"{args.old_ref}:demo/corpus.py"], cwd=ROOT, check=True, capture_output=True
        ).stdout
        old_module.write_bytes(source)
        results: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
        digests: dict[str, str] = {}
        # Interleaved, so that a change of load on a shared machine falls on both alike.
        new: list[tuple[str, str | None]] = [("new", None)] * args.repeats
        old: list[tuple[str, str | None]] = [("old", str(old_module))] * args.old_repeats
        plan = [run for pair in itertools.zip_longest(new, old) for run in pair if run is not None]
        for index, (name, module) in enumerate(plan):
            out = work / f"{name}-{index}"
            run = _run(module, args.countries, args.concepts, out)
            results[name].append(run)
            digests.setdefault(name, _digest(out))
            shutil.rmtree(out)
            print(
                f"{name}: {run['files']} files in {run['wall_s']:.1f} s ({run['files_per_s']:.0f} files/s, "
                f"{run['cpu_s']:.0f} CPU s); peak RSS "
                f"main {run['main_rss_mb']:.0f} MB, largest worker {run['worker_rss_mb']:.0f} MB, "
                f"process tree {run['tree_rss_peak_mb']:.0f} MB",
                flush=True,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)

    summary: dict[str, Any] = {"countries": args.countries, "concepts": args.concepts}
    for name, runs in results.items():
        if runs:
            summary[name] = {
                "runs": len(runs),
                "files": runs[0]["files"],
                "wall_s": round(_median(runs, "wall_s"), 2),
                "files_per_s": round(_median(runs, "files_per_s"), 1),
                "cpu_ms_per_file": round(1000 * _median(runs, "cpu_s") / runs[0]["files"], 2),
                "tree_rss_peak_mb": round(max(run["tree_rss_peak_mb"] for run in runs)),
                "main_rss_mb": round(max(run["main_rss_mb"] for run in runs)),
                "worker_rss_mb": round(max(run["worker_rss_mb"] for run in runs)),
            }
    if results["old"] and results["new"]:
        summary["speedup"] = round(summary["new"]["files_per_s"] / summary["old"]["files_per_s"], 2)
        summary["cpu_per_file_ratio"] = round(summary["old"]["cpu_ms_per_file"] / summary["new"]["cpu_ms_per_file"], 2)
        summary["load_average"] = [round(v, 2) for v in os.getloadavg()]
        summary["identical_output"] = digests["old"] == digests["new"]
        print(
            f"speedup {summary['speedup']}x (median files/s), CPU per file {summary['cpu_per_file_ratio']}x less; "
            f"peak RSS {summary['old']['tree_rss_peak_mb']} MB -> "
            f"{summary['new']['tree_rss_peak_mb']} MB; identical output: {summary['identical_output']}"
        )
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
