"""Waiting for a server the suite started: as long as the machine needs, and no longer than a failure takes to show.

Every server start in the suite waits here (Label Studio, Prefect's temporary API servers, a real `prefect server`,
the fake image host). A wait has a base, what the start needs on an idle machine with a margin, and its deadline is
the base times the load factor: the runnable processes per core (`os.getloadavg()`'s last minute over the cores this
process may use), at least 1, at most `MAX_LOAD_FACTOR`. The load is read at every poll and the largest factor seen
holds, so a machine that gets busy during the wait moves the deadline out, never in. A fixed number of seconds is
either too short beside other work or far too long for a real failure; the failures are caught apart instead:

- a server process that exits fails the wait at once, naming its exit code, with its log's tail;
- one that is alive but has used no CPU (its processes together) and written nothing to its log for `stall_s` fails
  then (hung, or serving where nobody asks), not at the end of a deadline stretched by the load.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

#: The most a deadline grows: a machine 6 times busier than its cores (load 12 on 2).
MAX_LOAD_FACTOR = 6.0
#: Alive with no CPU used and no log written for this long: not starting. A server that migrates or imports uses CPU
#: all along, even when other work leaves it a fifth of a core.
STALL_S = 90.0
POLL_S = 0.5
LOG_LINES = 40


class ServerExited(RuntimeError):
    """The server's process ended before it was ready."""

    def __init__(self, message: str, returncode: int) -> None:
        super().__init__(message)
        self.returncode = returncode


class NotReady(TimeoutError):
    """The server did not get ready in time, or stopped making progress while alive."""


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def load_factor(loadavg: Callable[[], tuple[float, float, float]] = os.getloadavg, cpus: int | None = None) -> float:
    """How many times the machine's cores its runnable processes are: 1 on a machine with a core to spare."""
    return min(MAX_LOAD_FACTOR, max(1.0, loadavg()[0] / (cpus or cores())))


def wait_until_ready(
    what: str,
    ready: Callable[[], bool],
    base_s: float,
    process: subprocess.Popen[Any] | None = None,
    log_path: Path | None = None,
    stall_s: float = STALL_S,
    poll_s: float = POLL_S,
) -> float:
    """Poll `ready` until it answers True; returns the seconds that took. `ready` raising OSError (requests'
    errors are OSErrors) or ValueError (a half-written answer) counts as not yet; any other error is a bug in the
    probe and propagates. `process` and `log_path` are the server's, to tell a dead or hung server (see above)."""
    start = time.monotonic()
    factor = 1.0
    progress = _Progress(process, log_path, start)
    last = "no answer yet"
    while True:
        if process is not None and process.poll() is not None:
            raise ServerExited(
                f"{what}: its process exited with code {process.returncode} after {time.monotonic() - start:.0f} s, "
                f"before it was ready{_tail(log_path)}",
                process.returncode,
            )
        try:
            if ready():
                return time.monotonic() - start
            last = "answered, not ready"
        except (OSError, ValueError) as exc:
            last = f"{type(exc).__name__}: {str(exc)[:200]}"
        now = time.monotonic()
        factor = max(factor, load_factor())
        limit_s = base_s * factor
        if now - start >= limit_s:
            raise NotReady(
                f"{what} was not ready within {limit_s:.0f} s ({base_s:.0f} s times the load factor {factor:.1f}); "
                f"last: {last}{_tail(log_path)}"
            )
        idle_s = progress.idle_s(now)
        if idle_s >= stall_s:
            raise NotReady(
                f"{what}: its process is alive but used no CPU and wrote no log for {idle_s:.0f} s (hung, or ready "
                f"where nobody asks); last: {last}{_tail(log_path)}"
            )
        time.sleep(poll_s)


def answers_200(url: str, timeout_s: float = 10.0) -> bool:
    """A probe for `wait_until_ready`: `url` answers 200 (asked directly, never through a proxy)."""
    with requests.Session() as session:
        session.trust_env = False
        return session.get(url, timeout=timeout_s).status_code == 200


class _Progress:
    """When the server last did something: its processes' CPU ticks or its log's size changed."""

    def __init__(self, process: subprocess.Popen[Any] | None, log_path: Path | None, now: float) -> None:
        self.process = process
        self.log_path = log_path
        self.mark: tuple[int | None, int | None] = self._sample()
        self.since = now

    def _sample(self) -> tuple[int | None, int | None]:
        ticks = tree_cpu_ticks(self.process.pid) if self.process is not None else None
        size = None
        if self.log_path is not None:
            try:
                size = self.log_path.stat().st_size
            except OSError:
                size = -1
        return ticks, size

    def idle_s(self, now: float) -> float:
        """Seconds since the last change; 0 when nothing can be watched (no process on /proc, no log)."""
        mark = self._sample()
        if mark == (None, None):
            return 0.0
        if mark != self.mark:
            self.mark, self.since = mark, now
        return now - self.since


def tree_cpu_ticks(pid: int) -> int | None:
    """User and system clock ticks of `pid` and every process below it, their reaped children's included (from
    /proc); None where there is no /proc."""
    proc = Path("/proc")
    if not proc.is_dir():
        return None
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        # After the command's closing parenthesis: state, ppid, ..., utime, stime, cutime, cstime (stat fields 3-17).
        parents[int(entry.name)] = int(fields[1])
        ticks[int(entry.name)] = sum(int(value) for value in fields[11:15])
    total, frontier = 0, {pid}
    while frontier:
        total += sum(ticks.get(p, 0) for p in frontier)
        frontier = {child for child, parent in parents.items() if parent in frontier}
    return total


def _tail(log_path: Path | None, lines: int = LOG_LINES) -> str:
    if log_path is None:
        return ""
    try:
        text = "\n".join(log_path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        text = "(no log)"
    return f"; log {log_path}:\n{text}"
