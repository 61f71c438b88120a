"""`culturebench reference init|check|translate`: reference packs, the countries, languages, concepts and cultures
a benchmark is built for (`docs/reference-packs.md`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from flows.cli.errors import BadInput, CliGroup
from flows.cli.output import console, validation_line
from flows.cli.pack_paths import writable_pack

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


from flows.cli.reference_translate import reference_translate_command  # noqa: E402  (registered on reference_app)

reference_app.command("translate")(reference_translate_command)
