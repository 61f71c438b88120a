"""Our HTTP downloader against img2dataset 1.47 on the same loopback URL list, in the same run.

A fault-injecting image host (tests/support/fake_image_host.py) runs in its own process and serves a corpus of ~300
distinct JPEGs (20-120 KB) under many distinct URLs, with planted faults: 404s, HTML served as image/jpeg, bodies
cut short of their Content-Length, and a 429 with Retry-After on the first hit of a URL. Both tools are run
against two such hosts in turn (`--hosts`, both by default):

- `latency`: 50 ms of latency per request (`--latency`), otherwise idle: the host waits, the client works;
- `cpu`: no added latency, but every request burns `--cpu-host-ms` (2 ms) of CPU synchronously in the host's one
  event loop, so the host serves one request at a time and competes with the client for the same cores, as a slow
  real host on the same machine would. A client's own CPU then slows the host down.

Each tool runs as a child process, `--repeats` times per host, and medians are compared. Measured per run: wall
time; the peak RSS of its whole process tree (psutil, polled every 20 ms); and CPU seconds per 1,000 URLs, the
user + system CPU time of the whole tree (the child and every process it spawned and waited for, img2dataset's
short-lived pool workers included) from `os.wait4` on the child, divided by the URL count x 1000. The host's own
CPU is in neither tool's figure (it is not their child). A polled figure (psutil: the largest sum, over the live
tree, of each process's CPU plus what it had reaped) is printed beside it as a cross-check; it can only fall short,
by what ran after the last poll, unless a tool leaves processes it never waits for. Both CPU figures include
interpreter start-up and imports.

Targets, checked on the latency host: ours <= 2/3 of img2dataset's wall time and <= 1/2 of its peak RSS. On the
CPU-bound host the ratios (wall, RSS, CPU) are reported, not targets: its wall times depend on how many cores the
machine has for the host and the client to share (with cores to spare, a client's CPU hardly slows the host; on
two cores it does). The last line printed is one JSON object with all figures: the top-level keys are the latency
host's (the first host run when it is not run), `hosts` holds every host's, `wall_ratio_by_host` and
`cpu_ratio_by_host` sum them up.

    .venv/bin/python perf/download_vs_img2dataset.py [--urls 10000] [--concurrency 64] [--repeats 3] [--quick]
                                                           [--unique-bytes] [--hosts latency,cpu] [--cpu-host-ms 2]

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
from dataclasses import dataclass
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
I2D_VENV = ROOT / "perf" / ".venv-img2dataset"
I2D_VERSION = "1.47.0"
sys.path.insert(0, str(ROOT))

# Planted faults, their share of the URLs, and the class our downloader must report for each.
FAULTS = {"404": 0.03, "html": 0.03, "truncated": 0.03, "429": 0.03}
EXPECTED = {"ok": None, "429": None, "404": "http_404", "html": "not_an_image", "truncated": "truncated"}
RECOVERABLE = {"ok", "429"}
TARGET_WALL_RATIO = 2 / 3
TARGET_RSS_RATIO = 1 / 2
HOSTS = ("latency", "cpu")  # see the module docstring
TOOLS = ("ours", "img2dataset")


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


@dataclass(frozen=True)
class Measurement:
    wall_s: float
    peak_rss: int  # bytes, summed over the process tree, polled
    cpu_s: float  # user + system of the child and every descendant it waited for (os.wait4)
    cpu_polled_s: float  # cross-check: the largest polled sum over the live tree, reaped children included
    returncode: int


def _tree_sample(procs: list[psutil.Process]) -> tuple[int, float]:
    """RSS and CPU seconds summed over live processes; each one's CPU includes the children it has reaped (which
    are no longer live, so nothing is counted twice within one sample)."""
    rss, cpu = 0, 0.0
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied), p.oneshot():
            memory, t = p.memory_info(), p.cpu_times()
            rss += memory.rss
            cpu += t.user + t.system + t.children_user + t.children_system
    return rss, cpu


def measure(cmd: list[str], env: dict[str, str], log: Path, cwd: Path = ROOT, poll_s: float = 0.02) -> Measurement:
    """Run `cmd` to its end; wall time, peak RSS and CPU time of its whole process tree.

    The CPU figure is the child's resource usage as `os.wait4` reports it when reaping it: its own user + system
    time plus that of every descendant reaped below it (the kernel adds a process's times to its parent's on
    reaping), so workers that lived between two polls are counted too. The polled psutil figure is a lower bound
    to compare it with."""
    with open(log, "wb") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        try:
            root = psutil.Process(proc.pid)
            peak, cpu_polled = 0, 0.0
            while True:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid == proc.pid:
                    break
                try:
                    procs = [root, *root.children(recursive=True)]
                except psutil.NoSuchProcess:
                    procs = []
                rss, cpu = _tree_sample(procs)
                peak, cpu_polled = max(peak, rss), max(cpu_polled, cpu)
                time.sleep(poll_s)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped above: Popen must not wait for it again
    return Measurement(wall, peak, usage.ru_utime + usage.ru_stime, cpu_polled, proc.returncode)


def ensure_img2dataset() -> Path:
    exe = I2D_VENV / "bin" / "img2dataset"
    if not exe.exists():
        print(f"installing img2dataset {I2D_VERSION} into {I2D_VENV} ...", flush=True)
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", str(I2D_VENV)], check=True)
        pip = [str(I2D_VENV / "bin" / "python"), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, f"img2dataset=={I2D_VERSION}"], check=True)
    return exe


def run_ours(work: Path, args: argparse.Namespace) -> tuple[Measurement, dict[str, str | None]]:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--_child-ours",
        str(work),
        f"--concurrency={args.concurrency}",
        f"--timeout={args.timeout}",
    ]
    m = measure(cmd, env=child_env(), log=work / "ours.log")
    if m.returncode != 0:
        raise RuntimeError(f"our downloader failed (rc {m.returncode}); see {work / 'ours.log'}")
    return m, json.loads((work / "ours.json").read_text())


def child_ours(work: Path, concurrency: int, timeout: float) -> None:
    """The measured process for our downloader: what a download shard does, on the whole list."""
    from collectors.downloader import DownloadJournal, HttpDownloadConfig, download_hits
    from data.clients.retry import RetryPolicy
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


def run_img2dataset(exe: Path, work: Path, args: argparse.Namespace, run: int) -> tuple[Measurement, dict]:
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
    m = measure(cmd, env=env, log=work / f"i2d-{run}.log")
    if m.returncode != 0:
        raise RuntimeError(f"img2dataset failed (rc {m.returncode}); see {work / f'i2d-{run}.log'}")
    import pyarrow.parquet as pq

    result: dict[str, str | None] = {}
    for part in sorted(out.glob("*.parquet")):
        table = pq.read_table(part, columns=["url", "status", "error_message"]).to_pylist()
        for row in table:
            result[row["url"]] = i2d_class(row["status"], row["error_message"])
    shutil.rmtree(out, ignore_errors=True)
    return m, result


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


def host_settings(name: str, args: argparse.Namespace) -> dict[str, float]:
    if name == "latency":
        return {"latency_s": args.latency, "cpu_ms_per_request": 0.0}
    return {"latency_s": 0.0, "cpu_ms_per_request": args.cpu_host_ms}


def bench_host(name: str, exe: Path, work: Path, args: argparse.Namespace) -> dict:
    """Both tools, `args.repeats` times each, against one fresh host; this host's figures and summaries."""
    from tests.support.fake_image_host import FakeImageHostProcess

    settings = host_settings(name, args)
    print(
        f"[{name}] starting the image host (corpus {args.corpus}, latency {settings['latency_s'] * 1000:.0f} ms, "
        f"CPU {settings['cpu_ms_per_request']:g} ms per request) ...",
        flush=True,
    )
    server = FakeImageHostProcess(corpus_size=args.corpus, seed=args.seed, **settings).start()
    try:
        plan = plan_urls(args.urls, args.corpus, args.seed, args.unique_bytes)
        planned = {server.url(path): fault for path, fault in plan}
        (work / "urls.txt").write_text("\n".join(planned) + "\n")
        print(f"[{name}] {len(planned)} URLs, faults planted: {dict(Counter(planned.values()))}", flush=True)
        runs: dict[str, list[Measurement]] = {tool: [] for tool in TOOLS}
        summaries: dict[str, dict] = {}
        for run in range(args.repeats):
            # Alternate the order so that neither tool always runs on a warmer machine.
            order = list(TOOLS) if run % 2 == 0 else list(reversed(TOOLS))
            for tool in order:
                server.reset()  # 429s answer their first hit again
                shutil.rmtree(work / "ours-workspace", ignore_errors=True)
                if tool == "ours":
                    m, result = run_ours(work, args)
                else:
                    m, result = run_img2dataset(exe, work, args, run)
                runs[tool].append(m)
                summary = summarize(result, planned)
                summaries[tool] = summary
                print(
                    f"[{name}] run {run + 1}/{args.repeats} {tool:12s} wall {m.wall_s:6.2f} s  "
                    f"peak RSS {m.peak_rss / 2**20:7.1f} MiB  "
                    f"CPU {m.cpu_s:6.2f} s (polled {m.cpu_polled_s:6.2f} s)  "
                    f"ok {summary['successes']}  failed {summary['failures']}  {summary['by_class']}",
                    flush=True,
                )
    finally:
        server.stop()

    per_1000 = 1000 / len(planned)

    def figure(values: list[float]) -> dict:
        return {"median": statistics.median(values), "runs": values}

    out: dict = {**settings, "wall_s": {}, "peak_rss_mib": {}, "cpu_seconds_per_1000_urls": {}}
    for tool in TOOLS:
        out["wall_s"][tool] = figure([m.wall_s for m in runs[tool]])
        out["peak_rss_mib"][tool] = figure([m.peak_rss / 2**20 for m in runs[tool]])
        cpu = figure([m.cpu_s * per_1000 for m in runs[tool]])
        polled = figure([m.cpu_polled_s * per_1000 for m in runs[tool]])
        out["cpu_seconds_per_1000_urls"][tool] = {
            **cpu,
            "polled_median": polled["median"],
            "polled_runs": polled["runs"],
        }
    for key, figures in (("wall", "wall_s"), ("rss", "peak_rss_mib"), ("cpu", "cpu_seconds_per_1000_urls")):
        out[f"{key}_ratio"] = out[figures]["ours"]["median"] / out[figures]["img2dataset"]["median"]
    out.update(summaries)
    out["ours_classes_correct"] = summaries["ours"]["planted_class_mismatches"] == 0
    return out


def report(name: str, h: dict) -> None:
    print()
    print(
        f"host {name!r}: latency {h['latency_s'] * 1000:.0f} ms, CPU {h['cpu_ms_per_request']:g} ms per request "
        f"(medians)"
    )
    print(
        f"{'':14s}{'wall':>10s}{'peak RSS':>14s}{'CPU s/1000 URLs':>17s}{'(polled)':>10s}{'ok':>8s}{'failed':>8s}"
        f"  all recoverable ok"
    )
    for tool in TOOLS:
        s, cpu = h[tool], h["cpu_seconds_per_1000_urls"][tool]
        print(
            f"{tool:14s}{h['wall_s'][tool]['median']:8.2f} s{h['peak_rss_mib'][tool]['median']:10.1f} MiB"
            f"{cpu['median']:17.3f}{cpu['polled_median']:10.3f}{s['successes']:8d}{s['failures']:8d}"
            f"  {s['all_recoverable_ok']}"
        )
    for tool in TOOLS:
        print(f"failures by class, {tool}: {h[tool]['by_class']}")
    print(f"our failures with the wrong class for their planted fault: {h['ours']['planted_class_mismatches']}")
    print(
        f"img2dataset rows that differ from the planted fault's class: "
        f"{h['img2dataset']['planted_class_mismatches']} (it does not decode: HTML bodies count as images)"
    )
    print(
        f"ratios ours/img2dataset on {name!r}: wall {h['wall_ratio']:.3f}  RSS {h['rss_ratio']:.3f}  "
        f"CPU {h['cpu_ratio']:.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--urls", type=int, default=10_000)
    parser.add_argument("--corpus", type=int, default=300, help="Distinct images behind the URLs.")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.05, help="Latency host: latency per request, seconds.")
    parser.add_argument(
        "--cpu-host-ms", type=float, default=2.0, help="CPU-bound host: CPU milliseconds burnt per request."
    )
    parser.add_argument(
        "--hosts",
        default=",".join(HOSTS),
        help=f"Comma-separated hosts to run against, in order, from {', '.join(HOSTS)}.",
    )
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
    hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
    unknown = sorted(set(hosts) - set(HOSTS))
    if unknown or not hosts or len(set(hosts)) != len(hosts):
        parser.error(f"--hosts: name each of {', '.join(HOSTS)} at most once (got {args.hosts!r})")

    exe = ensure_img2dataset()
    warm_up(exe)
    work = Path(tempfile.mkdtemp(prefix="download-bench-"))
    results: dict[str, dict] = {}
    try:
        for name in hosts:
            results[name] = bench_host(name, exe, work, args)
    except BaseException:
        print(f"kept {work} for inspection", file=sys.stderr)
        raise
    else:
        shutil.rmtree(work, ignore_errors=True)

    for name in hosts:
        report(name, results[name])
    print()
    print("wall ratio ours/img2dataset by host: " + "  ".join(f"{n} {results[n]['wall_ratio']:.3f}" for n in hosts))
    print("CPU ratio ours/img2dataset by host:  " + "  ".join(f"{n} {results[n]['cpu_ratio']:.3f}" for n in hosts))
    primary = "latency" if "latency" in results else hosts[0]
    p = results[primary]
    wall_met = rss_met = None
    if "latency" in results:
        wall_met, rss_met = p["wall_ratio"] <= TARGET_WALL_RATIO, p["rss_ratio"] <= TARGET_RSS_RATIO
        print(f"latency host: wall ratio {p['wall_ratio']:.3f} (target <= {TARGET_WALL_RATIO:.3f}): {wall_met}")
        print(f"latency host: RSS ratio {p['rss_ratio']:.3f} (target <= {TARGET_RSS_RATIO:.3f}): {rss_met}")
    else:
        print("targets not checked: they are for the latency host, which was not run")
    print(
        json.dumps(
            {
                "urls": args.urls,
                "corpus": args.corpus,
                "concurrency": args.concurrency,
                "latency_s": args.latency,
                "cpu_host_ms": args.cpu_host_ms,
                "unique_bytes": args.unique_bytes,
                "repeats": args.repeats,
                "primary_host": primary,
                "wall_s": p["wall_s"],
                "peak_rss_mib": p["peak_rss_mib"],
                "cpu_seconds_per_1000_urls": p["cpu_seconds_per_1000_urls"],
                "wall_ratio": p["wall_ratio"],
                "rss_ratio": p["rss_ratio"],
                "cpu_ratio": p["cpu_ratio"],
                "wall_ratio_by_host": {n: results[n]["wall_ratio"] for n in hosts},
                "cpu_ratio_by_host": {n: results[n]["cpu_ratio"] for n in hosts},
                "targets": {"wall_ratio": TARGET_WALL_RATIO, "rss_ratio": TARGET_RSS_RATIO, "host": "latency"},
                "wall_target_met": wall_met,
                "rss_target_met": rss_met,
                "ours": p["ours"],
                "img2dataset": p["img2dataset"],
                "ours_classes_correct": all(results[n]["ours_classes_correct"] for n in hosts),
                "hosts": results,
            }
        )
    )


if __name__ == "__main__":
    main()
