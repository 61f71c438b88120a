"""`culturebench reference translate`: drafts of what a pack lacks in a language, written into the pack."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from flows.cli.errors import BadInput, Refused
from flows.cli.output import console, read_mapping, validation_line
from flows.cli.pack_paths import writable_pack

if TYPE_CHECKING:  # imported when a command runs: the CLI starts without them
    from data.schemas import LlmFailureRow


class Drafter(StrEnum):
    cldr = "cldr"
    gemini = "gemini"
    openai = "openai"


def reference_translate_command(
    folder: Annotated[str, typer.Argument(help="The pack folder to add drafts to.")],
    languages: Annotated[str, typer.Option(help="Language codes to draft, comma-separated (e.g. id,sw).")],
    config: Annotated[
        Path | None,
        typer.Option(
            help="YAML/JSON translation settings: backend (gemini or openai), gemini: {model, ...} or openai: "
            "{base_url, model, ...}, batch_size.",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
    backend: Annotated[
        Drafter | None,
        typer.Option(
            help="cldr: only what CLDR knows (names; no key, no network); gemini; openai: an OpenAI-compatible "
            "endpoint (--base-url). Default: the config's backend, else gemini with --config or --model, else cldr."
        ),
    ] = None,
    base_url: Annotated[
        str | None, typer.Option(help="The OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1.")
    ] = None,
    model: Annotated[str | None, typer.Option(help="The model id (Gemini's, or the endpoint's).")] = None,
) -> None:
    """Draft what the pack lacks in each language, marked awaiting native review, and write the drafts into the
    pack: the language's and countries' names from CLDR, and (with a model) the RQ3 template, the countries' forms
    in it and the concepts' translations."""
    from collectors.pack_drafts import draft_language
    from data.reference import load_pack
    from data.reference_parse import known_language
    from data.reference_write import add_language_drafts

    if "://" not in folder:
        writable_pack(Path(folder), "FOLDER")
    codes = [c.strip() for c in languages.split(",") if c.strip()]
    unknown = [c for c in codes if not known_language(c)]
    if not codes or unknown:
        raise BadInput(f"--languages: {unknown or languages!r} is not a list of language codes CLDR knows")
    raw = read_mapping(config, "translation settings (backend: openai, openai: {base_url: ..., model: ...})") if (
        config
    ) else {}  # fmt: skip
    chosen = backend.value if backend else raw.get("backend") or ("gemini" if config or model else "cldr")
    if chosen not in {d.value for d in Drafter}:
        raise BadInput(f"{config}: backend {chosen!r} drafts nothing; use one of {', '.join(d.value for d in Drafter)}")
    translator = None if chosen == "cldr" else _translator(chosen, raw, base_url, model, str(config or "options"))
    failures: list[tuple[str, LlmFailureRow]] = []
    for code in codes:
        pack = load_pack(folder)  # again after each language: the drafts are now part of it
        drafts = draft_language(pack, code, translator)
        written = add_language_drafts(pack.files, code, drafts.language, drafts.country_names, drafts.translations)
        failures += [(code, failure) for failure in drafts.failures]
        if written:
            console.print(f"{code}: {drafts.count} drafts into {', '.join(written)}")
        elif not drafts.failures:
            console.print(f"{code}: nothing {'CLDR knows' if translator is None else 'to draft'} is missing")
    pack = load_pack(folder)
    print(f"valid: {pack.summary()}")
    if translator is None:
        console.print(
            "CLDR gives names only: the RQ3 templates, the countries' forms and the translations are for a model "
            f"(--backend gemini or openai) or a person (culturebench reference sheet {folder} --out sheet.csv)"
        )
    if failures:
        assert translator is not None  # CLDR's part makes no request
        code, last = failures[-1]
        failed = sorted({c for c, _ in failures})
        raise Refused(
            f"{translator.endpoint} ({translator.model}): drafting failed ({last['error']}) for {len(failures)} "
            f"request(s), after {last['attempts']} attempt(s) each: {last['detail']}; nothing more was drafted for "
            f"{', '.join(failed)} (drafts written are kept; rerun to retry)"
        )


def _translator(backend: str, raw: dict[str, Any], base_url: str | None, model: str | None, where: str) -> Any:
    """The model translator of the settings, the options overriding the file."""
    from pydantic import TypeAdapter, ValidationError

    from collectors.translations import GeminiTranslator, TranslationsConfig

    raw = {**raw, "backend": backend}
    section = raw.setdefault(backend, {})
    if not isinstance(section, dict):
        raise BadInput(f"{where}: {backend}: not a mapping of settings")
    if model is not None:
        section["model"] = model
    if base_url is not None:
        section["base_url"] = base_url
    try:
        settings = TypeAdapter(TranslationsConfig).validate_python(raw)
    except ValidationError as exc:
        raise BadInput(validation_line(exc, where)) from None
    return GeminiTranslator(settings)  # type: ignore[arg-type]  # the union's model backends, not shipped
