"""`culturebench`: run builds with or without Prefect, print configs, validate releases."""

from __future__ import annotations

import json
import os
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from flows import benchmarks
from flows.cli_evaluate import evaluate_app
from flows.cli_fetch_release import fetch_release_command
from flows.cli_output import InputFileError, console, os_error_line, progress_bars, read_mapping, validation_line
from flows.cli_takedown import takedown_command
from flows.engine.config import ConfigError, build_config, load_config

if TYPE_CHECKING:
    from flows.engine.benchmark import Benchmark

app = typer.Typer(help="Build the 3XCM and MixCuBe cultural-bias benchmarks.", no_args_is_help=True)
build_app = typer.Typer(help="Run a build.", no_args_is_help=True)
app.add_typer(build_app, name="build")
concepts_app = typer.Typer(help="Generate candidate concepts with Gemini and review them.", no_args_is_help=True)
app.add_typer(concepts_app, name="concepts")
app.add_typer(evaluate_app, name="evaluate")
app.command("takedown")(takedown_command)
app.command("fetch-release")(fetch_release_command)


class Engine(StrEnum):
    prefect = "prefect"
    local = "local"


def _overrides(workspace_root: str | None, release_root: str | None, version: str | None, build_id: str | None) -> dict:
    out: dict[str, Any] = {}
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
    ) -> None:
        if entry.needs and not (config or demo):
            console.print(f"[red]{entry.needs}[/red]")
            raise typer.Exit(2)
        benchmark = benchmarks.get(name)
        cfg = _config(benchmark.config, config, demo, _overrides(workspace_root, release_root, version, build_id))
        _run_build(benchmark, cfg, engine, close_reviews)

    command.__annotations__["demo"] = Annotated[bool, typer.Option(help=entry.demo_help)]
    command.__doc__ = f"Build {name} and write a versioned release. Exits with 3 while reviewers are still at work."
    build_app.command(name)(command)


for _name, _entry in benchmarks.REGISTRY.items():
    _add_build_command(_name, _entry)


def _config(model: type, path: Path | None, demo: bool, overrides: dict) -> Any:
    try:
        if path:
            cfg = load_config(path, demo=demo, overrides=overrides, model=model)
        else:
            cfg = build_config({}, demo, overrides, model=model)
        _check_roots(cfg)
    except ConfigError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from None
    return cfg


def _check_roots(cfg: Any) -> None:
    """The workspace and release roots must be usable folders before any stage runs."""
    from data.workspace import Storage, StorageError

    for field, url in (("workspace_root", cfg.workspace_root), ("release.root", cfg.release.root)):
        try:
            storage = Storage(url)
        except StorageError as exc:
            raise ConfigError(f"{field}: {exc}; use a local folder or a URL of an installed fsspec protocol") from None
        if storage.local and Path(storage.root).exists() and not Path(storage.root).is_dir():
            raise ConfigError(f"{field}: {url} is a file, not a folder; point {field} at a folder")


def _run_build(benchmark: Benchmark, cfg: Any, engine: Engine, close_reviews: bool) -> None:
    from annotation.aggregate import MalformedExport
    from annotation.collect import ReviewPending
    from collectors.mixcube_originals import OriginalsInputError
    from data.release import ReleaseExistsError
    from data.workspace import StorageError
    from flows.engine.runner import ReviewsNotFinished

    console.print(f"build id [bold]{cfg.resolved_build_id()}[/bold], workspace {cfg.workspace_root}")
    if engine is Engine.local and cfg.task_runner.kind != "default":
        console.print(f"[yellow]task_runner {cfg.task_runner.kind} is for Prefect runs: the shards run here[/yellow]")
    try:
        if engine is Engine.local:  # `build_locally` runs the preflight first
            with progress_bars() as progress:
                summary = benchmark.build_locally(cfg, progress=progress, close_reviews=close_reviews)
        else:
            benchmark.preflight(cfg)  # before a flow (and perhaps a temporary Prefect server) starts
            summary = benchmark.flow(cfg, close_reviews=close_reviews)
    except ConfigError as exc:  # a config that cannot build, found by the preflight
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from None
    except (ReviewPending, ReviewsNotFinished) as exc:
        console.print(f"[yellow]waiting for reviewers:[/yellow] {exc}\nRerun the same command when they are done.")
        raise typer.Exit(3) from None
    except OriginalsInputError as exc:  # the labels CSV or the originals folder as a whole
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from None
    except FileNotFoundError as exc:  # a model or weights file named by the config
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from None
    except benchmark.nothing_released as exc:
        console.print(f"[red]nothing released:[/red]\n{exc}")
        raise typer.Exit(1) from None
    except ReleaseExistsError as exc:
        console.print(f"[red]{exc}[/red] (pass --version to write a new one)")
        raise typer.Exit(1) from None
    except MalformedExport as exc:
        console.print(f"[red]malformed review export: {exc}[/red]; fix the file or export it again from Label Studio")
        raise typer.Exit(2) from None
    except (OSError, StorageError) as exc:  # a full disk, a read-only root, a damaged workspace file
        console.print(f"[red]{os_error_line(exc) if isinstance(exc, OSError) else exc}[/red]")
        raise typer.Exit(1) from None
    _print_summary(benchmark.name, summary)


@app.callback()
def _prepare_prefect_environment() -> None:
    """Before any command imports Prefect (a benchmark's flow does; Prefect reads its settings once, at import):
    without PREFECT_API_URL, Prefect starts a temporary local server, so give it time to migrate a fresh database
    on a small machine (Prefect's 20 s is not enough on 2 busy cores), and create PREFECT_HOME (Prefect does not
    create missing parents)."""
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    home = os.environ.get("PREFECT_HOME")
    if home:
        Path(home).expanduser().mkdir(parents=True, exist_ok=True)


def _print_summary(benchmark: str, summary: Any) -> None:
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


BenchmarkName = StrEnum("BenchmarkName", {name: name for name in benchmarks.names()})  # type: ignore[misc]


@app.command("config")
def config_command(
    demo: Annotated[bool, typer.Option(help="Print the demo config.")] = False,
    schema: Annotated[bool, typer.Option(help="Print the JSON schema instead of a config.")] = False,
    benchmark: Annotated[BenchmarkName, typer.Option(help="Which build's config.")] = "3xcm",  # type: ignore[assignment]
) -> None:
    """Print the default (or demo) build config as JSON, to edit and pass with --config. A benchmark without a
    default input (MixCuBe's originals) prints its demo config unless --schema is given."""
    model = benchmarks.get(benchmark).config
    if schema:
        typer.echo(json.dumps(model.model_json_schema(), indent=2))
        return
    cfg = model.demo() if demo or benchmarks.REGISTRY[benchmark].needs else model()
    typer.echo(cfg.model_dump_json(indent=2))


@app.command("validate")
def validate_command(release_dir: Annotated[Path, typer.Argument(exists=True, file_okay=False)]) -> None:
    """Check a release folder (3XCM or MixCuBe): every file against its manifest, then the benchmark's rules; exit
    1 when a file differs or a row breaks a rule, 2 when the folder is not a readable release."""
    from data.release_format import ReleaseReadError
    from flows.release_check import check_release

    try:
        manifest, report = check_release(release_dir)
    except ReleaseReadError as exc:
        console.print(str(exc), style="red", markup=False, soft_wrap=True)
        raise typer.Exit(2) from None
    console.print(f"{manifest.name} {manifest.version}: {report.summary()}", markup=False, soft_wrap=True)
    if not report.ok:
        raise typer.Exit(1)


@app.command("audit")
def audit_command(
    file: Annotated[
        Path,
        typer.Argument(help="A 3XCM RQ2 benchmark: the authors' xcm-bench.csv, a .csv or .parquet, a release folder."),
    ],
    metadata: Annotated[
        Path | None,
        typer.Option(
            help="image_metadata Parquet (a file or a folder of parts) for the tag, copy and index checks; "
            "a release folder's own by default."
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(help="Write the violations (rule, row, detail, the row's own columns) to a .csv or .parquet."),
    ] = None,
    max_reuse: Annotated[
        int | None,
        typer.Option(min=1, show_default=False, help="Most times one image may be a candidate (default 5)."),
    ] = None,
) -> None:
    """Audit a 3XCM benchmark file against every rule it can decide by itself; exit 1 on violations, 2 on bad input."""
    import time

    from rich.markup import escape

    from curation.audit import DEFAULT_MAX_REUSE, AuditInputError, audit_path, check_out_path, write_violations

    started = time.perf_counter()
    try:
        if out is not None:
            check_out_path(out, [file, *([metadata] if metadata else [])])  # before the work: a typo costs nothing
        audit = audit_path(file, metadata, max_reuse or DEFAULT_MAX_REUSE)
    except AuditInputError as exc:
        console.print(str(exc), style="red", markup=False, soft_wrap=True)  # one line, whatever the path holds
        raise typer.Exit(2) from None
    report = audit.report
    table = Table(title=f"audit of {escape(report.source)}: {report.rows:,} rows, {report.images:,} images")
    table.add_column("rule", no_wrap=True, min_width=max(len(rule.rule) for rule in report.rules))
    table.add_column("checked", justify="right")
    table.add_column("violations", justify="right")
    table.add_column("what must hold")
    for rule in report.rules:
        count = f"[red]{rule.violations:,}[/red]" if rule.violations else "0"
        table.add_row(rule.rule, f"{rule.checked:,}", count, rule.description)
    console.print(table)
    reuse = report.reuse
    console.print(
        f"candidate reuse: max {reuse.maximum} ({', '.join(reuse.most_reused[:5])}), mean {reuse.mean:.2f} over "
        f"{reuse.candidate_images:,} candidate images, cap {reuse.cap}",
        markup=False,
    )
    console.print(
        "images by times used as a candidate: " + ", ".join(f"{k}: {v:,}" for k, v in reuse.distribution.items()),
        markup=False,
    )
    if report.metadata is None:
        console.print("no image_metadata given: the tag, copy and index rules were not checked (--metadata)")
    if out is not None:
        try:
            write_violations(audit.violations, out)
        except OSError as exc:
            reason = " ".join(str(exc).split())
            console.print(f"{out}: cannot write the violations ({reason})", style="red", markup=False, soft_wrap=True)
            raise typer.Exit(2) from None
        console.print(f"violations written to {out}", markup=False)
    rows = len(audit.violations["row"].unique())
    verdict = f"{report.violations:,} violation(s) in {rows:,} row(s)" if not report.ok else "no violations"
    timing = f"read and checked in {time.perf_counter() - started:.2f} s, the checks {report.seconds:.2f} s"
    console.print(f"{verdict} ({timing})", style="red" if not report.ok else "green")
    if not report.ok:
        raise typer.Exit(1)


@app.command("reassemble")
def reassemble_command(
    pool: Annotated[
        Path,
        typer.Option(
            help="The benchmark whose images form the pool: the authors' xcm-bench.csv, a .csv or .parquet, "
            "or a release folder (its image_metadata's tags count)."
        ),
    ],
    out: Annotated[Path, typer.Option(help="Folder to write (benchmarks/xcm-bench.csv, Parquet, card, manifest).")],
    seed: Annotated[int, typer.Option(help="Seed of the assembler's tie-break order.")] = 0,
    max_reuse: Annotated[int, typer.Option(min=1, help="Most times one image may be an RQ2 candidate.")] = 5,
) -> None:
    """Build a violation-free RQ2 benchmark (and RQ3 sextets) over the images of an existing one, keeping its image
    ids, its indexes and every row that already obeys the rules. Exit 1 if the result breaks a rule, 2 on bad input."""
    import time

    from curation.audit import AuditInputError
    from curation.reassemble import reassemble
    from data.output_paths import OutputPathError, check_output
    from data.release import ReleaseExistsError
    from data.release_reassembled import write_reassembled

    started = time.perf_counter()
    try:
        check_output(out, [pool], immutable_target=True)
        result = reassemble(pool, seed=seed, max_reuse=max_reuse)
    except (AuditInputError, OutputPathError) as exc:
        console.print(str(exc), style="red", markup=False, soft_wrap=True)
        raise typer.Exit(2) from None
    console.print(
        f"{result.benchmark.num_rows:,} queries over {result.pool.table.num_rows:,} images: {result.kept:,} rows kept, "
        + ", ".join(f"{n:,} replaced ({why})" for why, n in result.replaced.items())
        + f"; {result.benchmark_cd.num_rows:,} sextets",
        markup=False,
    )
    console.print(f"validation: {result.validation.summary()}", markup=False)
    if not result.validation.ok:
        console.print("nothing written: the reassembled benchmark breaks a rule", style="red")
        raise typer.Exit(1)
    try:
        written = write_reassembled(
            str(out), result.benchmark, result.benchmark_cd, result.unassembled, result.manifest()
        )
    except ReleaseExistsError as exc:
        console.print(str(exc), style="red", markup=False, soft_wrap=True)
        raise typer.Exit(1) from None
    except OSError as exc:
        console.print(os_error_line(exc), style="red", markup=False, soft_wrap=True)
        raise typer.Exit(1) from None
    after = result.audit_after.report
    console.print(
        f"{written.status}: {written.path} (max candidate reuse {result.audit_before.report.reuse.maximum} -> "
        f"{after.reuse.maximum}; {time.perf_counter() - started:.1f} s)",
        markup=False,
    )


@concepts_app.command("generate")
def concepts_generate_command(
    review_file: Annotated[str, typer.Argument(help="CSV review file to create or merge into (fsspec URL).")],
    config: Annotated[
        Path | None, typer.Option(help="YAML/JSON GeminiConceptGenerationConfig.", exists=True, dir_okay=False)
    ] = None,
    count: Annotated[int | None, typer.Option(help="Concepts to ask for (App. H: 100).")] = None,
    model: Annotated[str | None, typer.Option(help="Gemini model id.")] = None,
) -> None:
    """Ask Gemini for candidate concepts (paper App. H); new ones are added to the review file as pending."""
    from pydantic import ValidationError

    from collectors.concept_generation import GeminiConceptGenerationConfig
    from data.gemini import GeminiConfigError
    from flows.generate_concepts import generate_concepts

    try:
        raw = read_mapping(config, "concept generation settings (count: 100, ...)") if config else {}
    except InputFileError as exc:
        console.print(str(exc), style="red", markup=False, soft_wrap=True)
        raise typer.Exit(2) from None
    if count is not None:
        raw["count"] = count
    if model is not None:
        raw.setdefault("gemini", {})["model"] = model
    try:
        cfg = GeminiConceptGenerationConfig.model_validate(raw)
        summary = generate_concepts(cfg, review_file)
    except ValidationError as exc:
        console.print(validation_line(exc, str(config or "options")), style="red", markup=False, soft_wrap=True)
        raise typer.Exit(2) from None
    except GeminiConfigError as exc:
        console.print(str(exc), style="red", markup=False, soft_wrap=True)
        raise typer.Exit(2) from None
    for failure in summary.failures:
        console.print(f"[red]generation failed ({failure['error']}): {failure['detail']}[/red]")
    console.print(f"{summary.candidates} candidates, {summary.added} new, in {review_file}")
    if summary.failures:
        raise typer.Exit(1)


@concepts_app.command("accept")
def concepts_accept_command(
    review_file: Annotated[str, typer.Argument(help="The review file.")],
    candidate_ids: Annotated[
        list[str] | None, typer.Argument(help="Candidates to decide (all pending if none).")
    ] = None,
    reject: Annotated[bool, typer.Option(help="Reject instead of accepting.")] = False,
) -> None:
    """Accept (or reject) candidates; each accepted one gets a stable new concept id (1000 and up)."""
    from collectors.concept_generation import ReviewFileError, accept_candidates

    try:
        changed = accept_candidates(review_file, candidate_ids or None, reject=reject)
    except (ReviewFileError, KeyError, FileNotFoundError) as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from None
    for row in changed:
        console.print(f"{row.review_status}: {row.candidate_id} {row.concept!r} (concept_id {row.concept_id})")
    console.print(f"{len(changed)} rows changed in {review_file}")


@app.command("prefect-setup")
def prefect_setup_command(
    work_pool: Annotated[str, typer.Option(help="The process work pool the deployments run on.")] = "",
) -> None:
    """Create the work pool and the global concurrency limits (duckduckgo, gemini, gpu) on the server at
    PREFECT_API_URL, if missing. Run it once before `prefect deploy --all`."""
    from flows.prefect_setup import WORK_POOL, ensure_prefect_setup

    if not os.environ.get("PREFECT_API_URL"):
        console.print("[red]PREFECT_API_URL is not set: point it at the server to set up[/red]")
        raise typer.Exit(2)
    report = ensure_prefect_setup(work_pool or WORK_POOL)
    for line in report.created:
        console.print(f"created {line}")
    for line in report.kept:
        console.print(f"already there: {line}")
