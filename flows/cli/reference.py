"""`culturebench reference init|check|translate`: reference packs, the countries, languages, concepts and cultures
a benchmark is built for (`docs/reference-packs.md`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from flows.cli.errors import BadInput, CliGroup, Refused
from flows.cli.output import console, read_mapping, validation_line


def writable_pack(folder: Path, option: str) -> None:
    """A pack folder a command may write: never one inside a release or result folder (a release's `reference/` is
    part of it, listed in its manifest), nor one of the inputs."""
    from data.output_paths import OutputPathError, check_output

    try:
        check_output(folder, option=option, what="a reference pack")
    except OutputPathError as exc:
        raise BadInput(str(exc)) from None


reference_app = typer.Typer(
    cls=CliGroup,
    help="Start, check and translate reference packs (a benchmark for any cultures).",
    no_args_is_help=True,
)


@reference_app.command("init")
def reference_init_command(
    folder: Annotated[Path, typer.Argument(help="New folder to write the pack into.")],
    name: Annotated[
        str | None, typer.Option(help="The pack's name in pack.json (default: keep the default pack's, unchanged).")
    ] = None,
) -> None:
    """Write the default pack into FOLDER, ready to edit."""
    import json

    from data.reference import default_pack
    from data.reference_files import PACK_FILE, PackFiles, write_pack_files

    writable_pack(folder, "FOLDER")
    if folder.is_symlink() and not folder.exists():
        raise BadInput(f"{folder} is a link to nothing; `reference init` writes a new pack folder: choose another path")
    if os.path.lexists(folder) and (not folder.is_dir() or folder.is_symlink() or any(folder.iterdir())):
        raise BadInput(f"{folder} exists and is not an empty folder; `reference init` writes a new pack folder")
    pack = default_pack()
    files = dict(pack.files.files)
    if name is not None:
        info = pack.info.model_copy(update={"name": name, "version": "0.1.0"})
        from pydantic import ValidationError

        try:
            type(info).model_validate(info.model_dump())
        except ValidationError as exc:
            raise BadInput(validation_line(exc, "--name")) from None
        files[PACK_FILE] = (json.dumps(info.model_dump(mode="json"), ensure_ascii=False, indent=2) + "\n").encode()
    if folder.exists():
        folder.rmdir()  # empty: the pack replaces it whole
    write_pack_files(PackFiles(str(folder), files), folder)
    console.print(
        f"wrote {pack.info.name if name is None else name} ({len(files)} files) into {folder}; edit it, then "
        f"run `culturebench reference check {folder}`"
    )


@reference_app.command("check")
def reference_check_command(
    folder: Annotated[str, typer.Argument(help="The pack folder (a path or an fsspec URL).")],
) -> None:
    """Check a pack: one summary line and exit 0, or one line per error and exit 2."""
    from data.reference import load_pack

    pack = load_pack(folder)  # PackErrors: one line each, exit 2
    print(f"valid: {pack.summary()}")


@reference_app.command("translate")
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
