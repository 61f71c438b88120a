"""`culturebench concepts generate|accept`: candidate concepts from Gemini (paper App. H), reviewed in a CSV file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flows.cli.errors import BadInput, CliGroup
from flows.cli.output import console, read_mapping, validation_line

concepts_app = typer.Typer(
    cls=CliGroup, help="Generate candidate concepts with Gemini and review them.", no_args_is_help=True
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
    from flows.generate_concepts import generate_concepts

    # an InputFileError (the settings file) or a GeminiConfigError (no key): exit 2
    raw = read_mapping(config, "concept generation settings (count: 100, ...)") if config else {}
    if count is not None:
        raw["count"] = count
    if model is not None:
        raw.setdefault("gemini", {})["model"] = model
    try:
        cfg = GeminiConceptGenerationConfig.model_validate(raw)
        summary = generate_concepts(cfg, review_file)
    except ValidationError as exc:
        raise BadInput(validation_line(exc, str(config or "options"))) from None
    for failure in summary.failures:
        console.print(f"[red]generation failed ({failure['error']}): {failure['detail']}[/red]")
    console.print(f"{summary.candidates} candidates, {summary.added} new, in {review_file}", markup=False)
    if summary.failures:
        raise typer.Exit(1)


@concepts_app.command("accept")
def concepts_accept_command(
    review_file: Annotated[str, typer.Argument(help="The review file.")],
    candidate_ids: Annotated[
        list[str] | None, typer.Argument(help="Candidates to decide (all pending if none).")
    ] = None,
    reject: Annotated[bool, typer.Option(help="Reject instead of accepting.")] = False,
    reference: Annotated[
        str | None, typer.Option(help="The reference pack the review file extends (default: the shipped one).")
    ] = None,
) -> None:
    """Accept (or reject) candidates; each accepted one gets a stable new concept id (1000 and up, after the
    pack's own ids)."""
    from collectors.concept_generation import accept_candidates
    from data.reference import pack_or_default

    try:  # a ReviewFileError: exit 2
        changed = accept_candidates(review_file, pack_or_default(reference), candidate_ids or None, reject=reject)
    except (KeyError, FileNotFoundError) as exc:  # an unknown candidate id, no review file
        raise BadInput(exc) from None
    for row in changed:
        console.print(
            f"{row.review_status}: {row.candidate_id} {row.concept!r} (concept_id {row.concept_id})", markup=False
        )  # a path or a candidate id is printed as it is, never read as rich markup
    console.print(f"{len(changed)} rows changed in {review_file}", markup=False)
