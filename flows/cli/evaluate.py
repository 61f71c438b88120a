"""`culturebench evaluate NAME|compare`: a model on a release, from the command line, without Prefect (the
`evaluate` deployment runs the same code on a worker), one command per benchmark in the registry
(`evaluation.registry`): the benchmark's own command where its entry names one (`cli`), the generic one otherwise.
Heavy imports wait until a command runs.

Every refusal is one red line naming the file or field: exit 2 for bad input (a config, a release whose tables are
not its manifest's, a result path inside a release or result folder), 1 for a result folder that exists with other
content. Everything cheap is checked before a model is loaded or asked anything."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from evaluation import registry
from flows.cli.errors import CliGroup, Refused
from flows.cli.evaluate_common import (
    ConfigFileOption,
    NameOption,
    OutOption,
    ReleaseArgument,
    ResultsRootOption,
    display_name,
    fail,
    place,
    read_config,
    run,
    validate,
)
from flows.cli.output import console, os_error_line

if TYPE_CHECKING:
    from typer._click import Command, Context


class EvaluateGroup(CliGroup):
    """The `evaluate` group: a benchmark's command takes its options from the backend unions, whose modules import
    numpy, PIL and pyarrow. The group lists each registered benchmark by name and help (`evaluate --help`) and
    builds its command with its options only when one is named (to run, to show its help, to complete), so that the
    CLI starts light."""

    def list_commands(self, ctx: Context) -> list[str]:
        listed = super().list_commands(ctx)
        return [*(n for n in registry.names() if n not in listed), *listed]

    def get_command(self, ctx: Context, name: str) -> Command | None:
        if name not in self.commands and registry.is_registered(name):  # registered after the CLI was imported
            return benchmark_command(name)
        return super().get_command(ctx, name)

    def resolve_command(self, ctx: Context, args: list[str]) -> tuple[str | None, Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if name is not None and registry.is_registered(name):
            command = benchmark_command(name)
        return name, command, rest


evaluate_app = typer.Typer(
    cls=EvaluateGroup, help="Evaluate a model on a release, as the papers do.", no_args_is_help=True
)


def _front(name: str) -> Callable[[], Callable[..., None]]:
    """The factory of the benchmark's command (its registry entry's `cli`), or of the generic one; its docstring is
    the command's help."""
    spec = registry.get(name)
    factory: Callable[[], Callable[..., None]] = spec.cli.load() if spec.cli is not None else generic_command(name)
    return factory


def _list(name: str) -> None:
    """`evaluate --help` lists the command by its name and help; `EvaluateGroup` runs what `benchmark_command`
    builds."""

    def listed_only() -> None:
        raise AssertionError(f"evaluate {name} runs as benchmark_command() builds it")

    evaluate_app.command(name, help=_front(name).__doc__)(listed_only)


def generic_command(name: str) -> Callable[[], Callable[..., None]]:
    """The command of a benchmark whose registry entry names none: the release, a config file (its `model` and any
    other field), the task, the demo model and where to write."""
    spec = registry.get(name)

    def command(
        release: ReleaseArgument,
        task: str | None = None,  # its option, with the benchmark's tasks in its help, is set below
        out: OutOption = None,
        results_root: ResultsRootOption = Path("./evaluations"),
        config: ConfigFileOption = None,
        demo_model: Annotated[bool, typer.Option(help="The benchmark's demo model (meaningless numbers).")] = False,
        name: NameOption = None,
    ) -> None:
        data = read_config(config)
        display_name(data, name)
        if demo_model:
            data["demo"] = True
        if task is not None:
            data["task"] = task
        place(data, release, results_root, out)
        run(validate(spec.config.load(), data, config))

    # (the module's annotations are strings read in its globals: the option naming this benchmark's tasks is an
    # object instead)
    command.__annotations__["task"] = Annotated[str | None, typer.Option(help=f"One of {', '.join(spec.task_names)}.")]

    def factory() -> Callable[..., None]:
        return command

    command.__doc__ = f"Evaluate a model on a {spec.title} release (the model from --config, or --demo-model)."
    factory.__doc__ = command.__doc__
    return factory


@cache
def benchmark_command(name: str) -> Command:
    """A benchmark's command with its options (built once, when it is named)."""
    full = typer.Typer(cls=CliGroup)
    full.command(name)(_front(name)())
    return typer.main.get_group(full).commands[name]


for _name in registry.names():
    _list(_name)


@evaluate_app.command("compare")
def compare_command(
    results: Annotated[list[Path], typer.Argument(help="Result folders of one benchmark (each has metrics.json).")],
    out: Annotated[
        Path | None,
        typer.Option(help="Write comparison.parquet, .md, .png and .json (names, intervals, paired tests) here."),
    ] = None,
    html: Annotated[
        Path | None,
        typer.Option(help="Write a static leaderboard page here (index.html, the cards and figures copied; offline)."),
    ] = None,
) -> None:
    """Several models side by side: one table (printed as Markdown) and one figure, then each benchmark's breakdowns
    (per query language, per ethnicity and country). --html writes a leaderboard page of one release, with the
    papers' published baselines. --out and --html are checked before anything is read: never a file, an input, or a
    folder inside a release or result folder (those are immutable)."""
    from data.output_paths import OutputPathError, check_output
    from evaluation.leaderboard.page import check_page_dir, display_names, page_files, write_page
    from evaluation.leaderboard.summary import FILE, comparison, comparison_json
    from evaluation.leaderboard.tables import breakdown_markdown, read_results
    from evaluation.results.folder import compare

    try:
        if out is not None:
            if out.exists() and not out.is_dir():
                raise OutputPathError(f"--out {out} is a file: compare writes a folder of three files; choose a folder")
            check_output(out, inputs=results, option="--out")
        if html is not None:
            check_page_dir(html, results)
    except OutputPathError as exc:
        raise fail(str(exc)) from None
    try:
        table, figure, markdown = compare(list(results))
        read = read_results(results)
        page = page_files(read) if html is not None else {}
        # the page holds the same comparison.json: made once
        document = page[FILE] if page else comparison_json(comparison(read, display_names(read)))
    except (FileNotFoundError, ValueError, KeyError) as exc:
        raise fail(f"cannot compare: {exc}") from None
    except OSError as exc:  # a card or figure that cannot be read
        raise fail(os_error_line(exc)) from None
    typer.echo(markdown)
    typer.echo(breakdown_markdown(read))
    if out is not None:
        import pyarrow.parquet as pq

        try:
            out.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, out / "comparison.parquet")
            (out / "comparison.md").write_text(markdown)
            (out / "comparison.png").write_bytes(figure)
            (out / "comparison.json").write_bytes(document)
        except OSError as exc:
            raise fail(os_error_line(exc), Refused) from None
        console.print(f"written: {out}/comparison.{{parquet,md,png,json}}", markup=False, soft_wrap=True)
    if html is not None:
        try:
            write_page(html, page)
        except OSError as exc:
            raise fail(os_error_line(exc), Refused) from None
        console.print(f"written: {html}/index.html", markup=False, soft_wrap=True)
