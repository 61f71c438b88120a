"""A text prediction file (a VLMEvalKit CSV or TSV, an lmms-eval samples log) read as a stream: a buffer at a time,
decoded as it is read, a line at most `limit` characters at a time (`read_line`), and refused once it has given
more than `MAX_PREDICTION_BYTES`. What a reader holds is then its current line, not the file."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import evaluation.harnesses.predictions as package
from evaluation.harnesses.predictions import PredictionsError


class _Capped(io.RawIOBase):
    """The file's bytes, refused (PredictionsError) once more than the cap have been read: a file that grows, or a
    special file, is bounded too, whatever its size said."""

    def __init__(self, handle: io.FileIO, path: Path, what: str, cap: int) -> None:
        super().__init__()
        self._handle = handle
        self._path = path
        self._what = what
        self._cap = cap
        self._read = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        count = self._handle.readinto(buffer) or 0
        self._read += count
        if self._read > self._cap:
            raise PredictionsError(f"{self._path}: larger than {self._cap >> 20} MiB; not a {self._what}")
        return count

    def close(self) -> None:
        self._handle.close()
        super().close()


@contextmanager
def open_text(path: Path, what: str, *, encoding: str, newline: str) -> Iterator[io.TextIOWrapper]:
    """The file as text (`encoding`, a UTF-8 one, strict; `newline` as `open` takes it); PredictionsError names the
    file when it cannot be opened or read, is larger than any real one, or is not UTF-8 text."""
    cap = package.MAX_PREDICTION_BYTES
    try:
        handle = path.open("rb", buffering=0)
        size = os.fstat(handle.fileno()).st_size
    except OSError as exc:
        raise PredictionsError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    stream = io.TextIOWrapper(io.BufferedReader(_Capped(handle, path, what, cap)), encoding=encoding, newline=newline)
    try:
        if size > cap:  # refused before a byte is read
            raise PredictionsError(f"{path}: larger than {cap >> 20} MiB; not a {what}")
        yield stream
    except UnicodeDecodeError:
        raise PredictionsError(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise PredictionsError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    finally:
        stream.close()


class LineTooLong(Exception):
    """A line longer than `read_line`'s limit (`start`: its first characters): the reader says which, in its own
    words."""

    def __init__(self, start: str) -> None:
        super().__init__(len(start))
        self.start = start


def read_line(stream: io.TextIOWrapper, limit: int, keep: int = 4096) -> str:
    """The stream's next line with its line break ("" at the end), or LineTooLong, with its first `keep`
    characters, when it runs past `limit` characters (only `limit` of them are read)."""
    line = stream.readline(limit)
    if len(line) >= limit and not line.endswith(("\n", "\r")):
        raise LineTooLong(line[:keep])
    return line
