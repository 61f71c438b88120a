"""Worker processes for CPU work, a function run on every core of a machine instead of one: loky's pool, kept warm.

`run_in_processes(function, items, workers)` runs `function(item)` for each item in up to `workers` worker processes
and yields each item's outcome as it arrives: its result, or a `Failed` with the reason. The build's shard runner
(`flows/engine/placement.py`), the image dedup's pair batches (`curation/image_dedup.py`), the release's shard
writers (`data/publish/image_tables.py`) and `run_apart` (the assembly's RQ3, the release's validation) run on it.

The pool is loky's (`joblib.externals.loky`; joblib is in the lock). Each worker is a fresh interpreter (fork and
exec), not a fork of this process, which may run inside a Prefect task and hold its threads' locks; and unlike
multiprocessing's spawn, loky does not import this process's `__main__` again (`init_main_module=False`), so a
script without a main guard does not start over in every worker. Inside `warm_workers()`, which the engine opens
for a whole build, the workers stay up from call to call: a build's stages pay a worker's imports once, not each
stage again. Outside it they exit after `IDLE_S` seconds without work.

The function is cloudpickled once per call (a closure or a lambda travels by value), to a file that each worker
reads once per call: the dedup's function holds every candidate pair, which must not travel with each item. Items
travel one at a time, at most `workers` of them in flight, each to the next free worker.

A worker that dies (killed, out of memory, `os._exit`, a crash in native code) fails only the item it held. loky
fails every item in flight when one of its workers dies, and does not say whose it was, so the items it failed run
again, one at a time, alone in the pool; the one whose worker dies again, alone, fails with `WorkerDied`, which
names the worker's exit code. The other items are not affected: those not yet sent wait for their turn.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import sys
import tempfile
import threading
import uuid
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import cloudpickle
from joblib.externals import loky  # type: ignore[import-untyped]  # joblib ships no types
from joblib.externals.loky.process_executor import (  # type: ignore[import-untyped]
    BrokenProcessPool,
    ShutdownExecutorError,
    TerminatedWorkerError,
)

Item = TypeVar("Item")
Result = TypeVar("Result")

#: Outside `warm_workers`: a worker with nothing to do for this long exits (the next call starts another).
IDLE_S = 300.0
#: The functions a worker keeps unpickled, most recent first (a call apart may overlap a call's items).
KEPT_FUNCTIONS = 4


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


class WorkerDied(RuntimeError):
    """The worker process running an item ended without an answer (killed, out of memory, a crash, `os._exit`)."""


def run_in_processes(
    function: Callable[[Item], Result],
    items: Sequence[Item],
    workers: int,
    describe: Callable[[Item], str] = str,
) -> Iterator[tuple[int, Result | Failed[Item]]]:
    """(position in `items`, the function's result or a `Failed`) for every item, as each finishes, from up to
    `workers` worker processes. Every item gets exactly one outcome: an item whose worker dies fails with
    `WorkerDied`, an item that no worker could take fails with the reason, and the others run as if nothing
    happened; the caller never waits on a dead worker. `describe(item)` names an item in those messages. A caller
    that stops reading early stops the sending: the workers finish the items they hold and take no more."""
    if not items:
        return
    with _shipped(function) as shipped:
        yield from _outcomes(shipped, items, max(1, workers), describe)


def run_apart(function: Callable[[], Result], describe: str) -> Callable[[], Result]:
    """Start `function()` in a worker process now, and give the call that waits for its result (and raises its
    error): the caller works on something else meanwhile, on the other core."""
    answer: list[Result | Failed[int]] = []

    def wait_for_it() -> None:
        try:  # to the end of the outcomes: the worker has answered when it returns
            answer.extend(outcome for _, outcome in run_in_processes(lambda _: function(), [0], 1, lambda _: describe))
        except BaseException as exc:  # the function did not pickle, say: raised by `result`, not lost in this thread
            answer.append(Failed(0, exc))

    waiter = threading.Thread(target=wait_for_it, daemon=True)
    waiter.start()

    def result() -> Result:
        waiter.join()
        [outcome] = answer
        if isinstance(outcome, Failed):
            raise outcome.error
        return outcome

    return result


@contextlib.contextmanager
def warm_workers(workers: int) -> Iterator[None]:
    """Keep the worker processes up for the length of the block (a build: its stages and its release), a pool of
    `workers` or as many as a call inside asks: every call reuses them, with what they imported and what they keep
    (a stage's plan, its models). They start at the first call, not here, and stop at the end of the outermost
    block: after a clean end once they exit, after an error without waiting for the items they still hold."""
    global _warm, _warm_size
    with _lock:
        _warm += 1
        outer_size, _warm_size = _warm_size, max(_warm_size, workers)
    try:
        yield
    except BaseException:
        _end_warm(outer_size, wait=False)
        raise
    _end_warm(outer_size, wait=True)


def _end_warm(outer_size: int, wait: bool) -> None:
    global _warm, _warm_size, _pool
    with _lock:
        _warm -= 1
        _warm_size = outer_size
        pool, _pool = (_pool, None) if _warm == 0 else (None, _pool)
    if pool is not None:
        pool.executor.shutdown(wait=wait)


# -- the pool ------------------------------------------------------------------------------------------------------


class _Pool:
    """One loky executor, and what the calls that share it need to know of a break: how many items it failed."""

    def __init__(self, workers: int, idle_s: float | None) -> None:
        self.workers, self.idle_s = workers, idle_s
        self.executor = loky.ProcessPoolExecutor(
            max_workers=workers, context=loky.backend.get_context("loky"), timeout=idle_s, initializer=_worker_started
        )
        self.broken = False
        self._lock = threading.Lock()
        self._unfinished: set[Future[Any]] = set()  # sent and not answered; those a break failed stay

    def submit(self, shipped: _Shipped, item: Any) -> Future[Any]:
        future: Future[Any] = self.executor.submit(_call, shipped, item)
        with self._lock:
            self._unfinished.add(future)
        future.add_done_callback(self._answered)
        return future

    def _answered(self, future: Future[Any]) -> None:
        if _broke(future):
            self.broken = True  # every future still in it fails the same way: the next call takes a new pool
            return
        with self._lock:
            self._unfinished.discard(future)

    def failed_by_break(self) -> int:
        """How many items in flight the pool's break failed, those of every call sharing it: a broken executor
        fails all its unanswered futures at once, so waiting for them is short."""
        with self._lock:
            futures = list(self._unfinished)
        wait(futures)
        return sum(_broke(future) for future in futures)

    def discard(self) -> None:
        """No more items for this pool (it could not start a worker): the items it holds still finish."""
        self.broken = True
        with contextlib.suppress(Exception):
            self.executor.shutdown(wait=False)


_lock = threading.Lock()
_pool: _Pool | None = None
_warm = 0  # open `warm_workers` blocks
_warm_size = 0  # the workers they asked for


def _pool_for(workers: int) -> _Pool:
    """The pool for a call of `workers`: the one running, unless it broke, is too small, or was started with
    another idle timeout (`warm_workers` began or ended since)."""
    global _pool
    with _lock:
        idle_s = None if _warm else IDLE_S
        pool = _pool
        if pool is None or pool.broken or pool.workers < workers or pool.idle_s != idle_s:
            size = max(workers, _warm_size, pool.workers if pool is not None and not pool.broken else 0)
            if pool is not None:  # items it still holds finish; it takes no more
                pool.executor.shutdown(wait=False)
            pool = _pool = _Pool(size, idle_s)
        return pool


def _outcomes(
    shipped: _Shipped, items: Sequence[Any], workers: int, describe: Callable[[Any], str]
) -> Iterator[tuple[int, Any]]:
    todo = deque(range(len(items)))
    alone: deque[int] = deque()  # in flight beside others when a worker died: each runs again by itself
    breaks: Counter[int] = Counter()  # position -> the breaks it was in flight for
    running: dict[Future[Any], tuple[int, _Pool]] = {}
    try:
        while todo or alone or running:
            waiting, limit = (alone, 1) if alone else (todo, workers)
            while waiting and len(running) < limit:
                position = waiting.popleft()
                sent = _send(shipped, items[position], workers)
                if isinstance(sent, BaseException):
                    what = describe(items[position])
                    unsent = RuntimeError(f"{what} not run: no worker process ({type(sent).__name__}: {sent})")
                    yield position, Failed(items[position], unsent)
                    continue
                running[sent[0]] = (position, sent[1])
            if not running:
                continue
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            if any(_broke(future) for future in done):  # the others in flight are failed by the same break
                done, _ = wait(running)
            for future in sorted(done, key=lambda f: running[f][0]):
                position, pool = running.pop(future)
                item = items[position]
                error = future.exception()
                if error is None:
                    yield position, future.result()
                elif not isinstance(error, BrokenProcessPool):
                    yield position, Failed(item, error)
                else:
                    breaks[position] += 1
                    # Alone in the pool, it is the one whose worker died; beside others, it runs again alone
                    # (twice in flight at a break: a call sharing the pool keeps the pool from ever being alone).
                    if pool.failed_by_break() == 1 or breaks[position] > 1:
                        yield position, Failed(item, _died(error, describe(item)))
                    else:
                        alone.append(position)
    finally:  # a caller that stopped early: what was sent and not started is taken back
        for future in running:
            future.cancel()


def _send(shipped: _Shipped, item: Any, workers: int) -> tuple[Future[Any], _Pool] | BaseException:
    """Send one item to the pool, or the reason no worker could take it."""
    for _ in range(2):
        pool = _pool_for(workers)
        try:
            return pool.submit(shipped, item), pool
        except (BrokenProcessPool, ShutdownExecutorError):  # broken or replaced since `_pool_for`: on a new one
            pool.broken = True
            continue
        except Exception as exc:  # a worker could not start (no memory, no processes left)
            pool.discard()
            return exc
    return RuntimeError("the worker pool broke twice while the item was sent")


def _broke(future: Future[Any]) -> bool:
    return future.done() and not future.cancelled() and isinstance(future.exception(), BrokenProcessPool)


def _died(error: BaseException, what: str) -> BaseException:
    """The reason an item's worker gave no answer, from loky's error (`{SIGKILL(-9)}`: its workers' exit codes)."""
    if isinstance(error, TerminatedWorkerError):
        codes = [
            f"exit code {code} / signal {name}" if int(code) < 0 else f"exit code {code}"
            for name, code in re.findall(r"\b([A-Z]+)\((-?\d+)\)", str(error))
        ]
        died: BaseException = WorkerDied(f"worker died ({', '.join(codes) or 'exit code unknown'}) during {what}")
    else:  # its answer (or its arguments) did not unpickle
        died = RuntimeError(f"{what}: its worker process gave no usable answer ({error})")
    died.__cause__ = error
    return died


# -- the function, shipped once per call ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Shipped:
    """A call's pickled function, in a file the workers read once each; `key` tells calls apart."""

    path: str
    key: str


@contextlib.contextmanager
def _shipped(function: Callable[[Any], Any]) -> Iterator[_Shipped]:
    """The function in a file, after where the caller runs now: its working directory, its import path and its
    environment, which a worker started for an earlier call takes on before it runs this call's items (a relative
    workspace path, a test's own module, a variable set since)."""
    data = cloudpickle.dumps(function)  # by value: a closure or a lambda travels as well as a module function
    where = {"cwd": os.getcwd(), "path": list(sys.path), "environ": dict(os.environ)}
    handle, path = tempfile.mkstemp(prefix="culturebench-call-", suffix=".pickle")
    try:
        with os.fdopen(handle, "wb") as out:
            pickle.dump(where, out)
            out.write(data)
        yield _Shipped(path, uuid.uuid4().hex)
    finally:  # a worker that still holds an item has the function already
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


# -- in a worker ---------------------------------------------------------------------------------------------------

# Call key -> (where its caller ran, its function), the latest KEPT_FUNCTIONS.
_functions: OrderedDict[str, tuple[dict[str, Any], Callable[[Any], Any]]] = OrderedDict()
_taken_on = ""  # the call whose caller's place this worker took on last


def _call(shipped: _Shipped, item: Any) -> Any:
    """In a worker: the call's function (read at its first item here) on one item, where its caller runs."""
    global _taken_on
    if shipped.key not in _functions:
        with open(shipped.path, "rb") as data:
            where = pickle.load(data)
            _take_on(where)  # before the function: it may import from the caller's path
            _taken_on = shipped.key
            _functions[shipped.key] = (where, pickle.load(data))
        while len(_functions) > KEPT_FUNCTIONS:
            _functions.popitem(last=False)
    _functions.move_to_end(shipped.key)
    where, function = _functions[shipped.key]
    if _taken_on != shipped.key:  # this worker ran another call's item since
        _take_on(where)
        _taken_on = shipped.key
    try:
        return function(item)
    except Exception as exc:  # the caller decides what a failure means; it gets one it can unpickle
        raise _portable(exc) from None


def _take_on(where: dict[str, Any]) -> None:
    os.environ.clear()
    os.environ.update(where["environ"])
    sys.path[:] = where["path"]
    os.chdir(where["cwd"])


def _portable(error: BaseException) -> BaseException:
    """The error itself when it survives pickling, else a RuntimeError that names it: an answer the pool cannot
    unpickle would break it, and fail the other items in flight."""
    try:
        pickle.loads(cloudpickle.dumps(error))
        return error
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")


def _worker_started() -> None:
    """In each new worker, before its first item: no restart when its memory grows. loky replaces a worker whose
    memory grew 300 MB past its size after its first item (a leak, for joblib's short tasks); a build's worker
    keeps a stage's plan and models on purpose, and would pay its imports again."""
    from joblib.externals.loky import process_executor  # type: ignore[import-untyped]

    if hasattr(process_executor, "_USE_PSUTIL"):
        process_executor._USE_PSUTIL = False
