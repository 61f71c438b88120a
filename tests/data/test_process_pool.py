"""The worker-process pool (`data/process_pool.py`, on loky): a caller that stops reading early stops the sending,
so the workers finish the item they hold and take no more (the build's dedup stops at its first failed batch); a
worker that dies fails only its own item, with its exit code; inside `warm_workers` (a build) the workers and what
they imported serve call after call, where the caller runs now; a worker never imports the caller's `__main__`
again; `run_apart` runs one call in a worker while the caller goes on (the assembly's RQ3)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from data.process_pool import Failed, WorkerDied, run_apart, run_in_processes, warm_workers
from tests.support.paths import REPO_ROOT


def test_a_caller_that_stops_early_stops_the_workers_taking_items(tmp_path: Path) -> None:
    done = tmp_path / "done"
    done.mkdir()

    def slow(item: int) -> int:
        time.sleep(0.3)
        (done / str(item)).touch()
        return item

    outcomes = run_in_processes(slow, list(range(20)), 2)
    first = next(outcomes)
    outcomes.close()
    time.sleep(1.5)  # long enough for a worker to run several more items, were it still fed
    ran = sorted(int(p.name) for p in done.iterdir())
    assert first[1] in ran and len(ran) <= 4  # the first, the one in the other worker's hands, at most one each more


def test_a_killed_worker_fails_only_its_own_item() -> None:
    def work(item: int) -> int:
        if item == 3:
            os.kill(os.getpid(), signal.SIGKILL)  # as the kernel's OOM killer would
        time.sleep(0.2)  # another item is in flight beside it, in the other worker, when it dies
        return item * 10

    outcomes = dict(run_in_processes(work, list(range(8)), 2, lambda item: f"item {item}"))
    assert sorted(outcomes) == list(range(8))  # one outcome each
    failed = outcomes.pop(3)
    assert isinstance(failed, Failed) and failed.item == 3
    assert isinstance(failed.error, WorkerDied)
    assert str(failed.error) == "worker died (exit code -9 / signal SIGKILL) during item 3"
    assert outcomes == {item: item * 10 for item in range(8) if item != 3}  # the others all succeeded


def test_an_error_that_does_not_unpickle_fails_its_item_by_name_and_not_the_others() -> None:
    class Picky(Exception):
        def __init__(self, code: int, why: str) -> None:  # its pickle calls Picky(args): one argument short
            super().__init__(f"{code}: {why}")

    def work(item: int) -> int:
        if item == 1:
            raise Picky(7, "a bad file")
        if item == 2:
            raise ValueError("no such image")
        return item

    outcomes = dict(run_in_processes(work, list(range(5)), 2))
    assert {k: v for k, v in outcomes.items() if not isinstance(v, Failed)} == {0: 0, 3: 3, 4: 4}
    picky, plain = outcomes[1], outcomes[2]
    assert isinstance(picky, Failed) and isinstance(picky.error, RuntimeError)
    assert str(picky.error) == "Picky: 7: a bad file"
    assert isinstance(plain, Failed) and isinstance(plain.error, ValueError) and str(plain.error) == "no such image"


def test_warm_workers_serve_call_after_call_with_what_they_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def first(item: int) -> int:
        import wave  # noqa: F401  # a module no worker imports by itself

        time.sleep(0.3)  # two in flight at once: one in each worker
        return os.getpid()

    def second(item: int) -> tuple[int, bool, str, str | None]:
        return os.getpid(), "wave" in sys.modules, os.getcwd(), os.environ.get("CULTUREBENCH_POOL_TEST")

    with warm_workers(2):
        pids = {pid for _, pid in run_in_processes(first, [0, 1], 2)}
        assert len(pids) == 2 and os.getpid() not in pids
        monkeypatch.chdir(tmp_path)  # where the caller runs now: a relative path means the same in a worker
        monkeypatch.setenv("CULTUREBENCH_POOL_TEST", "set since")
        answers = [answer for _, answer in run_in_processes(second, list(range(6)), 2)]
        assert run_apart(os.getpid, "a call apart")() in pids
    assert {pid for pid, *_ in answers} <= pids  # the same two processes, not new ones
    assert all(imported for _, imported, _, _ in answers)  # with what the first call imported
    assert {(cwd, env) for _, _, cwd, env in answers} == {(str(tmp_path), "set since")}


def test_a_worker_never_imports_the_callers_main_again(tmp_path: Path) -> None:
    log = tmp_path / "runs.log"
    script = tmp_path / "no_guard.py"  # a script without `if __name__ == "__main__":`
    script.write_text(
        "import os\n"
        "from data.process_pool import run_in_processes\n"
        f"with open({str(log)!r}, 'a') as out:\n"
        "    out.write(f'{os.getpid()}\\n')\n"
        "print(sorted(outcome for _, outcome in run_in_processes(lambda x: x + 1, [1, 2, 3], 2)))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[2, 3, 4]"
    assert len(log.read_text().splitlines()) == 1  # the script ran once: in its own process, not in the workers


def test_a_call_apart_runs_in_another_process_while_the_caller_goes_on(tmp_path: Path) -> None:
    """The call waits for a gate that the caller opens only once `run_apart` has returned: a `run_apart` that waited
    for its call would leave the gate shut, and the call says so (no clock: a loaded machine passes alike)."""
    gate = tmp_path / "gate"

    def work() -> int:
        deadline = time.monotonic() + 60
        while not gate.exists():
            if time.monotonic() > deadline:
                return -1  # the caller never went on
            time.sleep(0.05)
        return os.getpid()

    result = run_apart(work, "a test call")
    gate.touch()
    pid = result()
    assert pid != -1, "run_apart returned only after its call had given up waiting for the caller"
    assert pid != os.getpid()


def test_a_call_apart_raises_its_error_in_the_caller() -> None:
    def broken() -> int:
        raise ValueError("no such concept")

    with pytest.raises(ValueError, match="no such concept"):
        run_apart(broken, "a failing call")()


def test_a_call_apart_whose_worker_dies_raises_why() -> None:
    def dies() -> int:
        os._exit(5)

    with pytest.raises(WorkerDied, match=r"worker died \(exit code 5\) during the RQ3 assembly"):
        run_apart(dies, "the RQ3 assembly")()
