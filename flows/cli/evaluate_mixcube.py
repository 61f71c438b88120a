"""`culturebench evaluate mixcube`: a vision-language model (or a harness's prediction file) on a MixCuBe release,
or the bias audit of an encoder, from the command line; its registry entry (`evaluation/mixcube/benchmark.py`) names
`command`, which builds it with the VLM and encoder backends' options."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from flows.cli.backend_options import plain
from flows.cli.errors import BadInput
from flows.cli.evaluate_common import (
    BootstrapOption,
    ConfigFileOption,
    EmbeddingCacheOption,
    NameOption,
    OutOption,
    ReleaseArgument,
    ResultsRootOption,
    SeedOption,
    display_name,
    model_or_demo,
    model_section,
    place,
    read_config,
    run,
    validate,
)

if TYPE_CHECKING:  # made at run time from the backend unions (Typer reads those): checked as their base
    VlmBackend = StrEnum
    MixCubeBackend = StrEnum


class MixCubeTask(StrEnum):
    questions = "questions"
    audit = "audit"


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
    name: NameOption = None,
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
            help="Score a harness's prediction file instead of asking a model (VLMEvalKit: <model>_MixCuBe.xlsx "
            "or .tsv, from `culturebench export --harness vlmevalkit`; lmms-eval: its --log_samples "
            "*_samples_culturebench_mixcube.jsonl or its --output_path folder), or a plain CSV or TSV of sample_id "
            "and prediction (the result names it a CSV or TSV).",
        ),
    ] = None,
    predictions_format: Annotated[
        str, typer.Option(help="Which harness wrote --predictions (vlmevalkit also reads a plain CSV or TSV).")
    ] = "vlmevalkit",
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
    from evaluation.mixcube.evaluate import EvaluateMixCubeConfig

    data = read_config(config)
    display_name(data, name)
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
        model_or_demo(data, model_backend, options, demo_model)
    if judge_backend is not None or data.get("judge"):
        given = {"base_url": judge_base_url, "model": judge_model, "api_key_env": judge_api_key_env}
        judge = {**plain(given), **({"cache_dir": options["cache_dir"]} if "cache_dir" in options else {})}
        # one answer cache serves both (its keys name the model)
        data["judge"] = model_section(data.get("judge") or {}, judge_backend.value if judge_backend else None, judge)
    if workers is not None:
        data["workers"] = workers
    top = {"task": task, "bootstrap_resamples": bootstrap_resamples, "seed": seed, "embedding_cache": embedding_cache}
    data.update(plain(top))
    place(data, release, results_root, out)
    run(validate(EvaluateMixCubeConfig, data, config))


def command() -> Callable[..., None]:
    """The command with its options: `--model-backend` offers the VLM and encoder backends (--task says which
    kind it names), `--judge-backend` the VLM ones, and every scalar field of a backend is an option."""
    from evaluation.models.encoders import EncoderConfig
    from evaluation.models.vlm import VlmConfig
    from flows.cli.backend_options import backend_choice, field_options, with_options

    globals().update(  # read by Typer when it builds the command
        VlmBackend=backend_choice("VlmBackend", VlmConfig),
        MixCubeBackend=backend_choice("MixCubeBackend", VlmConfig, EncoderConfig),
    )
    return with_options(evaluate_mixcube_command, field_options(VlmConfig, EncoderConfig), before="judge_backend")


command.__doc__ = evaluate_mixcube_command.__doc__
