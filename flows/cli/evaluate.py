"""`culturebench evaluate 3xcm|mixcube|compare`: a model on a release, from the command line, without Prefect (the
`evaluate` deployment runs the same code on a worker). Heavy imports wait until a command runs.

Every refusal is one red line naming the file or field: exit 2 for bad input (a config, a release whose tables are
not its manifest's, a result path inside a release or result folder), 1 for a result folder that exists with other
content. Everything cheap is checked before a model is loaded or asked anything."""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import StrEnum
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from flows.cli.backend_options import plain
from flows.cli.errors import BadInput, CliError, CliGroup, Refused
from flows.cli.output import InputFileError, console, os_error_line, progress_bars, read_mapping, validation_line

if TYPE_CHECKING:
    from pydantic import BaseModel
    from typer._click import Command, Context


class EvaluateGroup(CliGroup):
    """The `evaluate` group: `3xcm` and `mixcube` take their options from the backend unions, whose modules import
    numpy, PIL and pyarrow. The group lists them by name and help (`evaluate --help`) and builds them with their
    options only when one is named (to run, to show its help, to complete), so that the CLI starts light."""

    def resolve_command(self, ctx: Context, args: list[str]) -> tuple[str | None, Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if name in MODEL_COMMANDS:
            command = model_commands()[name]
        return name, command, rest


evaluate_app = typer.Typer(
    cls=EvaluateGroup, help="Evaluate a model on a release, as the papers do.", no_args_is_help=True
)


# The backends and their options come from the configs' unions: the CLI keeps no list of its own.
if TYPE_CHECKING:  # enums made at run time from the backend unions (Typer reads those): checked as their base
    EncoderBackend = StrEnum
    VlmBackend = StrEnum
    MixCubeBackend = StrEnum


class XcmTask(StrEnum):
    triplet = "triplet"
    retrieval = "retrieval"
    all = "all"


class MixCubeTask(StrEnum):
    questions = "questions"
    audit = "audit"


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
ConfigFileOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        exists=True,
        dir_okay=False,
        help="A JSON or YAML evaluation config (`model`, and any other field); options given here override it.",
    ),
]


def _fail(message: object, error: type[CliError] = BadInput) -> CliError:
    """The error to raise: one line, whatever the message holds (its whitespace, newlines included, collapsed)."""
    return error(" ".join(str(message).split()))


def _read_config(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        return read_mapping(path, "evaluation settings (model: ...)")
    except InputFileError as exc:
        raise _fail(str(exc)) from None
    except OSError as exc:
        raise _fail(os_error_line(exc)) from None


def _model_section(base: dict[str, Any], backend: str | None, options: dict[str, Any]) -> dict[str, Any]:
    """The config's model (or judge) section with the given options laid over it."""
    section = dict(base or {})
    if backend is not None:
        if section.get("backend") not in (None, backend):
            section = {}
        section["backend"] = backend
    section.update({k: v for k, v in options.items() if v is not None})
    return section


def _model_or_demo(data: dict[str, Any], backend: StrEnum | None, options: dict[str, Any], demo: bool) -> None:
    """The config's `model` from --model-backend and its options (over --config's), or the demo model."""
    if demo:
        data["demo"] = True
    elif not data.get("model") and backend is None:
        raise BadInput("name the model: --model-backend (with its options), --config, or --demo-model")
    if backend is not None or data.get("model"):
        data["model"] = _model_section(data.get("model", {}), backend.value if backend else None, options)


def _place(data: dict[str, Any], release: Path, results_root: Path, out: Path | None) -> None:
    data.update(release=str(release), results_root=str(results_root))
    if out is not None:
        data["out"] = str(out)


def _validate(model: type[BaseModel], data: dict[str, Any], config: Path | None) -> Any:
    from pydantic import ValidationError

    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _fail(validation_line(exc, str(config) if config else "invalid evaluation options")) from None


def _run(config: Any) -> None:
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
        raise _fail(f"{exc} (pass --out to write elsewhere)", Refused) from None
    except ValidationError as exc:  # a config section a backend validates itself
        raise _fail(validation_line(exc, "cannot evaluate")) from None
    except (ReleaseReadError, KeyError, ValueError, FileNotFoundError, ImportError) as exc:
        # a release that cannot be read or differs from its manifest, a result path that may not be written,
        # vectors missing or degenerate, a model that cannot load
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        raise _fail(f"cannot evaluate: {message}") from None
    except OSError as exc:
        raise _fail(os_error_line(exc), Refused) from None
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


def evaluate_3xcm_command(
    release: ReleaseArgument,
    model_backend: Annotated[EncoderBackend | None, typer.Option(help="How the model is run.")] = None,
    task: Annotated[
        XcmTask | None,
        typer.Option(
            help="triplet (the paper's RQ2/RQ3, the default), retrieval (GlobalRG/RAVENEA over the whole pool, "
            "written under retrieval/), or all."
        ),
    ] = None,
    query: Annotated[str | None, typer.Option(help="text (the paper's) or image: what queries the candidates.")] = None,
    bootstrap_resamples: BootstrapOption = None,
    seed: SeedOption = None,
    embedding_cache: EmbeddingCacheOption = None,
    out: OutOption = None,
    results_root: ResultsRootOption = Path("./evaluations"),
    config: ConfigFileOption = None,
    demo_model: Annotated[
        bool, typer.Option(help="Evaluate a tiny random open_clip model (exercises the pipeline; meaningless).")
    ] = False,
    **model_options: Any,
) -> None:
    """Text-to-image retrieval on a 3XCM release: per-query winners, M_cr/M_lb/M_ti/SP with 95% CIs, RQ3's six
    M_k and App. P.2 tests, and Δsim. --task retrieval ranks the whole pool per concept and query language instead
    (GlobalRG's precision@k and diversity@k, also for English queries alone; trec_eval's MRR and nDCG@k; RAVENEA's
    own MRR, P@k and nDCG@k as its authors' gdeval.py scores them). Exit 2 on bad input, 1 if the result folder
    exists with other content."""
    from evaluation.run import Evaluate3XCMConfig

    data = _read_config(config)
    _model_or_demo(data, model_backend, plain(model_options), demo_model)
    top = {"task": task, "query": query, "bootstrap_resamples": bootstrap_resamples, "seed": seed}
    data.update(plain({**top, "embedding_cache": embedding_cache}))
    _place(data, release, results_root, out)
    _run(_validate(Evaluate3XCMConfig, data, config))


def evaluate_mixcube_command(
    release: ReleaseArgument,
    task: Annotated[
        MixCubeTask | None,
        typer.Option(
            help="questions (the paper's VLM questions, the default) or audit (the Multilingual CLIP bias audit of a "
            "text-image encoder, as 3XCM's backends: written under audit/)."
        ),
    ] = None,
    model_backend: Annotated[
        MixCubeBackend | None,
        typer.Option(help="How the model is run: a VLM backend for questions, an encoder backend for the audit."),
    ] = None,
    judge_backend: Annotated[
        VlmBackend | None,
        typer.Option(help="The judge of Cultural Marker Identification (Food, App. B.3)."),
    ] = None,
    judge_base_url: Annotated[str | None, typer.Option(help="The judge's endpoint.")] = None,
    judge_model: Annotated[str | None, typer.Option(help="The judge model.")] = None,
    judge_api_key_env: Annotated[str | None, typer.Option(help="The judge's API key variable.")] = None,
    workers: Annotated[int | None, typer.Option(min=1, help="Questions in flight at once.")] = None,
    bootstrap_resamples: BootstrapOption = None,
    seed: SeedOption = None,
    embedding_cache: EmbeddingCacheOption = None,
    out: OutOption = None,
    results_root: ResultsRootOption = Path("./evaluations"),
    config: ConfigFileOption = None,
    demo_model: Annotated[
        bool,
        typer.Option(
            help="A tiny random local VLM judged by itself (questions), or a tiny random open_clip (audit): exercises "
            "the pipeline; meaningless."
        ),
    ] = False,
    predictions: Annotated[
        Path | None,
        typer.Option(
            help="Score a harness's prediction file instead of asking a model (VLMEvalKit: <model>_MixCuBe.xlsx, "
            ".tsv or .csv, from `culturebench export --harness vlmevalkit`; lmms-eval: its --log_samples "
            "*_samples_culturebench_mixcube.jsonl or its --output_path folder).",
        ),
    ] = None,
    predictions_format: Annotated[str, typer.Option(help="Which harness wrote --predictions.")] = "vlmevalkit",
    predictions_model: Annotated[
        str | None, typer.Option(help="The model that answered --predictions (default: from the file's name).")
    ] = None,
    **model_options: Any,
) -> None:
    """Country Identification (App. B.2) on every image of a MixCuBe release, and Cultural Marker Identification
    (App. B.3) on Food with a judge: accuracy per country x category x ethnicity and the drop from original to each
    swap. --predictions scores a harness's answers instead of asking a model. --task audit instead runs the
    Multilingual CLIP bias audit's counterfactual audit of a text-image encoder (MaxSkew and harm rates over the
    quintets). Exit 2 on bad input, 1 if the result folder exists with other content."""
    from evaluation.harnesses.predictions import FORMATS, reader
    from evaluation.run import EvaluateMixCubeConfig

    data = _read_config(config)
    options = plain(model_options)
    if predictions is not None:
        if demo_model or model_backend is not None or options or data.get("model"):
            raise BadInput("--predictions replaces the model: drop --demo-model, --model-backend and its options")
        if predictions_format not in FORMATS:
            raise BadInput(f"--predictions-format {predictions_format!r}: not one of {', '.join(sorted(FORMATS))}")
        locate = getattr(reader(predictions_format), "prediction_file", None)
        if predictions.is_dir() and locate is not None:
            predictions = locate(predictions)  # a harness's output folder -> its one prediction file
        if not predictions.is_file():
            raise BadInput(f"--predictions {predictions}: no such file")
        given = {"path": str(predictions), "format": predictions_format, "model_name": predictions_model}
        data["predictions"] = plain(given)
    elif predictions_model is not None:
        raise BadInput("--predictions-model names the model of --predictions; give --predictions too")
    if "predictions" not in data:
        _model_or_demo(data, model_backend, options, demo_model)
    if judge_backend is not None or data.get("judge"):
        given = {"base_url": judge_base_url, "model": judge_model, "api_key_env": judge_api_key_env}
        judge = {**plain(given), **({"cache_dir": options["cache_dir"]} if "cache_dir" in options else {})}
        # one answer cache serves both (its keys name the model)
        data["judge"] = _model_section(data.get("judge") or {}, judge_backend.value if judge_backend else None, judge)
    if workers is not None:
        data["workers"] = workers
    top = {"task": task, "bootstrap_resamples": bootstrap_resamples, "seed": seed, "embedding_cache": embedding_cache}
    data.update(plain(top))
    _place(data, release, results_root, out)
    _run(_validate(EvaluateMixCubeConfig, data, config))


#: The commands whose options come from the backend unions: `model_commands` builds them when one is named.
MODEL_COMMANDS: dict[str, Callable[..., None]] = {"3xcm": evaluate_3xcm_command, "mixcube": evaluate_mixcube_command}


def _listed(name: str) -> None:
    """`evaluate --help` lists the command by its name and help; `EvaluateGroup` runs what `model_commands` builds."""

    def listed_only() -> None:
        raise AssertionError(f"evaluate {name} runs as model_commands() builds it")

    evaluate_app.command(name, help=MODEL_COMMANDS[name].__doc__)(listed_only)


for _name in MODEL_COMMANDS:
    _listed(_name)


@cache
def model_commands() -> dict[str, Command]:
    """The `3xcm` and `mixcube` commands with their options, from the backend unions (built once, when one is named):
    `--model-backend` offers the unions' backends and every scalar field of a backend is an option."""
    from evaluation.models.encoders import EncoderConfig
    from evaluation.models.vlm import VlmConfig
    from flows.cli.backend_options import backend_choice, field_options, with_options

    # the names the commands' annotations use, read by Typer when it builds them
    globals().update(
        EncoderBackend=backend_choice("EncoderBackend", EncoderConfig),
        VlmBackend=backend_choice("VlmBackend", VlmConfig),
        # MixCuBe's questions ask a VLM, its audit embeds with an encoder: --task says which the backend names.
        MixCubeBackend=backend_choice("MixCubeBackend", VlmConfig, EncoderConfig),
    )
    full = typer.Typer(cls=CliGroup)
    full.command("3xcm")(with_options(evaluate_3xcm_command, field_options(EncoderConfig), before="query"))
    mixcube_options = field_options(VlmConfig, EncoderConfig)
    full.command("mixcube")(with_options(evaluate_mixcube_command, mixcube_options, before="judge_backend"))
    return dict(typer.main.get_group(full).commands)


@evaluate_app.command("compare")
def compare_command(
    results: Annotated[list[Path], typer.Argument(help="Result folders of one benchmark (each has metrics.json).")],
    out: Annotated[Path | None, typer.Option(help="Write comparison.parquet, .md and .png here.")] = None,
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
    from evaluation.leaderboard.page import check_page_dir, page_files, write_page
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
        raise _fail(str(exc)) from None
    try:
        table, figure, markdown = compare(list(results))
        read = read_results(results)
        page = page_files(read) if html is not None else {}
    except (FileNotFoundError, ValueError, KeyError) as exc:
        raise _fail(f"cannot compare: {exc}") from None
    except OSError as exc:  # a card or figure that cannot be read
        raise _fail(os_error_line(exc)) from None
    typer.echo(markdown)
    typer.echo(breakdown_markdown(read))
    if out is not None:
        import pyarrow.parquet as pq

        try:
            out.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, out / "comparison.parquet")
            (out / "comparison.md").write_text(markdown)
            (out / "comparison.png").write_bytes(figure)
        except OSError as exc:
            raise _fail(os_error_line(exc), Refused) from None
        console.print(f"written: {out}/comparison.{{parquet,md,png}}", markup=False, soft_wrap=True)
    if html is not None:
        try:
            write_page(html, page)
        except OSError as exc:
            raise _fail(os_error_line(exc), Refused) from None
        console.print(f"written: {html}/index.html", markup=False, soft_wrap=True)
