"""Provenance: the code version and a secret-free view of a config, for manifests and cards."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any, TypedDict, overload

from data.workspace import file_sha256

SECRET_MARKERS = ("key", "token", "secret", "password", "credential")
REDACTED = "**redacted**"


class CodeVersionInfo(TypedDict):
    """What a manifest's `code_version` states (`data.publish.manifest.CodeVersion` checks it)."""

    package: str
    version: str
    git_commit: str | None  # None: not running from a git checkout
    git_dirty: bool | None


@cache
def code_version() -> CodeVersionInfo:
    """Package version, plus the git commit when running from a checkout (with a dirty flag)."""
    version = metadata.version("culturebench")
    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        return {"package": "culturebench", "version": version, "git_commit": commit, "git_dirty": bool(dirty)}
    except (OSError, subprocess.SubprocessError):
        return {"package": "culturebench", "version": version, "git_commit": None, "git_dirty": None}


@overload
def scrub(text: str, secrets: Iterable[str | None], mask: str = ...) -> str: ...
@overload
def scrub(text: None, secrets: Iterable[str | None], mask: str = ...) -> None: ...
@overload
def scrub(text: str | None, secrets: Iterable[str | None], mask: str = ...) -> str | None: ...
def scrub(text: str | None, secrets: Iterable[str | None], mask: str = REDACTED) -> str | None:
    """A text (an error body, an exception message) with every known secret value replaced by `mask`."""
    if text is None:
        return None
    for secret in secrets:
        if secret:
            text = text.replace(secret, mask)
    return text


def redact(value: Any) -> Any:
    """Replace the value of every key that looks like a secret, at any depth."""
    if isinstance(value, dict):
        return {
            k: (REDACTED if any(m in str(k).lower() for m in SECRET_MARKERS) and v else redact(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


_LOCAL_PATH = re.compile(r"^(?:file://|~|/|[A-Za-z]:[\\/])")


def portable_paths(value: Any) -> Any:
    """Every absolute local path in a config, at any depth, as what it names rather than where it lies on this
    machine: a file as `<name> (local file, sha256 <hex>)`, anything else as `<name> (local path)`. Relative paths,
    hub ids and URLs of remote stores are kept."""
    if isinstance(value, dict):
        return {k: portable_paths(v) for k, v in value.items()}
    if isinstance(value, list):
        return [portable_paths(v) for v in value]
    if not isinstance(value, str) or not _LOCAL_PATH.match(value):
        return value
    path = Path(value.removeprefix("file://")).expanduser()
    if path.is_file():
        return f"{path.name} (local file, sha256 {file_sha256(path)})"
    return f"{path.name} (local path)"
