"""`culturebench reference translate`: drafts of what a pack lacks in a language, written into the pack."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flows.cli.errors import BadInput, Refused
from flows.cli.output import console, read_mapping, validation_line
from flows.cli.pack_paths import writable_pack


def reference_translate_command(
    folder: Annotated[str, typer.Argument(help="The pack folder to add drafts to.")],
    languages: Annotated[str, typer.Option(help="Language codes to draft, comma-separated (e.g. id,sw).")],
    config: Annotated[
        Path | None,
        typer.Option(
            help="YAML/JSON GeminiTranslationsConfig (gemini: {model, base_url, ...}, batch_size).",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
    model: Annotated[str | None, typer.Option(help="Gemini model id.")] = None,
) -> None:
    """Draft what the pack lacks in each language (the language, its country names, the concepts' translations)
    with Gemini, marked awaiting native review, and write the drafts into the pack."""
    from pydantic import ValidationError

    from collectors.pack_drafts import draft_language
    from collectors.translations import GeminiTranslationsConfig, GeminiTranslator
    from data.reference import load_pack
    from data.reference_parse import known_language
    from data.reference_write import add_language_drafts

    if "://" not in folder:
        writable_pack(Path(folder), "FOLDER")
    codes = [c.strip() for c in languages.split(",") if c.strip()]
    unknown = [c for c in codes if not known_language(c)]
    if not codes or unknown:
        raise BadInput(f"--languages: {unknown or languages!r} is not a list of language codes CLDR knows")
    raw = read_mapping(config, "translation settings (gemini: {model: ...}, batch_size: 40)") if config else {}
    raw["backend"] = "gemini"
    if model is not None:
        raw.setdefault("gemini", {})["model"] = model
    try:
        settings = GeminiTranslationsConfig.model_validate(raw)
    except ValidationError as exc:
        raise BadInput(validation_line(exc, str(config or "options"))) from None
    failed = 0
    for code in codes:
        pack = load_pack(folder)  # again after each language: the drafts are now part of it
        drafts = draft_language(pack, code, settings.gemini, GeminiTranslator(settings))
        written = add_language_drafts(pack.files, code, drafts.language, drafts.country_names, drafts.translations)
        for failure in drafts.failures:
            console.print(f"[red]{code}: drafting failed ({failure['error']}): {failure['detail']}[/red]")
        failed += len(drafts.failures)
        console.print(f"{code}: {drafts.count} drafts into {', '.join(written) or 'nothing (complete)'}")
    pack = load_pack(folder)
    print(f"valid: {pack.summary()}")
    if failed:
        raise Refused(f"{failed} drafting request(s) failed; rerun to retry them (answers given are kept)")
