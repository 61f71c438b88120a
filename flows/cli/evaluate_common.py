"""What the `evaluate` commands share: their common options, the config a command builds (from --config, its
options laid over it), and the run with its one-line refusals. Heavy imports wait until a command runs."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from flows.cli.errors import BadInput, CliError, Refused
from flows.cli.output import InputFileError, console, os_error_line, progress_bars, read_mapping, validation_line

if TYPE_CHECKING:
    from pydantic import BaseModel


#: The judge answers like the model: its few options name the same fields, prefixed (`--judge-model`).
JUDGE_FIELDS = ("base_url", "model", "api_key_env")


ReleaseArgument = Annotated[Path, typer.Argument(help="The release folder (it holds manifest.json).")]
OutOption = Annotated[
    Path | None, typer.Option(help="Result folder; default <results-root>/<benchmark>/<release version>/<model id>.")
]
ResultsRootOption = Annotated[Path, typer.Option(help="Root of the default result folders.")]
BootstrapOption = Annotated[int | None, typer.Option(min=0, help="Resamples for the 95% CIs.")]
SeedOption = Annotated[int | None, typer.Option(help="Seed of the bootstrap.")]
EmbeddingCacheOption = Annotated[str | None, typer.Option(help="Folder of cached image vectors per model.")]
NameOption = Annotated[
    str | None,
    typer.Option(
        "--name",
        help="A short human name of the model (one line, at most 64 characters), whatever runs it: metrics.json's "
        "model.display_name. The model id, and so the result folder and the caches, stay as they are.",
    ),
]
ConfigFileOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        exists=True,
        dir_okay=False,
        help="A JSON or YAML evaluation config (`model`, and any other field); options given here override it.",
    ),
]


def fail(message: object, error: type[CliError] = BadInput) -> CliError:
    """The error to raise: one line, whatever the message holds (its whitespace, newlines included, collapsed)."""
    return error(" ".join(str(message).split()))


def read_config(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        return read_mapping(path, "evaluation settings (model: ...)")
    except InputFileError as exc:
        raise fail(str(exc)) from None
    except OSError as exc:
        raise fail(os_error_line(exc)) from None


def model_section(base: dict[str, Any], backend: str | None, options: dict[str, Any]) -> dict[str, Any]:
    """The config's model (or judge) section with the given options laid over it."""
    section = dict(base or {})
    if backend is not None:
        if section.get("backend") not in (None, backend):
            section = {}
        section["backend"] = backend
    section.update({k: v for k, v in options.items() if v is not None})
    return section


def model_or_demo(data: dict[str, Any], backend: StrEnum | None, options: dict[str, Any], demo: bool) -> None:
    """The config's `model` from --model-backend and its options (over --config's), or the demo model."""
    if demo:
        data["demo"] = True
    elif not data.get("model") and backend is None:
        raise BadInput("name the model: --model-backend (with its options), --config, or --demo-model")
    if backend is not None or data.get("model"):
        data["model"] = model_section(data.get("model", {}), backend.value if backend else None, options)


def display_name(data: dict[str, Any], name: str | None) -> None:
    """--name as the config's `display_name` (over --config's), checked first: a bad one is a line naming --name."""
    if name is None:
        return
    from evaluation.models.display_name import MAX_DISPLAY_NAME, display_name_problem

    problem = display_name_problem(name)  # the reason quotes none of the value: it may not be printable
    if problem is not None:
        raise BadInput(f"--name {problem}: give one line of printable text, at most {MAX_DISPLAY_NAME} characters")
    data["display_name"] = name


def place(data: dict[str, Any], release: Path, results_root: Path, out: Path | None) -> None:
    data.update(release=str(release), results_root=str(results_root))
    if out is not None:
        data["out"] = str(out)


def validate(model: type[BaseModel], data: dict[str, Any], config: Path | None) -> Any:
    from pydantic import ValidationError

    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise fail(validation_line(exc, str(config) if config else "invalid evaluation options")) from None


def run(config: Any) -> None:
    from pydantic import ValidationError

    from data.publish.folder import ReleaseExistsError
    from data.publish.format import ReleaseReadError
    from evaluation.results.folder import headline_rows
    from evaluation.run import evaluate_and_write
    from flows.engine.slots import gpu_slot

    try:
        with progress_bars() as progress:
            written = evaluate_and_write(config, progress, gpu_slot=gpu_slot)
    except ReleaseExistsError as exc:
        raise fail(f"{exc} (pass --out to write elsewhere)", Refused) from None
    except ValidationError as exc:  # a config section a backend validates itself
        raise fail(validation_line(exc, "cannot evaluate")) from None
    except (ReleaseReadError, KeyError, ValueError, FileNotFoundError, ImportError) as exc:
        # a release that cannot be read or differs from its manifest, a result path that may not be written,
        # vectors missing or degenerate, a model that cannot load
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        raise fail(f"cannot evaluate: {message}") from None
    except OSError as exc:
        raise fail(os_error_line(exc), Refused) from None
    result = written.result
    if result.demo:
        console.print("random demo model: the numbers are meaningless", style="yellow")
    for warning in result.warnings:
        console.print(" ".join(warning.split()), style="yellow", markup=False, soft_wrap=True)
    for row in headline_rows(result.benchmark, result.metrics):
        console.print(f"  {row['metric']:>20}  {row['value']:>7}  {row['95% CI']}", markup=False)
    for reason in result.skipped:
        console.print(f"  not computed: {reason}", style="yellow", markup=False)
    console.print(f"{written.release.status}: {written.out}", markup=False, soft_wrap=True)
    typer.echo(json.dumps({"out": written.out, "status": written.release.status, "model_id": result.model_id}))
