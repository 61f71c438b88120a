"""Where a command may write: never onto or into one of its inputs, and never inside a release or result folder.

Releases and evaluation results are immutable (`data/publish/`): a folder holding `manifest.json`, at the output
or above it, is one of them. Paths are compared resolved (symlinks followed, `..` removed), so another spelling of
an input is still that input.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from data.publish.format import MANIFEST


class OutputPathError(ValueError):
    """An output path that would overwrite an input or land in an immutable folder: the message says which."""


def enclosing_release(path: Path) -> Path | None:
    """The release or result folder `path` is, or lies in (the nearest folder with a manifest), else None."""
    resolved = path.resolve()
    for folder in (resolved, *resolved.parents):
        if (folder / MANIFEST).is_file():
            return folder
    return None


def _kind(path: Path) -> str:
    """What a path that is no folder is, for a message (never opened: a FIFO or a device could block or be endless)."""
    if path.is_symlink() and not path.exists():
        return "a link to nothing"
    mode = path.stat().st_mode
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"),
                       (stat.S_ISSOCK, "a socket")):  # fmt: skip
        if test(mode):
            return name
    return "a file"


def check_output(
    out: Path,
    inputs: Iterable[Path] = (),
    *,
    option: str = "--out",
    immutable_target: bool = False,
    what: str = "the output",
) -> Path:
    """`out`, resolved, when writing it cannot touch an input or an immutable folder; else OutputPathError.
    `immutable_target`: `out` is itself a folder written by `ReleaseWriter` (a result, a reassembled benchmark, an
    export: `what`, as the message names it), which may exist already (an identical rewrite is `unchanged`, another
    is refused by the writer): only the folders above it must not be releases, and `out` must be a folder or not
    exist (a file, a FIFO or `/dev/zero` there is refused before anything reads it)."""
    if immutable_target and os.path.lexists(out) and not out.is_dir():
        raise OutputPathError(
            f"{option} {out} is {_kind(out)}, not a folder: {what} is written as a folder; "
            f"choose a path that does not exist yet"
        )
    target = out.resolve()
    for given in inputs:
        source = given.resolve()
        if target == source:
            raise OutputPathError(f"{option} {out} is the input {given}: choose another path, inputs are never written")
        if source.is_dir() and source in target.parents:
            raise OutputPathError(f"{option} {out} lies inside the input {given}: choose a path outside it")
    release = enclosing_release(target.parent if immutable_target else target)
    if release is not None:
        raise OutputPathError(
            f"{option} {out} lies inside {release}, a release or result folder ({MANIFEST}), which is immutable: "
            "choose a path outside it"
        )
    return target
