"""`culturebench fetch-release DIR [--out OUT] [--write-images]`: download the images of a URL-only release with the
HTTP downloader, check each against its sha256 and report what is gone, changed or opted out
(`collectors/release_fetch.py`). Heavy imports wait until the command runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from flows.cli_output import console, os_error_line


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
    bytes), gone (no image) or opted_out (the source refuses us now). Exit 2 when DIR is not a URL-only release."""
    import yaml
    from pydantic import ValidationError

    from collectors.downloader import HttpDownloadConfig
    from collectors.release_fetch import FetchReleaseError, fetch_release

    try:
        raw = yaml.safe_load(download_config.read_text()) if download_config else {}
        raw = {k: v for k, v in (raw or {}).items() if k != "backend"}
        if allow_private_addresses:
            raw["allow_private_addresses"] = True
        config = HttpDownloadConfig.model_validate(raw)
        manifest = json.loads((release / "manifest.json").read_text()) if (release / "manifest.json").is_file() else {}
        target = out or Path("fetched") / str(manifest.get("name", "release")) / str(manifest.get("version", "0"))
        summary = fetch_release(release, target, config, write_images=write_images)
    except (FetchReleaseError, ValidationError, yaml.YAMLError) as exc:
        console.print(str(exc), style="red", markup=False, soft_wrap=True)
        raise typer.Exit(2) from None
    except OSError as exc:
        console.print(os_error_line(exc), style="red", markup=False, soft_wrap=True)
        raise typer.Exit(1) from None
    console.print(summary.line(), markup=False, soft_wrap=True)
    console.print(f"report: {summary.report}", markup=False, soft_wrap=True)
    if summary.images:
        console.print(f"images: {summary.images}", markup=False, soft_wrap=True)
    typer.echo(json.dumps({"counts": summary.counts, "report": summary.report, "images": summary.images}))
