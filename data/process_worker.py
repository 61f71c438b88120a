"""A worker process of `data/process_pool.py`: it reads a pickled function from its stdin, then items, and answers
each with ("done", result) or ("failed", error).

Messages are length-prefixed pickles both ways. A started worker is a fresh interpreter (`python -m`), so nothing of
the parent's threads, locks or `__main__` module comes with it.
"""

from __future__ import annotations

import pickle
import struct
import sys
from typing import IO, Any

import cloudpickle

HEADER = struct.Struct("!Q")


def send(stream: IO[bytes], message: Any) -> None:
    data = cloudpickle.dumps(message)
    stream.write(HEADER.pack(len(data)) + data)
    stream.flush()


def receive(stream: IO[bytes]) -> Any:
    """The next message, or None when the other side closed the pipe."""
    head = stream.read(HEADER.size)
    if len(head) < HEADER.size:
        return None
    (size,) = HEADER.unpack(head)
    return pickle.loads(stream.read(size))


def _portable(error: BaseException) -> BaseException:
    """The error itself when it survives pickling, else a RuntimeError that names it."""
    try:
        pickle.loads(cloudpickle.dumps(error))
        return error
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")


def main() -> None:
    incoming, outgoing = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # a function that prints must not write into the answers
    function = receive(incoming)
    while (item := receive(incoming)) is not None:
        try:
            send(outgoing, ("done", function(item)))
        except Exception as exc:  # the parent decides what a failure means
            send(outgoing, ("failed", _portable(exc)))


if __name__ == "__main__":
    main()
