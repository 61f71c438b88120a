"""The `publish` flow (deployments `publish-3xcm`, `publish-mixcube`): a release to the Hugging Face Hub once a person
approves it.

The flow reads what publishing would do without writing anything (`data.publish.hub.preview_release`: the release
verified against its manifest, compared with the Hub's tag and `main`), shows it as a markdown artifact, and pauses
for a `PublishApproval` (the resume form in the UI, or `resume_flow_run(id, run_input={"approve": True})`). Only an
approval commits, through the code `culturebench publish` runs (`data.publish.hub.publish_release`). A rejection ends
the run in a Completed state named Rejected; no answer within `approval_timeout_s` ends it Failed (Prefect's server
fails an expired pause itself, "never resumed"; the run's log says what it meant). Neither commits anything. A
version whose tag already holds the release is `unchanged` at once, without asking.

The token comes from the Prefect Secret block named by `token_secret_block` (or the worker's HF_TOKEN when none is
named) and goes only into the Authorization header of the calls to the Hub: no parameter, log line, artifact or
result holds it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.exceptions import FlowPauseTimeout
from prefect.flow_runs import pause_flow_run
from prefect.input import RunInput
from prefect.states import Completed, Failed, State
from pydantic import Field

from data.clients.secrets import resolve_secret
from data.publish.hub import (
    PublishInputError,
    PublishPreview,
    PublishRefused,
    preview_release,
    publish_release,
    resolve_endpoint,
)
from data.publish.integrity import ReleaseIntegrityError
from flows.engine.runner import artifact_key

TOKEN_ENV = "HF_TOKEN"
#: How often the paused run asks the server whether it was resumed (Prefect's default is 10 s).
POLL_INTERVAL_S = 5
#: The changes listed in the approval artifact; the count says how many there are in all.
LISTED_CHANGES = 50


class PublishApproval(RunInput):
    """What a person sends to resume a paused `publish` run."""

    approve: bool = Field(
        default=False, description="Publish the release as the run's preview shows it (false: reject, commit nothing)."
    )
    note: str = Field(default="", description="Why (kept in the run's logs).")


def _size(total: int) -> str:
    return f"{total / 1e6:.1f} MB" if total >= 1e5 else f"{total} bytes"


def preview_markdown(preview: PublishPreview, release: Path, private: bool, timeout_s: int) -> str:
    """The approval artifact: what would be committed where."""
    visibility = "private" if private else "public"
    repository = f"new, {visibility}" if preview.repository == "new" else "existing (keeps its visibility)"
    lines = [
        f"# Publish {preview.name} {preview.version} to {preview.repo_id}?",
        "",
        "| | |",
        "|---|---|",
        f"| release | `{release}` |",
        f"| Hub | {preview.endpoint} |",
        f"| repository | {preview.repo_id} ({repository}) |",
        f"| tag | {preview.version} |",
        f"| files | {preview.files} ({_size(preview.total_bytes)}) |",
        f"| changes on `main` | {len(preview.changes)} |",
        "",
        "Resume this run with `approve: true` to commit them to `main` in one commit and tag it; `approve: false` "
        f"rejects it. Without an answer within {timeout_s} s the run fails. Nothing is committed before an approval.",
        "",
    ]
    lines += [f"- {change}" for change in preview.changes[:LISTED_CHANGES]]
    if len(preview.changes) > LISTED_CHANGES:
        lines.append(f"- ... and {len(preview.changes) - LISTED_CHANGES} more")
    return "\n".join(lines) + "\n"


@flow(name="publish")
def publish(
    release: str,
    repo_id: str,
    token_secret_block: str | None = None,
    endpoint: str | None = None,
    private: bool = False,
    approval_timeout_s: int = 86400,
) -> str | State[Any]:
    """Publish a release folder to a Hub dataset repository, one commit tagged with its version, after a person
    approves the preview the run shows (a rejection or no answer commits nothing)."""
    logger = get_run_logger()
    folder = Path(release)
    try:
        hub = resolve_endpoint(endpoint)  # before the token is read: it never travels in clear
        token = resolve_secret(token_secret_block, [TOKEN_ENV], "Hugging Face token", PublishInputError)
        preview = preview_release(folder, repo_id, token, endpoint=hub)
    except (PublishInputError, PublishRefused, ReleaseIntegrityError) as exc:
        return Failed(message=f"nothing was published: {' '.join(str(exc).split())}")
    if preview.status == "unchanged":
        logger.info("unchanged: %s tag %s already holds %s", repo_id, preview.version, folder)
        return f"unchanged: {repo_id} tag {preview.version}"

    key = artifact_key(f"publish-{repo_id}-{preview.version}")
    create_markdown_artifact(
        preview_markdown(preview, folder, private, approval_timeout_s),
        key=key,
        description=f"what publishing {preview.name} {preview.version} to {repo_id} would commit",
    )
    logger.info(
        "waiting for approval to publish %s %s to %s (%d changes on main); resume with approve: true or false",
        preview.name,
        preview.version,
        repo_id,
        len(preview.changes),
    )
    try:
        answer = pause_flow_run(
            wait_for_input=PublishApproval,
            timeout=approval_timeout_s,
            poll_interval=min(POLL_INTERVAL_S, approval_timeout_s),
        )
    except FlowPauseTimeout:
        # The server may fail the expired pause first ("never resumed"); this line says what it means here.
        unanswered = f"no approval within {approval_timeout_s} s: nothing was committed to {repo_id}"
        logger.warning("%s", unanswered)
        return Failed(message=unanswered)
    note = f" ({answer.note})" if answer.note else ""
    if not answer.approve:
        # A decision, not an error: a Completed state named Rejected (a Cancelled or Failed one would log the
        # engine's "unexpected exception" traceback).
        rejected = f"rejected{note}: nothing was committed to {repo_id}"
        logger.info("%s", rejected)
        return Completed(name="Rejected", message=rejected, data=rejected)

    logger.info("approved%s: publishing %s %s to %s", note, preview.name, preview.version, repo_id)
    try:
        result = publish_release(folder, repo_id, token, endpoint=hub, private=private or None)
    except (PublishInputError, PublishRefused, ReleaseIntegrityError) as exc:
        return Failed(message=" ".join(str(exc).split()))
    create_markdown_artifact(f"{result.line()}\n", key=f"{key}-result", description="the publication")
    logger.info("%s", result.line())
    return result.line()
