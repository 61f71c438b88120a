"""`culturebench publish RELEASE --repo-id ORG/NAME`: a release to the Hugging Face Hub, tagged with its version.

The folder is verified against its manifest first (a mismatch: exit 2). One commit makes the dataset repository hold
exactly the release (its card is the repository's README, `croissant.json` beside it), tagged with the version
(`data.publish.hub`). Publishing a version again with the same bytes is `unchanged` (no commit); with other bytes,
refused (exit 1): a tag never moves. The token comes from HF_TOKEN or a Prefect Secret block
(`--token-secret-block`), and is never printed. `HF_ENDPOINT` (or `--endpoint`) names another Hub: https://, or
http:// to a loopback host only (the token would otherwise travel in clear); a redirect from it to another origin
(scheme, host or port) is not followed (exit 1: nothing is sent there). `--repo-id` is checked by the Hub's rules
(no `--` or `..`, exit 2) before the token is read. Only the kinds of file a release holds are uploaded: a manifest
listing `.gitattributes` or any other file is refused (exit 2) before any call to the Hub.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from flows.cli.errors import BadInput, Refused
from flows.cli.output import console

TOKEN_ENV = "HF_TOKEN"


def publish_command(
    release: Annotated[Path, typer.Argument(help="A release folder, <release root>/<benchmark>/<version>.")],
    repo_id: Annotated[str, typer.Option(help="The dataset repository, ORG/NAME.")],
    token_secret_block: Annotated[
        str | None,
        typer.Option(help=f"A Prefect Secret block holding the Hub token (default: the {TOKEN_ENV} variable)."),
    ] = None,
    private: Annotated[
        bool, typer.Option("--private", help="Create the repository private (an existing one keeps its visibility).")
    ] = False,
    endpoint: Annotated[
        str | None,
        typer.Option(
            help="The Hub's URL: https://, or http:// to a loopback host only (default: HF_ENDPOINT, else "
            "https://huggingface.co)."
        ),
    ] = None,
) -> None:
    """Publish a release to a Hub dataset repository in one commit, tagged with its version: `unchanged` when the
    tag already holds these bytes; refused (exit 1) when it holds others."""
    from data.clients.secrets import resolve_secret
    from data.publish.hub import PublishInputError, PublishRefused, check_repo_id, publish_release, resolve_endpoint

    if not release.is_dir():
        raise BadInput(f"{release}: not a release folder")
    try:
        check_repo_id(repo_id)
        hub = resolve_endpoint(endpoint)  # before the token is even read: it must never travel in clear
    except PublishInputError as exc:
        raise BadInput(exc) from None
    if not token_secret_block and not os.environ.get(TOKEN_ENV, "").strip():
        raise BadInput(
            f"no Hugging Face token: set {TOKEN_ENV}, or name a Prefect Secret block with --token-secret-block"
        )
    token = resolve_secret(token_secret_block, [TOKEN_ENV], "Hugging Face token", BadInput)
    try:
        result = publish_release(release, repo_id, token, endpoint=hub, private=private or None)
    except PublishInputError as exc:
        raise BadInput(exc) from None
    except PublishRefused as exc:
        raise Refused(exc) from None
    console.print(result.line(), markup=False, soft_wrap=True)
