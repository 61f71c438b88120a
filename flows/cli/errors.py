"""The CLI's one error type, and the one place that turns errors into a red line and an exit code.

A command refuses by raising a `CliError` (`BadInput`: exit 2, `Refused`: exit 1, `ReviewersAtWork`: exit 3) or by
letting one of the project's domain errors through: `DOMAIN_ERRORS` says which `CliError` each becomes. `CliGroup`,
the class of every `typer.Typer` in `flows.cli`, catches both around the command it runs, prints the error's line
on the project's console and exits with its code (`typer.Exit`). That group is the one place: Typer (0.29 runs its
own copy of click, `typer._click`, not the `click` package) would draw a click error in a boxed panel, so a
CliError is no click exception and never reaches Typer's `main`.

The domain errors are named by `module.QualName`, where each is defined, and matched along the raised exception's
MRO (most derived first, so `ReleaseExistsError`, a `FileExistsError`, is not taken for a plain `OSError`): the CLI
imports none of their modules before a command needs them."""

from __future__ import annotations

import errno
from collections.abc import Callable
from typing import Any

import typer
from rich.text import Text
from typer.core import TyperGroup

from flows.cli.output import console, os_error_line


class CliError(Exception):
    """A refusal: one line (a message in `style`, then a plain `hint`) on the console, and the command's exit code.
    The message is printed as given, never read as rich markup."""

    exit_code = 1
    style = "red"

    def __init__(self, message: object, hint: str = "") -> None:
        self.message = str(message)
        self.hint = hint
        super().__init__(self.message + hint)

    def format_message(self) -> str:
        return self.message + self.hint

    def show(self) -> None:
        if not self.hint:
            console.print(self.message, style=self.style, markup=False, soft_wrap=True)
            return
        line = console.highlighter(Text(self.message + self.hint))  # highlighted as any printed string
        line.stylize(self.style, 0, len(self.message))
        console.print(line, soft_wrap=True)


class BadInput(CliError):
    """Input the command cannot use (a config, a file, an option, an output path): exit 2, before any work."""

    exit_code = 2


class Refused(CliError):
    """A run refused or failed (an existing version with other content, a result breaking a rule, a full disk): 1."""

    exit_code = 1


class ReviewersAtWork(CliError):
    """A build waiting for its reviewers: a yellow line and exit 3; the same command resumes it."""

    exit_code = 3
    style = "yellow"

    def __init__(self, detail: object) -> None:
        super().__init__("waiting for reviewers:", f" {detail}\nRerun the same command when they are done.")


def _malformed_export(exc: Any) -> CliError:
    return BadInput(f"malformed review export: {exc}", "; fix the file or export it again from Label Studio")


def _os_error(exc: Any) -> CliError:
    return Refused(os_error_line(exc))


# The project's domain errors, by `module.QualName` where each is defined, and the CliError each becomes (its
# message is the exception's text unless a function says otherwise). Per-command shapes (a build's "pass
# --version", evaluate's "cannot evaluate: ...") are raised by the command itself, before these apply.
DOMAIN_ERRORS: dict[str, Callable[[Any], CliError]] = {
    # exit 2: input that cannot be used
    "flows.engine.config.ConfigError": BadInput,
    "data.reference_files.PackErrors": BadInput,
    "data.reference_files.PackError": BadInput,
    "collectors.pack_needs.PackIncomplete": BadInput,
    "flows.cli.output.InputFileError": BadInput,
    "data.publish.format.ReleaseReadError": BadInput,
    "data.output_paths.OutputPathError": BadInput,
    "curation.rule_audit.AuditInputError": BadInput,
    "curation.takedown.TakedownInputError": BadInput,
    "evaluation.harnesses.exports.common.ExportError": BadInput,
    "evaluation.harnesses.predictions.PredictionsError": BadInput,
    "data.takedown.patch.PatchInputError": BadInput,
    "data.takedown.denylist.DenylistError": BadInput,
    "collectors.mixcube_originals.OriginalsInputError": BadInput,
    "collectors.concept_generation.ReviewFileError": BadInput,
    "data.clients.gemini.GeminiConfigError": BadInput,
    "annotation.aggregate.MalformedExport": _malformed_export,
    # exit 1: a run refused or failed
    "data.publish.folder.ReleaseExistsError": Refused,
    "flows.operations.takedown.TakedownRefused": Refused,
    "flows.operations.takedown.DenylistNotUpdated": Refused,
    "annotation.label_studio.LabelStudioUnavailable": Refused,
    "annotation.label_studio.LabelStudioRejected": Refused,
    "data.workspace.StorageError": Refused,
    "builtins.OSError": _os_error,  # a full disk, a read-only root, a damaged file
    # exit 3: reviewers still at work
    "annotation.collect.ReviewPending": ReviewersAtWork,
    "flows.engine.runner.ReviewsNotFinished": ReviewersAtWork,
}


def as_cli_error(exc: BaseException) -> CliError | None:
    """The CliError `exc` is or becomes, or None for an error the CLI has no line for (a bug: its traceback)."""
    if isinstance(exc, CliError):
        return exc
    if isinstance(exc, OSError) and exc.errno == errno.EPIPE:
        return None  # a closed stdout: Typer's own quiet exit
    for klass in type(exc).__mro__:
        make = DOMAIN_ERRORS.get(f"{klass.__module__}.{klass.__qualname__}")
        if make is not None:
            return make(exc)
    return None


class CliGroup(TyperGroup):
    """A Typer group whose commands refuse by raising: a CliError, or a domain error `DOMAIN_ERRORS` names, raised
    anywhere in a command prints its line and exits with its code; anything else propagates."""

    def invoke(self, ctx: Any) -> Any:  # Typer's click Context (`typer._click`)
        try:
            return super().invoke(ctx)
        except Exception as exc:  # Typer's exits and usage errors are not in the table: they pass through
            error = as_cli_error(exc)
            if error is None:
                raise
        error.show()
        raise typer.Exit(error.exit_code)
