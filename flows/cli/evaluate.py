"""`culturebench evaluate 3xcm|mixcube|compare`: a model on a release, from the command line, without Prefect (the
`evaluate` deployment runs the same code on a worker). Heavy imports wait until a command runs.

Every refusal is one red line naming the file or field: exit 2 for bad input (a config, a release whose tables are
not its manifest's, a result path inside a release or result folder), 1 for a result folder that exists with other
content. Everything cheap is checked before a model is loaded or asked anything."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from flows.cli.errors import BadInput, CliError, CliGroup, Refused
from flows.cli.output import InputFileError, console, os_error_line, progress_bars, read_mapping, validation_line

evaluate_app = typer.Typer(cls=CliGroup, help="Evaluate a model on a release, as the papers do.", no_args_is_help=True)


class EncoderBackend(StrEnum):
    open_clip = "open_clip"
    transformers = "transformers"
    sentence_transformers = "sentence-transformers"
    embeddings = "embeddings"


class VlmBackend(StrEnum):
    openai = "openai"
    gemini = "gemini"
    transformers = "transformers"


ReleaseArgument = Annotated[Path, typer.Argument(help="The release folder (it holds manifest.json).")]
OutOption = Annotated[
    Path | None, typer.Option(help="Result folder; default <results-root>/<benchmark>/<release version>/<model id>.")
]
ResultsRootOption = Annotated[Path, typer.Option(help="Root of the default result folders.")]
ConfigFileOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        exists=True,
        dir_okay=False,
        help="A JSON or YAML evaluation config (`model`, and any other field); options given here override it.",
    ),
]
DeviceOption = Annotated[str | None, typer.Option(help="auto, cpu or cuda.")]
PrecisionOption = Annotated[str | None, typer.Option(help="fp32, or fp16 (CUDA only).")]


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


def _validate(model: type, data: dict[str, Any], config: Path | None) -> Any:
    from pydantic import ValidationError

    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _fail(validation_line(exc, str(config) if config else "invalid evaluation options")) from None


def _run(config: Any) -> None:
    from pydantic import ValidationError

    from data.release import ReleaseExistsError
    from data.release_3xcm import ReleaseReadError
    from evaluation.results import headline_rows
    from evaluation.run import evaluate_and_write

    try:
        with progress_bars() as progress:
            written = evaluate_and_write(config, progress)
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
        console.print(f"  {row['metric']:>16}  {row['value']:>7}  {row['95% CI']}", markup=False)
    for reason in result.skipped:
        console.print(f"  not computed: {reason}", style="yellow", markup=False)
    console.print(f"{written.release.status}: {written.out}", markup=False, soft_wrap=True)
    typer.echo(json.dumps({"out": written.out, "status": written.release.status, "model_id": result.model_id}))


@evaluate_app.command("3xcm")
def evaluate_3xcm_command(
    release: ReleaseArgument,
    model_backend: Annotated[EncoderBackend | None, typer.Option(help="How the model is run.")] = None,
    image_embeddings: Annotated[
        str | None, typer.Option(help="embeddings: Parquet with image_id (string) and embedding (list of float).")
    ] = None,
    text_embeddings: Annotated[
        str | None, typer.Option(help="embeddings: Parquet with text (a benchmark row's exact query text), embedding.")
    ] = None,
    model_name: Annotated[str | None, typer.Option(help="open_clip: the architecture, e.g. ViT-B-32.")] = None,
    pretrained: Annotated[str | None, typer.Option(help="open_clip: a pretrained tag or a local weights file.")] = None,
    model_config_dir: Annotated[str | None, typer.Option(help="open_clip: folder of extra model configs.")] = None,
    model: Annotated[str | None, typer.Option(help="transformers: a local folder or a hub id.")] = None,
    text_model: Annotated[str | None, typer.Option(help="sentence-transformers: the text encoder.")] = None,
    image_model: Annotated[str | None, typer.Option(help="sentence-transformers: the image encoder.")] = None,
    device: DeviceOption = None,
    precision: PrecisionOption = None,
    batch_size: Annotated[int | None, typer.Option(min=1, help="Images or texts per model call.")] = None,
    query: Annotated[str | None, typer.Option(help="text (the paper's) or image: what queries the candidates.")] = None,
    bootstrap_resamples: Annotated[int | None, typer.Option(min=0, help="Resamples for the 95% CIs.")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of the bootstrap.")] = None,
    embedding_cache: Annotated[str | None, typer.Option(help="Folder of cached image vectors per model.")] = None,
    out: OutOption = None,
    results_root: ResultsRootOption = Path("./evaluations"),
    config: ConfigFileOption = None,
    demo_model: Annotated[
        bool, typer.Option(help="Evaluate a tiny random open_clip model (exercises the pipeline; meaningless).")
    ] = False,
) -> None:
    """Text-to-image retrieval on a 3XCM release: per-query winners, M_cr/M_lb/M_ti/SP with 95% CIs, RQ3's six
    M_k and App. P.2 tests, and Δsim. Exit 2 on bad input, 1 if the result folder exists with other content."""
    from evaluation.run import Evaluate3XCMConfig

    data = _read_config(config)
    options = {
        "image_embeddings": image_embeddings,
        "text_embeddings": text_embeddings,
        "model_name": model_name,
        "pretrained": pretrained,
        "model_config_dir": model_config_dir,
        "model": model,
        "text_model": text_model,
        "image_model": image_model,
        "device": device,
        "precision": precision,
        "batch_size": batch_size,
    }
    _model_or_demo(data, model_backend, options, demo_model)
    top = {"query": query, "bootstrap_resamples": bootstrap_resamples, "seed": seed, "embedding_cache": embedding_cache}
    data.update({k: v for k, v in top.items() if v is not None})
    _place(data, release, results_root, out)
    _run(_validate(Evaluate3XCMConfig, data, config))


@evaluate_app.command("mixcube")
def evaluate_mixcube_command(
    release: ReleaseArgument,
    model_backend: Annotated[VlmBackend | None, typer.Option(help="How the vision-language model is reached.")] = None,
    base_url: Annotated[
        str | None, typer.Option(help="openai/gemini: the endpoint (vLLM, SGLang, a hosted API).")
    ] = None,
    model: Annotated[str | None, typer.Option(help="The model name (API) or a local folder (transformers).")] = None,
    api_key_env: Annotated[str | None, typer.Option(help="The environment variable that holds the API key.")] = None,
    rate_per_s: Annotated[float | None, typer.Option(help="Requests per second at most.")] = None,
    cache_dir: Annotated[str | None, typer.Option(help="Folder of cached answers (a rerun asks nothing).")] = None,
    device: DeviceOption = None,
    precision: PrecisionOption = None,
    judge_backend: Annotated[
        VlmBackend | None, typer.Option(help="The judge of Cultural Marker Identification (Food, App. B.3).")
    ] = None,
    judge_base_url: Annotated[str | None, typer.Option(help="The judge's endpoint.")] = None,
    judge_model: Annotated[str | None, typer.Option(help="The judge model.")] = None,
    judge_api_key_env: Annotated[str | None, typer.Option(help="The judge's API key variable.")] = None,
    workers: Annotated[int | None, typer.Option(min=1, help="Questions in flight at once.")] = None,
    out: OutOption = None,
    results_root: ResultsRootOption = Path("./evaluations"),
    config: ConfigFileOption = None,
    demo_model: Annotated[
        bool, typer.Option(help="Ask a tiny random local VLM, judged by itself (exercises the pipeline; meaningless).")
    ] = False,
) -> None:
    """Country Identification (App. B.2) on every image of a MixCuBe release, and Cultural Marker Identification
    (App. B.3) on Food with a judge: accuracy per country x category x ethnicity and the drop from original to each
    swap. Exit 2 on bad input, 1 if the result folder exists with other content."""
    from evaluation.run import EvaluateMixCubeConfig

    data = _read_config(config)
    options = {
        "base_url": base_url,
        "model": model,
        "api_key_env": api_key_env,
        "rate_per_s": rate_per_s,
        "cache_dir": cache_dir,
        "device": device,
        "precision": precision,
    }
    _model_or_demo(data, model_backend, options, demo_model)
    if judge_backend is not None or data.get("judge"):
        judge = {"base_url": judge_base_url, "model": judge_model, "api_key_env": judge_api_key_env}
        judge["cache_dir"] = cache_dir  # one answer cache serves both (its keys name the model)
        data["judge"] = _model_section(data.get("judge") or {}, judge_backend.value if judge_backend else None, judge)
    if workers is not None:
        data["workers"] = workers
    _place(data, release, results_root, out)
    _run(_validate(EvaluateMixCubeConfig, data, config))


@evaluate_app.command("compare")
def compare_command(
    results: Annotated[list[Path], typer.Argument(help="Result folders of one benchmark (each has metrics.json).")],
    out: Annotated[Path | None, typer.Option(help="Write comparison.parquet, .md and .png here.")] = None,
) -> None:
    """Several models side by side: one table (printed as Markdown) and one figure. --out is checked before anything
    is read: never a file, an input, or a folder inside a release or result folder (those are immutable)."""
    from data.output_paths import OutputPathError, check_output
    from evaluation.results import compare

    if out is not None:
        try:
            if out.exists() and not out.is_dir():
                raise OutputPathError(f"--out {out} is a file: compare writes a folder of three files; choose a folder")
            check_output(out, inputs=results, option="--out")
        except OutputPathError as exc:
            raise _fail(str(exc)) from None
    try:
        table, figure, markdown = compare(results)
    except (FileNotFoundError, ValueError, KeyError) as exc:
        raise _fail(f"cannot compare: {exc}") from None
    typer.echo(markdown)
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
