"""`culturebench takedown RELEASE (--image-id ID | --sha256 SHA | --url URL)... --reason TEXT`: the next patch
version of a release without those images, and their entries on the release root's denylist
(`flows/operations/takedown.py`).
Heavy imports wait until the command runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from flows.cli.output import console


def takedown_command(
    release: Annotated[
        Path, typer.Argument(help="The release folder, <release root>/<benchmark>/<version>.", metavar="RELEASE")
    ],
    reason: Annotated[
        str, typer.Option(help="Why the images are taken down (goes into the changelog and denylist).", metavar="TEXT")
    ],
    image_id: Annotated[
        list[str] | None,
        typer.Option("--image-id", metavar="ID", help="An image to remove (3XCM image_id, MixCuBe sample_id)."),
    ] = None,
    sha256: Annotated[
        list[str] | None,
        typer.Option(
            "--sha256",
            metavar="SHA256",
            help="An image to remove, by the sha256 of its original or of its released bytes.",
        ),
    ] = None,
    url: Annotated[
        list[str] | None, typer.Option("--url", metavar="URL", help="An image to remove, by its URL or final URL.")
    ] = None,
    version: Annotated[
        str | None,
        typer.Option(metavar="X.Y.Z", help="The patch's version (default: the next patch version, 1.0.0 -> 1.0.1)."),
    ] = None,
    date: Annotated[
        str | None, typer.Option(metavar="YYYY-MM-DD", help="The takedown's date, YYYY-MM-DD in UTC (default: today).")
    ] = None,
) -> None:
    """Write the next patch version of RELEASE without the named images, nor any image the release root's denylist
    names (earlier takedowns, from whichever version): 3XCM repairs only the rows that used them, MixCuBe drops
    their quintets. The card gets a CHANGELOG, the release root's denylist the images, which every later build
    honours. Takedowns of one root run one after the other. Everything is checked before anything is written. Exit
    2 on bad input (an id, sha256 or URL the release lacks, a date that is not YYYY-MM-DD, a version that would not
    be the root's newest, an unreadable manifest or denylist), 1 when the version exists with other content, when
    the patch would break a benchmark rule (a takedown of every image included), when another takedown holds the
    denylist's lock past the wait, or when the patch was written but the denylist could not be (the line says so;
    the same command completes it)."""
    from curation.takedown import TakedownRequest
    from data.takedown.patch import PatchInputError
    from flows.operations.takedown import take_down

    # bad input (TakedownInputError, PatchInputError, ReleaseReadError, DenylistError): exit 2; a refusal
    # (TakedownRefused, ReleaseExistsError, DenylistNotUpdated) or an OSError: exit 1 (`flows.cli.errors`)
    if not release.is_dir():
        raise PatchInputError(f"{release} is not a release folder")
    request = TakedownRequest(tuple(image_id or ()), tuple(sha256 or ()), tuple(url or ()))
    summary = take_down(release, request, reason, version=version, date=date)
    for image in summary.removed:
        console.print(
            f"removed {image['image_id']} ({image['why']}) sha256 {image['sha256']}", markup=False, soft_wrap=True
        )
    console.print(summary.rows["summary"], markup=False, soft_wrap=True)
    console.print(f"denylist: {summary.denylist}", markup=False)
    console.print(f"{summary.release.status}: {summary.release.path} (from {summary.parent})", markup=False)
    typer.echo(
        json.dumps(
            {
                "release_path": summary.release.path,
                "version": summary.release.version,
                "status": summary.release.status,
                "parent": summary.parent,
                "removed": [image["image_id"] for image in summary.removed],
                "denylist": summary.denylist,
            }
        )
    )
