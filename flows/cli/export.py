"""`culturebench export RELEASE --harness NAME --out DIR`: a release as an evaluation harness reads it offline
(`evaluation/harnesses/exports/`: lmms-eval and VLMEvalKit for MixCuBe, MTEB and clip_benchmark for 3XCM). The folder
holds the harness's files and a README with the exact command; the same release exports to the same bytes, a URL-only
release is refused with the command that fetches it, and nothing is written into the release."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flows.cli.output import console


def export_command(
    release: Annotated[Path, typer.Argument(help="A release folder, <release root>/<benchmark>/<version>.")],
    harness: Annotated[str, typer.Option(help="lmms-eval or vlmevalkit (MixCuBe); mteb or clip-benchmark (3XCM).")],
    out: Annotated[Path, typer.Option(help="The export folder (outside the release).")],
) -> None:
    """Export a release for an evaluation harness, with a README naming the command that runs it."""
    from evaluation.harnesses.exports.common import run_export

    result = run_export(release, harness, out)
    # paths are printed as they are: a `[` in one is no rich markup
    console.print(f"export {result.status}: {result.folder}\n{result.command}", markup=False, soft_wrap=True)
