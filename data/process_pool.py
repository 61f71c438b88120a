"""Fresh worker interpreters fed items over pipes: a function run on both cores of a laptop, not one.

`run_in_processes(function, items, workers)` starts `workers` processes (`python -m data.process_worker`), sends
each the cloudpickled function once, then one item at a time as it finishes the last, and yields each item's
outcome as it arrives. The build's shard runner (`flows/engine/local_processes.py`) and the image dedup's pair
batches (`curation/image_dedup.py`) both run on it.

Each worker is a fresh interpreter, not a fork: the caller may run inside a Prefect task, whose process holds
threads (its API client, its logging), and a forked child can inherit one of their locks held. Nor is it
multiprocessing's spawn, which imports the caller's `__main__` again: a script without a main guard would start
its work over in every worker. Messages are length-prefixed pickles both ways (`data/process_worker.py`).
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar

import cloudpickle

from data.process_worker import HEADER, receive, send

Item = TypeVar("Item")
Result = TypeVar("Result")


def available_cores() -> int:
    """The cores this process may run on (a container's CPU set, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


class Failed(Generic[Item]):
    """An item whose function raised (or whose worker died, or never started): the error, and which item."""

    def __init__(self, item: Item, error: BaseException) -> None:
        self.item = item
        self.error = error


def run_in_processes(
    function: Callable[[Item], Result],
    items: Sequence[Item],
    workers: int,
    describe: Callable[[Item], str] = str,
) -> Iterator[tuple[int, Result | Failed[Item]]]:
    """(position in `items`, the function's result or a `Failed`) for every item, as each finishes, from up to
    `workers` worker processes. Every item gets exactly one outcome: a worker that dies, or cannot start, fails its
    item and every item it would have taken after it (the other workers take the rest), so the caller never waits
    on a dead worker. `describe(item)` names an item in those messages."""
    if not items:
        return
    todo: queue.SimpleQueue[int | None] = queue.SimpleQueue()
    for position in range(len(items)):
        todo.put(position)
    results: queue.SimpleQueue[tuple[int, Any]] = queue.SimpleQueue()
    pickled = cloudpickle.dumps(function)  # by value: a closure or a lambda travels as well as a module function
    feeders = [
        threading.Thread(target=_feed_worker, args=(pickled, items, describe, todo, results), daemon=True)
        for _ in range(min(workers, len(items)))
    ]
    for feeder in feeders:
        todo.put(None)  # one stop per feeder, after every item
        feeder.start()
    try:
        for _ in items:
            yield results.get()
    finally:  # a caller that stops early (it raises on a failure): the workers finish their item and take no more
        _stop_feeding(todo, len(feeders))
    for feeder in feeders:
        feeder.join()


def run_apart(function: Callable[[], Result], describe: str) -> Callable[[], Result]:
    """Start `function()` in a worker process now, and give the call that waits for its result (and raises its
    error): the caller works on something else meanwhile, on the other core."""
    answer: list[Result | Failed[int]] = []

    def wait() -> None:
        try:  # to the end of the outcomes: the worker has exited when it returns
            answer.extend(outcome for _, outcome in run_in_processes(lambda _: function(), [0], 1, lambda _: describe))
        except BaseException as exc:  # the function did not pickle, say: raised by `result`, not lost in this thread
            answer.append(Failed(0, exc))

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()

    def result() -> Result:
        waiter.join()
        [outcome] = answer
        if isinstance(outcome, Failed):
            raise outcome.error
        return outcome

    return result


def _stop_feeding(todo: queue.SimpleQueue[int | None], feeders: int) -> None:
    """Empty the queue of items not yet taken, leaving one stop per feeder (a surplus stop is never read)."""
    while True:
        try:
            todo.get_nowait()
        except queue.Empty:
            break
    for _ in range(feeders):
        todo.put(None)


def _feed_worker(
    pickled: bytes,
    items: Sequence[Any],
    describe: Callable[[Any], str],
    todo: queue.SimpleQueue[int | None],
    results: queue.SimpleQueue[tuple[int, Any]],
) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # a script's own path included
    proc: subprocess.Popen[bytes] | None = None
    position: int | None = None
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "data.process_worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
        )
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(HEADER.pack(len(pickled)) + pickled)
        while (position := todo.get()) is not None:
            send(proc.stdin, items[position])
            answer = receive(proc.stdout)
            if answer is None:
                died = f"a worker exited with {proc.wait()} during {describe(items[position])}"
                raise RuntimeError(died)
            outcome, value = answer
            results.put((position, value if outcome == "done" else Failed(items[position], value)))
            position = None
    except Exception as exc:
        if position is not None:
            results.put((position, Failed(items[position], exc)))
        while (left := todo.get()) is not None:  # up to this feeder's stop: the other feeders take the rest
            failed = f"{describe(items[left])} not run: a worker failed ({type(exc).__name__}: {exc})"
            results.put((left, Failed(items[left], RuntimeError(failed))))
    finally:
        if proc is not None:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait()
