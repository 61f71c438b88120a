"""Where a pack command may write: never into a release or result folder, nor onto one of its inputs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from flows.cli.errors import BadInput


def writable_pack(folder: Path, option: str, inputs: Sequence[Path] = ()) -> None:
    """A pack folder a command may write: never one inside a release or result folder (a release's `reference/` is
    part of it, listed in its manifest), nor one of the inputs."""
    from data.output_paths import OutputPathError, check_output

    try:
        check_output(folder, inputs, option=option, what="a reference pack")
    except OutputPathError as exc:
        raise BadInput(str(exc)) from None
