"""`culturebench evaluate 3xcm`: an encoder on a 3XCM release from the command line; its registry entry
(`evaluation/xcm/benchmark.py`) names `command`, which builds it with the encoder backends' options."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from flows.cli.backend_options import plain
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
    place,
    read_config,
    run,
    validate,
)

if TYPE_CHECKING:  # made at run time from the backend union (Typer reads it): checked as its base
    EncoderBackend = StrEnum


class XcmTask(StrEnum):
    triplet = "triplet"
    retrieval = "retrieval"
    all = "all"


def evaluate_3xcm_command(
    release: ReleaseArgument,
    model_backend: Annotated[EncoderBackend | None, typer.Option(help="How the model is run.")] = None,
    name: NameOption = None,
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
    from evaluation.xcm.evaluate import Evaluate3XCMConfig

    data = read_config(config)
    display_name(data, name)
    model_or_demo(data, model_backend, plain(model_options), demo_model)
    top = {"task": task, "query": query, "bootstrap_resamples": bootstrap_resamples, "seed": seed}
    data.update(plain({**top, "embedding_cache": embedding_cache}))
    place(data, release, results_root, out)
    run(validate(Evaluate3XCMConfig, data, config))


def command() -> Callable[..., None]:
    """The command with its options: `--model-backend` offers the encoder union's backends and every scalar field
    of a backend is an option."""
    from evaluation.models.encoders import EncoderConfig
    from flows.cli.backend_options import backend_choice, field_options, with_options

    globals().update(EncoderBackend=backend_choice("EncoderBackend", EncoderConfig))  # read by Typer
    return with_options(evaluate_3xcm_command, field_options(EncoderConfig), before="query")


command.__doc__ = evaluate_3xcm_command.__doc__
