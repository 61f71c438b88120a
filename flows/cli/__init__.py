"""`culturebench`: run builds with or without Prefect, print configs, validate releases, evaluate models.

One module per command group: `build` (`build 3xcm|mixcube`, `config`), `release` (`validate`, `audit`,
`reassemble`), `concepts`, `reference`, `evaluate`, `fetch_release`, `takedown`, `prefect_setup`; `output`
holds what they share (the console, progress bars, one-line messages) and `errors` the one error type: a command
refuses by raising a `CliError` or a domain error, and `CliGroup`, every group's class, prints its line and exits
with its code.

Starting the CLI imports Typer, rich and these modules only: each command imports what it needs (pyarrow, numpy,
pydantic, Prefect, a benchmark's config or stages, a backend) when it runs, and `evaluate 3xcm|mixcube` build their
backend options when named, so `--help` and a usage error answer within the 0.5 s `perf/cli_startup.py` checks."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from flows.cli.build import build_app, config_command
from flows.cli.concepts import concepts_app
from flows.cli.errors import CliGroup
from flows.cli.evaluate import evaluate_app
from flows.cli.export import export_command
from flows.cli.fetch_release import fetch_release_command
from flows.cli.output import console
from flows.cli.prefect_defaults import apply_prefect_defaults
from flows.cli.prefect_setup import prefect_setup_command
from flows.cli.publish import publish_command
from flows.cli.reference import reference_app
from flows.cli.release import audit_command, reassemble_command, validate_command
from flows.cli.review import review_app
from flows.cli.takedown import takedown_command

__all__ = ["app", "console"]

app = typer.Typer(cls=CliGroup, help="Build the 3XCM and MixCuBe cultural-bias benchmarks.", no_args_is_help=True)
app.add_typer(build_app, name="build")
app.add_typer(concepts_app, name="concepts")
app.add_typer(evaluate_app, name="evaluate")
app.add_typer(reference_app, name="reference")
app.add_typer(review_app, name="review")
app.command("takedown")(takedown_command)
app.command("fetch-release")(fetch_release_command)
app.command("config")(config_command)
app.command("validate")(validate_command)
app.command("audit")(audit_command)
app.command("reassemble")(reassemble_command)
app.command("prefect-setup")(prefect_setup_command)
app.command("export")(export_command)
app.command("publish")(publish_command)


@app.callback()
def _prepare_prefect_environment() -> None:
    """Before any command imports Prefect (a benchmark's flow does; Prefect reads its settings once, at import):
    without PREFECT_API_URL, Prefect starts a temporary local server, so give it time to migrate a fresh database
    on a small machine (`prefect_defaults.py`, which the test suite applies too), and create PREFECT_HOME (Prefect
    does not create missing parents)."""
    apply_prefect_defaults()
    home = os.environ.get("PREFECT_HOME")
    if home:
        Path(home).expanduser().mkdir(parents=True, exist_ok=True)
