"""`culturebench fetch-release DIR [--out OUT] [--write-images]`: download the images of a URL-only release with the
HTTP downloader, check each against its sha256 and report what is gone, changed or opted out
(`collectors/release_images.py`). Heavy imports wait until the command runs, and stay light then: no torch,
matplotlib, OpenCV or pandas (`datasets` only with --write-images, for the HF Image schema).

Bad input (a release or table that cannot be read, an output onto or inside a release, a download config that is
not a valid mapping) is one red line naming the file or field, exit 2, before any request; an OS error is one line,
exit 1. A killed run resumes from `OUT/.fetch-state/` when rerun with the same output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from flows.cli.output import InputFileError, console, progress_bars, read_mapping, validation_line

if TYPE_CHECKING:
    from collectors.downloader import HttpDownloadConfig


def fetch_release_command(
    release: Annotated[
        Path, typer.Argument(help="A URL-only release folder, <release root>/<benchmark>/<version>.", metavar="DIR")
    ],
    out: Annotated[
        Path | None,
        typer.Option(help="Where fetch_report.parquet (and the image table) go (default: ./fetched/<name>/<version>)."),
    ] = None,
    write_images: Annotated[
        bool,
        typer.Option(
            "--write-images",
            help="Also write the release's image table with the verified images' bytes (an HF Image column).",
        ),
    ] = False,
    download_config: Annotated[
        Path | None,
        typer.Option(
            exists=True, dir_okay=False, help="YAML or JSON of the HTTP downloader's settings (`download` in a build)."
        ),
    ] = None,
    allow_private_addresses: Annotated[
        bool, typer.Option("--allow-private-addresses", help="Admit loopback and private hosts (a mirror, tests).")
    ] = False,
) -> None:
    """Download every image DIR names by URL, verify it against its sha256 and report each as ok, changed (other
    bytes), gone (no image) or opted_out (the source refuses us now). Exit 2 when DIR is not a URL-only release,
    or OUT is DIR, inside it or inside any release. A killed run resumes when rerun with the same OUT."""
    from collectors.release_images import fetch_release

    # bad input (ReleaseReadError, OutputPathError, InputFileError): exit 2; an OSError: exit 1 (`flows.cli.errors`)
    config = read_download_config(download_config, allow_private_addresses)
    bar = _LazyBar()
    try:
        summary = fetch_release(release, out, config, write_images=write_images, progress=bar)
    finally:
        bar.close()
    console.print(summary.line(), markup=False, soft_wrap=True)
    console.print(f"report: {summary.report}", markup=False, soft_wrap=True)
    if summary.images:
        console.print(f"images: {summary.images}", markup=False, soft_wrap=True)
    typer.echo(json.dumps({"counts": summary.counts, "report": summary.report, "images": summary.images}))


def read_download_config(path: Path | None, allow_private_addresses: bool = False) -> HttpDownloadConfig:
    """The downloader's settings from a YAML or JSON mapping (`backend` ignored); InputFileError is one line,
    `<file>: <field>: <what is wrong>`, never pydantic's multi-line report."""
    from pydantic import ValidationError

    from collectors.downloader import HttpDownloadConfig

    raw = read_mapping(path, "the downloader's settings (concurrency: 8, ...)") if path is not None else {}
    raw = {k: v for k, v in raw.items() if k != "backend"}
    if allow_private_addresses:
        raw["allow_private_addresses"] = True
    try:
        return HttpDownloadConfig.model_validate(raw)
    except ValidationError as exc:
        raise InputFileError(validation_line(exc, str(path or "--download-config"))) from None


class _LazyBar:
    """`progress_bars`, started by the first report: a refusal before any download prints its line alone."""

    def __init__(self) -> None:
        self.bars: progress_bars | None = None

    def __call__(self, stage: str, done: int, total: int) -> None:
        if self.bars is None:
            self.bars = progress_bars().__enter__()
        self.bars(stage, done, total)

    def close(self) -> None:
        if self.bars is not None:
            self.bars.__exit__(None, None, None)
            self.bars = None
