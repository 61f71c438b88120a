"""Our HTTP downloader against img2dataset 1.47 on the same loopback URL list, in the same run.

A fault-injecting image host (tests/fake_image_host.py) runs in its own process with 50 ms of latency per request.
It serves a corpus of ~300 distinct JPEGs (20-120 KB) under many distinct URLs, with planted faults: 404s, HTML
served as image/jpeg, bodies cut short of their Content-Length, and a 429 with Retry-After on the first hit of a
URL. Each tool runs as a child process; wall time and the peak RSS of its whole process tree (psutil, polled) are
measured, `--repeats` times, and medians are compared. Targets: ours <= 2/3 of img2dataset's wall time and
<= 1/2 of its peak RSS. The last line printed is one JSON object with all figures.

    .venv/bin/python perf/download_vs_img2dataset.py [--urls 10000] [--concurrency 64] [--repeats 3] [--quick]
                                                           [--unique-bytes]

Read the figures knowing what each tool does per URL. img2dataset (`--disable_all_reencoding True`) stores the
bytes without decoding them, so HTML served as an image counts as a success; ours decodes every distinct body
(`inspect_image`) and keeps the verdict by sha256, so the default corpus (~300 images behind 10,000 URLs) is
decoded ~300 times. `--unique-bytes` gives every URL distinct bytes: ours then decodes 10,000 images. Ours also
waits out each Retry-After (1 s) where img2dataset retries at once.

img2dataset is installed on first use into perf/.venv-img2dataset (from PyPI).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
I2D_VENV = ROOT / "perf" / ".venv-img2dataset"
I2D_VERSION = "1.47.0"
sys.path.insert(0, str(ROOT / "tests"))

# Planted faults, their share of the URLs, and the class our downloader must report for each.
FAULTS = {"404": 0.03, "html": 0.03, "truncated": 0.03, "429": 0.03}
EXPECTED = {"ok": None, "429": None, "404": "http_404", "html": "not_an_image", "truncated": "truncated"}
RECOVERABLE = {"ok", "429"}
TARGET_WALL_RATIO = 2 / 3
TARGET_RSS_RATIO = 1 / 2


def plan_urls(n: int, corpus: int, seed: int, unique_bytes: bool = False) -> list[tuple[str, str]]:
    """(path, planted fault) pairs; every corpus image is served under several distinct paths (with distinct
    bytes per path when `unique_bytes`)."""
    rng = random.Random(seed)
    plan = []
    for i in range(n):
        draw, fault, edge = rng.random(), "ok", 0.0
        for name, share in FAULTS.items():
            edge += share
            if draw < edge:
                fault = name
                break
        image = i % corpus
        path = {
            "ok": f"/img/{image}/u{i}.jpg",
            "429": f"/429/{image}/u{i}.jpg",
            "404": f"/status/404/u{i}.jpg",
            "html": f"/html/u{i}.jpg",
            "truncated": f"/truncated/{image}/u{i}.jpg",
        }[fault]
        if unique_bytes and fault in ("ok", "429", "truncated"):
            path += "?unique=1"
        plan.append((path, fault))
    return plan


# -- running and measuring -------------------------------------------------------------------------------------


def child_env(**extra: str) -> dict[str, str]:
    """Children may cache bytecode, as any installed tool does (pip compiled img2dataset's at install time)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(extra)
    return env


def warm_up(exe: Path) -> None:
    """Untimed: import both tools once so that neither pays for compiling bytecode in a measured run."""
    subprocess.run([sys.executable, "-c", "import collectors.downloader"], check=True, env=child_env(), cwd=ROOT)
    i2d_python = exe.parent / "python"
    env = child_env(NO_ALBUMENTATIONS_UPDATE="1")
    subprocess.run([str(i2d_python), "-c", "import img2dataset"], check=True, env=env, cwd=ROOT)


def measure(cmd: list[str], env: dict[str, str], log: Path) -> tuple[float, int, int]:
    """Run `cmd`; return wall seconds, peak RSS summed over its process tree (bytes), exit code."""
    out = open(log, "wb")  # noqa: SIM115 - closed below
    start = time.perf_counter()
    proc = psutil.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    peak = 0
    while proc.poll() is None:
        total = 0
        with contextlib.suppress(psutil.NoSuchProcess):
            for p in [proc, *proc.children(recursive=True)]:
                with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                    total += p.memory_info().rss
        peak = max(peak, total)
        time.sleep(0.02)
    wall = time.perf_counter() - start
    out.close()
    return wall, peak, proc.returncode


def ensure_img2dataset() -> Path:
    exe = I2D_VENV / "bin" / "img2dataset"
    if not exe.exists():
        print(f"installing img2dataset {I2D_VERSION} into {I2D_VENV} ...", flush=True)
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", str(I2D_VENV)], check=True)
        pip = [str(I2D_VENV / "bin" / "python"), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, f"img2dataset=={I2D_VERSION}"], check=True)
    return exe


def run_ours(work: Path, args: argparse.Namespace) -> tuple[float, int, dict[str, str | None]]:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--_child-ours",
        str(work),
        f"--concurrency={args.concurrency}",
        f"--timeout={args.timeout}",
    ]
    wall, rss, rc = measure(cmd, env=child_env(), log=work / "ours.log")
    if rc != 0:
        raise RuntimeError(f"our downloader failed (rc {rc}); see {work / 'ours.log'}")
    return wall, rss, json.loads((work / "ours.json").read_text())


def child_ours(work: Path, concurrency: int, timeout: float) -> None:
    """The measured process for our downloader: what a download shard does, on the whole list."""
    from collectors.downloader import DownloadJournal, HttpDownloadConfig, download_hits
    from data.retry import RetryPolicy
    from data.workspace import BlobStore, Storage

    urls = (work / "urls.txt").read_text().split()
    storage = Storage(str(work / "ours-workspace"))
    config = HttpDownloadConfig(
        concurrency=concurrency,
        per_host_concurrency=concurrency,  # one loopback host here; img2dataset has no per-host limit
        connect_timeout_s=timeout,
        read_timeout_s=timeout,
        allow_private_addresses=True,  # the host is on loopback
        retry=RetryPolicy(max_attempts=3),  # as img2dataset --retries 2
    )
    hits = [{"image_id": f"i{i}", "url": u} for i, u in enumerate(urls)]
    table = download_hits(hits, BlobStore(storage, "blobs"), config, journal=DownloadJournal(storage, "journal"))
    result = {u: e for u, e in zip(table["url"].to_pylist(), table["error"].to_pylist(), strict=True)}
    (work / "ours.json").write_text(json.dumps(result))


_I2D_PATTERNS = [
    (re.compile(r"HTTP Error (\d+)"), None),
    (re.compile(r"IncompleteRead|incomplete read|Connection reset|RemoteDisconnected", re.I), "truncated"),
    (re.compile(r"timed out|timeout", re.I), "timeout"),
    (re.compile(r"Name or service not known|nodename nor servname|getaddrinfo", re.I), "dns"),
    (re.compile(r"Connection refused", re.I), "connect"),
    (re.compile(r"cannot identify|decode|not an image", re.I), "not_an_image"),
]


def i2d_class(status: str, message: str | None) -> str | None:
    """img2dataset's status and error message as one of our classes (None = success)."""
    if status == "success":
        return None
    message = message or ""
    for pattern, name in _I2D_PATTERNS:
        match = pattern.search(message)
        if match:
            return name or f"http_{match.group(1)}"
    return f"other: {message[:60]}"


def run_img2dataset(exe: Path, work: Path, args: argparse.Namespace, run: int) -> tuple[float, int, dict]:
    out = work / f"i2d-out-{run}"
    cmd = [
        str(exe),
        f"--url_list={work / 'urls.txt'}",
        "--input_format=txt",
        f"--output_folder={out}",
        "--output_format=files",
        "--resize_mode=no",
        "--processes_count=1",
        f"--thread_count={args.concurrency}",
        "--retries=2",
        f"--timeout={int(args.timeout)}",
        "--disable_all_reencoding=True",
        f"--number_sample_per_shard={max(args.urls, 10)}",
    ]
    env = child_env(NO_ALBUMENTATIONS_UPDATE="1")  # no update check over the network
    wall, rss, rc = measure(cmd, env=env, log=work / f"i2d-{run}.log")
    if rc != 0:
        raise RuntimeError(f"img2dataset failed (rc {rc}); see {work / f'i2d-{run}.log'}")
    import pyarrow.parquet as pq

    result: dict[str, str | None] = {}
    for part in sorted(out.glob("*.parquet")):
        table = pq.read_table(part, columns=["url", "status", "error_message"]).to_pylist()
        for row in table:
            result[row["url"]] = i2d_class(row["status"], row["error_message"])
    shutil.rmtree(out, ignore_errors=True)
    return wall, rss, result


# -- checking ----------------------------------------------------------------------------------------------------


def summarize(result: dict[str, str | None], planned: dict[str, str]) -> dict:
    classes = Counter(e or "ok" for e in result.values())
    recoverable = [u for u, fault in planned.items() if fault in RECOVERABLE]
    missed_recoverable = sum(1 for u in recoverable if result.get(u, "missing") is not None)
    wrong_class = sum(1 for u, fault in planned.items() if result.get(u, "missing") != EXPECTED[fault])
    return {
        "successes": classes.get("ok", 0),
        "failures": sum(v for k, v in classes.items() if k != "ok"),
        "by_class": dict(sorted(classes.items())),
        "missing_rows": sum(1 for u in planned if u not in result),
        "recoverable_missed": missed_recoverable,
        "all_recoverable_ok": missed_recoverable == 0,
        "planted_class_mismatches": wrong_class,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--urls", type=int, default=10_000)
    parser.add_argument("--corpus", type=int, default=300, help="Distinct images behind the URLs.")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.05, help="Server latency per request, seconds.")
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="2,000 URLs, one repeat: a smoke run.")
    parser.add_argument(
        "--unique-bytes",
        action="store_true",
        help="Every URL serves distinct bytes (a JPEG comment), so no image check can be reused across URLs.",
    )
    parser.add_argument("--_child-ours", dest="child_ours", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_ours:
        child_ours(Path(args.child_ours), args.concurrency, args.timeout)
        return
    if args.quick:
        args.urls, args.repeats = 2_000, 1

    from fake_image_host import FakeImageHostProcess

    exe = ensure_img2dataset()
    warm_up(exe)
    work = Path(tempfile.mkdtemp(prefix="download-bench-"))
    print(f"starting the image host (corpus {args.corpus}, latency {args.latency * 1000:.0f} ms) ...", flush=True)
    server = FakeImageHostProcess(corpus_size=args.corpus, seed=args.seed, latency_s=args.latency).start()
    try:
        plan = plan_urls(args.urls, args.corpus, args.seed, args.unique_bytes)
        planned = {server.url(path): fault for path, fault in plan}
        (work / "urls.txt").write_text("\n".join(planned) + "\n")
        print(f"{len(planned)} URLs, faults planted: {dict(Counter(planned.values()))}", flush=True)
        figures: dict[str, dict[str, list]] = {"ours": {"wall": [], "rss": []}, "img2dataset": {"wall": [], "rss": []}}
        summaries: dict[str, dict] = {}
        for run in range(args.repeats):
            # Alternate the order so that neither tool always runs on a warmer machine.
            order = ["ours", "img2dataset"] if run % 2 == 0 else ["img2dataset", "ours"]
            for tool in order:
                server.reset()  # 429s answer their first hit again
                shutil.rmtree(work / "ours-workspace", ignore_errors=True)
                if tool == "ours":
                    wall, rss, result = run_ours(work, args)
                else:
                    wall, rss, result = run_img2dataset(exe, work, args, run)
                figures[tool]["wall"].append(wall)
                figures[tool]["rss"].append(rss)
                summary = summarize(result, planned)
                summaries[tool] = summary
                print(
                    f"run {run + 1}/{args.repeats} {tool:12s} wall {wall:6.2f} s  peak RSS {rss / 2**20:7.1f} MiB  "
                    f"ok {summary['successes']}  failed {summary['failures']}  {summary['by_class']}",
                    flush=True,
                )
    except BaseException:
        print(f"kept {work} for inspection", file=sys.stderr)
        raise
    else:
        shutil.rmtree(work, ignore_errors=True)
    finally:
        server.stop()

    med = {t: {k: statistics.median(v) for k, v in f.items()} for t, f in figures.items()}
    wall_ratio = med["ours"]["wall"] / med["img2dataset"]["wall"]
    rss_ratio = med["ours"]["rss"] / med["img2dataset"]["rss"]
    print()
    print(f"{'':14s}{'wall (median)':>16s}{'peak RSS (median)':>20s}{'ok':>8s}{'failed':>8s}  all recoverable ok")
    for tool in ("ours", "img2dataset"):
        s = summaries[tool]
        print(
            f"{tool:14s}{med[tool]['wall']:14.2f} s{med[tool]['rss'] / 2**20:16.1f} MiB"
            f"{s['successes']:8d}{s['failures']:8d}  {s['all_recoverable_ok']}"
        )
    for tool in ("ours", "img2dataset"):
        print(f"failures by class, {tool}: {summaries[tool]['by_class']}")
    print(f"our failures with the wrong class for their planted fault: {summaries['ours']['planted_class_mismatches']}")
    print(
        f"img2dataset rows that differ from the planted fault's class: "
        f"{summaries['img2dataset']['planted_class_mismatches']} (it does not decode: HTML bodies count as images)"
    )
    wall_met, rss_met = wall_ratio <= TARGET_WALL_RATIO, rss_ratio <= TARGET_RSS_RATIO
    print(f"wall ratio ours/img2dataset {wall_ratio:.3f} (target <= {TARGET_WALL_RATIO:.3f}): {wall_met}")
    print(f"RSS ratio ours/img2dataset {rss_ratio:.3f} (target <= {TARGET_RSS_RATIO:.3f}): {rss_met}")
    print(
        json.dumps(
            {
                "urls": args.urls,
                "corpus": args.corpus,
                "concurrency": args.concurrency,
                "latency_s": args.latency,
                "unique_bytes": args.unique_bytes,
                "repeats": args.repeats,
                "wall_s": {t: {"median": med[t]["wall"], "runs": figures[t]["wall"]} for t in figures},
                "peak_rss_mib": {
                    t: {"median": med[t]["rss"] / 2**20, "runs": [r / 2**20 for r in figures[t]["rss"]]}
                    for t in figures
                },
                "wall_ratio": wall_ratio,
                "rss_ratio": rss_ratio,
                "targets": {"wall_ratio": TARGET_WALL_RATIO, "rss_ratio": TARGET_RSS_RATIO},
                "wall_target_met": wall_met,
                "rss_target_met": rss_met,
                "ours": summaries["ours"],
                "img2dataset": summaries["img2dataset"],
                "ours_classes_correct": summaries["ours"]["planted_class_mismatches"] == 0,
            }
        )
    )


if __name__ == "__main__":
    main()
