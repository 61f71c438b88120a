"""`culturebench build 3xcm|mixcube` (a build, with or without Prefect) and `culturebench config` (its config)."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from flows import benchmarks
from flows.cli.errors import BadInput, CliGroup, Refused
from flows.cli.output import console, progress_bars

if TYPE_CHECKING:  # the configs (pydantic, pyarrow through the workspace) are imported when a command runs
    from flows.engine.benchmark import Benchmark

build_app = typer.Typer(cls=CliGroup, help="Run a build.", no_args_is_help=True)


class Engine(StrEnum):
    prefect = "prefect"
    local = "local"


def _overrides(
    workspace_root: str | None,
    release_root: str | None,
    version: str | None,
    build_id: str | None,
    reference: str | None = None,
) -> dict[str, str | dict[str, str]]:
    """What the command line sets over the config file: top-level fields, and `release` {root, version}."""
    out: dict[str, str | dict[str, str]] = {}
    if reference:
        out["reference"] = reference
    if workspace_root:
        out["workspace_root"] = workspace_root
    if build_id:
        out["build_id"] = build_id
    release = {k: v for k, v in {"root": release_root, "version": version}.items() if v}
    if release:
        out["release"] = release
    return out


ConfigOption = Annotated[Path | None, typer.Option(help="YAML or JSON build config.", exists=True, dir_okay=False)]
EngineOption = Annotated[
    Engine,
    typer.Option(
        help="prefect: run the build's flow (a server from PREFECT_API_URL, else a temporary local one); "
        "local: plain Python."
    ),
]
WorkspaceOption = Annotated[str | None, typer.Option(help="Workspace root (fsspec URL).")]
ReleaseRootOption = Annotated[str | None, typer.Option(help="Release root (fsspec URL).")]
VersionOption = Annotated[str | None, typer.Option(help="Release version (semver).")]
BuildIdOption = Annotated[str | None, typer.Option(help="Build id (default: derived from the config).")]
ReferenceOption = Annotated[
    str | None,
    typer.Option(
        help="Reference pack folder (or fsspec URL) naming the countries, languages, concepts and cultures to build "
        "for (default: the shipped pack; `culturebench reference init DIR` starts one)."
    ),
]
CloseReviewsOption = Annotated[
    bool, typer.Option(help="Import open reviews as they stand; items short of annotations are undecided.")
]


def _add_build_command(name: str, entry: benchmarks.Entry) -> None:
    def command(
        config: ConfigOption = None,
        demo: bool = False,  # its help is the benchmark's, set below
        engine: EngineOption = Engine.prefect,
        workspace_root: WorkspaceOption = None,
        release_root: ReleaseRootOption = None,
        version: VersionOption = None,
        build_id: BuildIdOption = None,
        close_reviews: CloseReviewsOption = False,
        reference: ReferenceOption = None,
    ) -> None:
        if entry.needs and not (config or demo):
            raise BadInput(entry.needs)
        benchmark = benchmarks.get(name)
        overrides = _overrides(workspace_root, release_root, version, build_id, reference)
        cfg = _config(benchmark.config, config, demo, overrides)
        _run_build(benchmark, cfg, engine, close_reviews)

    command.__annotations__["demo"] = Annotated[bool, typer.Option(help=entry.demo_help)]
    command.__doc__ = f"Build {name} and write a versioned release. Exits with 3 while reviewers are still at work."
    build_app.command(name)(command)


for _name, _entry in benchmarks.REGISTRY.items():
    _add_build_command(_name, _entry)


def _config(model: type, path: Path | None, demo: bool, overrides: dict) -> Any:
    """The build's config; a ConfigError (exit 2) names what cannot build."""
    from flows.engine.config import build_config, load_config

    if path:
        cfg: Any = load_config(path, demo=demo, overrides=overrides, model=model)
    else:
        cfg = build_config({}, demo, overrides, model=model)
    _check_roots(cfg)
    return cfg


def _check_roots(cfg: Any) -> None:
    """The workspace and release roots must be usable folders before any stage runs."""
    from data.workspace import Storage, StorageError
    from flows.engine.config import ConfigError

    for field, url in (("workspace_root", cfg.workspace_root), ("release.root", cfg.release.root)):
        try:
            storage = Storage(url)
        except StorageError as exc:
            raise ConfigError(f"{field}: {exc}; use a local folder or a URL of an installed fsspec protocol") from None
        if storage.local and Path(storage.root).exists() and not Path(storage.root).is_dir():
            raise ConfigError(f"{field}: {url} is a file, not a folder; point {field} at a folder")


def _run_build(benchmark: Benchmark, cfg: Any, engine: Engine, close_reviews: bool) -> None:
    """Run the build and print its summary. A config that cannot build (found by the preflight), an unusable input
    or review export, pending reviews (exit 3), a full disk or a damaged workspace file are the domain errors
    `flows.cli.errors` turns into one line; what only a build says is raised here."""
    from data.publish.folder import ReleaseExistsError

    console.print(f"build id [bold]{cfg.resolved_build_id()}[/bold], workspace {cfg.workspace_root}")
    if engine is Engine.local and cfg.task_runner.kind != "default":
        console.print(f"[yellow]task_runner {cfg.task_runner.kind} is for Prefect runs: the shards run here[/yellow]")
    try:
        # The preflight runs once, before any stage (and before a temporary Prefect server starts).
        if engine is Engine.local:
            with progress_bars() as progress:
                summary = benchmark.run(cfg, "local", progress=progress, close_reviews=close_reviews)
        else:
            summary = benchmark.run(cfg, "prefect", close_reviews=close_reviews)
    except FileNotFoundError as exc:  # a model or weights file named by the config
        raise BadInput(exc) from None
    except benchmark.nothing_released as exc:
        raise Refused("nothing released:", f"\n{exc}") from None
    except ReleaseExistsError as exc:
        raise Refused(exc, " (pass --version to write a new one)") from None
    _print_summary(benchmark.name, summary)


def _print_summary(benchmark: str, summary: Any) -> None:
    from rich.table import Table

    table = Table(title=f"{benchmark} build {summary.build_id}")
    for column in ("stage", "in", "kept", "dropped", "dropped by reason"):
        table.add_column(column)
    for s in summary.stages:
        table.add_row(s.stage, str(s.rows_in), str(s.kept), str(s.dropped), s.reasons_text())
    console.print(table)
    if summary.skipped_stages:
        console.print(f"skipped (already done): {', '.join(summary.skipped_stages)}")
    if summary.validation:
        console.print(f"validation: {summary.validation}")
    for stage, workers in summary.shard_placement.items():
        console.print(f"{stage} shards: " + ", ".join(f"{n} on {worker}" for worker, n in sorted(workers.items())))
    console.print(f"release {summary.release_version} ({summary.release_status}): [bold]{summary.release_path}[/bold]")
    typer.echo(
        json.dumps(
            {
                "release_path": summary.release_path,
                "version": summary.release_version,
                "status": summary.release_status,
                "build_id": summary.build_id,
            }
        )
    )


if TYPE_CHECKING:  # an enum made at run time from the registry (Typer reads it): checked as its base
    BenchmarkName = StrEnum
else:
    BenchmarkName = StrEnum("BenchmarkName", {name: name for name in benchmarks.names()})


def config_command(
    demo: Annotated[bool, typer.Option(help="Print the demo config.")] = False,
    schema: Annotated[bool, typer.Option(help="Print the JSON schema instead of a config.")] = False,
    benchmark: Annotated[BenchmarkName, typer.Option(help="Which build's config.")] = "3xcm",  # type: ignore[assignment]  # Typer makes the enum of it
    reference: ReferenceOption = None,
) -> None:
    """Print the default (or demo) build config as JSON, to edit and pass with --config. A benchmark without a
    default input (MixCuBe's originals) prints its demo config unless --schema is given."""
    from flows.engine.config import build_config

    model = benchmarks.get(benchmark).config
    if schema:
        typer.echo(json.dumps(model.model_json_schema(), indent=2))
        return
    given = {"reference": reference} if reference else {}
    cfg = (
        model.demo(**given)
        if demo or benchmarks.REGISTRY[benchmark].needs
        else build_config(given, model=model, source="--reference")
    )
    typer.echo(cfg.model_dump_json(indent=2))
