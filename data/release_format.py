"""What makes a folder a release, in names only (no heavy imports: readers of untrusted folders start here).

A release (or an evaluation result) is a folder holding `manifest.json`, whose `version` is a semantic version;
`ReleaseReadError` is how every reader names a folder or table it cannot read.
"""

from __future__ import annotations

MANIFEST = "manifest.json"
# semver.org 2.0.0: dot-separated pre-release identifiers, each non-empty and numeric ones without leading zeros.
_PRERELEASE_ID = r"(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)"
_BUILD_ID = r"[0-9A-Za-z-]+"
SEMVER = (
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    rf"(?:-{_PRERELEASE_ID}(?:\.{_PRERELEASE_ID})*)?(?:\+{_BUILD_ID}(?:\.{_BUILD_ID})*)?$"
)


class ReleaseReadError(ValueError):
    """A release folder's manifest or table that cannot be read: the message names the file."""
