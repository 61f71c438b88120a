"""The CLI invoked in-process, and its one-line refusals, for tests that check both."""

from __future__ import annotations

from typing import Any

from typer.testing import CliRunner

from flows.cli import app


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def one_line(output: str) -> str:
    """The output's one non-blank line (a refusal is one line, never a traceback)."""
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    return lines[0]
