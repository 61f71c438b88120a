"""Where the repository is, for the tests and their helpers at any depth of tests/."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
