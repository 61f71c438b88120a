"""`culturebench reference init|check|translate`: reference packs, the countries, languages, concepts and cultures
a benchmark is built for (`docs/reference-packs.md`)."""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from flows.cli.errors import BadInput, CliGroup
from flows.cli.output import console
from flows.cli.pack_paths import writable_pack

reference_app = typer.Typer(
    cls=CliGroup,
    help="Start, check and translate reference packs (a benchmark for any cultures).",
    no_args_is_help=True,
)


def _names(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def _pack_name(name: str | None, folder: Path) -> str:
    import re

    chosen = name if name is not None else re.sub(r"[^a-z0-9_.-]+", "-", folder.name.lower()).strip("-.") or "my-pack"
    if not re.fullmatch(r"[a-z0-9][a-z0-9_.-]{0,99}", chosen):
        raise BadInput(f"--name {chosen!r} is not a pack name: lower-case letters, digits, '_', '.', '-'")
    return chosen


@reference_app.command("init")
def reference_init_command(
    folder: Annotated[Path, typer.Argument(help="New folder to write the pack into.")],
    source: Annotated[
        str | None,
        typer.Option(
            "--from",
            help="The pack to start from: a pack folder (e.g. examples/packs/globalrg); default: the shipped pack.",
        ),
    ] = None,
    countries: Annotated[
        str | None, typer.Option(help="Keep only these countries (names, slugs or ISO codes), comma-separated.")
    ] = None,
    concepts: Annotated[
        str | None,
        typer.Option(help="Keep only these concepts, comma-separated; a name the source lacks becomes a new concept."),
    ] = None,
    empty: Annotated[
        bool, typer.Option("--empty", help="Write a skeleton: every file with its header and a commented example.")
    ] = False,
    name: Annotated[
        str | None,
        typer.Option(help="The pack's name in pack.json (default: the folder's; a whole copy keeps the source's)."),
    ] = None,
) -> None:
    """Start a pack in FOLDER: a copy of a pack, one cut down to --countries and --concepts, or --empty."""
    import json

    from data.pack_cut import CutError, cut_pack, skeleton
    from data.reference import default_pack, load_pack
    from data.reference_files import PACK_FILE, PackFiles, write_pack_files
    from data.reference_parse import parse_pack

    writable_pack(folder, "FOLDER")
    if folder.is_symlink() and not folder.exists():
        raise BadInput(f"{folder} is a link to nothing; `reference init` writes a new pack folder: choose another path")
    if os.path.lexists(folder) and (not folder.is_dir() or folder.is_symlink() or any(folder.iterdir())):
        raise BadInput(f"{folder} exists and is not an empty folder; `reference init` writes a new pack folder")
    if empty and (source or countries or concepts):
        raise BadInput("--empty writes a skeleton: it takes no --from, --countries or --concepts")
    pack = load_pack(source) if source else default_pack()
    label = source or "the shipped pack"
    summary = ""
    if empty:
        files = skeleton(_pack_name(name, folder))
        summary = "a skeleton: fill countries.csv and concepts.csv, then the languages (see its README.md)"
    elif countries or concepts:
        kept_countries = _names(countries) or [c.name for c in pack.countries]
        kept_concepts = _names(concepts) or [c.concept for c in pack.concepts]
        try:
            cut = cut_pack(pack, kept_countries, kept_concepts, _pack_name(name, folder), label)
        except CutError as exc:
            raise BadInput(str(exc)) from None
        files = cut.files
        summary = (
            f"{len(cut.countries)} countries, {len(cut.concepts)} concepts ({len(cut.new_concepts)} new), "
            f"{len(cut.languages)} language(s) ({', '.join(cut.languages)}) cut from {label}"
            + "".join(f"; left out {d}" for d in cut.dropped)
        )
    else:
        files = dict(pack.files.files)
        if name is not None:
            info = {**pack.info.model_dump(mode="json"), "name": _pack_name(name, folder), "version": "0.1.0"}
            files[PACK_FILE] = (json.dumps(info, ensure_ascii=False, indent=2) + "\n").encode()
        summary = f"a copy of {label}"
    parse_pack(PackFiles(str(folder), files))  # what is written is a pack the reader takes
    if folder.exists():
        folder.rmdir()  # empty: the pack replaces it whole
    write_pack_files(PackFiles(str(folder), files), folder)
    console.print(
        f"wrote {len(files)} files into {folder}: {summary}; edit it, then run `culturebench reference check {folder}`"
    )


class BuildFor(StrEnum):
    xcm = "3xcm"
    mixcube = "mixcube"


@reference_app.command("check")
def reference_check_command(
    folder: Annotated[str, typer.Argument(help="The pack folder (a path or an fsspec URL).")],
    for_: Annotated[
        BuildFor | None,
        typer.Option("--for", help="Exit 2 exactly when a build of this benchmark from the pack would be refused."),
    ] = None,
    missing: Annotated[
        Path,
        typer.Option(help="Where to list each entry a 3XCM build lacks (the build's own reference_missing.csv)."),
    ] = Path("reference_missing.csv"),
) -> None:
    """Check a pack: one line per error and exit 2; else a summary line, then what a build of the pack's countries
    and concepts would lack (listed in --missing), exiting 2 with --for when that build would be refused."""
    from collectors.pack_needs import missing_csv, missing_summary, pack_build_problems, pack_missing
    from data.reference import load_pack

    pack = load_pack(folder)  # PackErrors: one line each, exit 2
    print(f"valid: {pack.summary()}")
    refused: dict[str, list[str]] = {}
    lacks = pack_missing(pack)
    problems = pack_build_problems(pack, "3xcm")
    if lacks:
        if "://" not in folder:
            writable_pack(missing, "--missing", inputs=[Path(folder)])
        _write_atomically(missing, missing_csv(lacks))
        problems.append(f"lacks {missing_summary(lacks)}, each listed in {missing}")
    refused["3xcm"] = problems
    refused["mixcube"] = pack_build_problems(pack, "mixcube")
    for benchmark, lines in refused.items():
        verdict = "would be refused" if lines else "has what it needs"
        print(f"build {benchmark}: {verdict}" + "".join(f"\n  {line}" for line in lines))
    if for_ is not None and refused[for_.value]:
        raise BadInput(f"a {for_.value} build of {pack.info.name} would be refused: {refused[for_.value][0]}")


def _write_atomically(path: Path, data: bytes) -> None:
    staging = path.with_name(f".{path.name}.partial-{os.getpid()}")
    staging.write_bytes(data)
    os.replace(staging, path)


@reference_app.command("prune")
def reference_prune_command(
    folder: Annotated[Path, typer.Argument(help="The pack folder to prune.")],
) -> None:
    """Drop the i18n/ rows that name a country or concept the pack no longer holds, then check the pack."""
    from data.pack_cut import pruned
    from data.reference import load_pack
    from data.reference_files import read_pack_files
    from data.reference_write import write_file

    writable_pack(folder, "FOLDER")
    files = read_pack_files(folder)
    changed, lost = pruned(dict(files.files))
    for name, data in changed.items():
        write_file(str(folder), name, data)
    for name, count in lost.items():
        console.print(f"{name}: dropped {count} row(s) naming a country or concept the pack does not hold")
    if not changed:
        console.print(f"{folder}: nothing to prune")
    pack = load_pack(folder)  # anything else wrong: one line each, exit 2
    print(f"valid: {pack.summary()}")


@reference_app.command("sheet")
def reference_sheet_command(
    folder: Annotated[Path, typer.Argument(help="The pack folder.")],
    out: Annotated[Path, typer.Option(help="The sheet to write: a CSV file (open it in any spreadsheet program).")],
    languages: Annotated[
        str | None, typer.Option(help="Languages to list, comma-separated (default: every language of the pack).")
    ] = None,
) -> None:
    """Write every missing or draft translation of the pack as one row of a sheet to fill offline."""
    from data.pack_sheet import sheet_bytes, sheet_entries
    from data.reference import load_pack
    from data.reference_parse import known_language

    codes = _names(languages) or None
    unknown = [c for c in codes or [] if not known_language(c)]
    if unknown:
        raise BadInput(f"--languages: {unknown} is not a list of language codes CLDR knows")
    writable_pack(out, "--out", inputs=[folder])
    if os.path.lexists(out) and not out.is_file():
        raise BadInput(f"--out {out} exists and is not a file; choose a new file name")
    pack = load_pack(folder)
    entries = sheet_entries(pack, codes)
    _write_atomically(out, sheet_bytes(entries))
    by_status: dict[str, int] = {}
    for entry in entries:
        by_status[entry.status] = by_status.get(entry.status, 0) + 1
    counts = ", ".join(f"{n} {status}" for status, n in sorted(by_status.items())) or "nothing to fill"
    console.print(
        f"wrote {len(entries)} row(s) into {out} ({counts}); fill `translation` (and `reviewer`, the native speaker "
        f"who wrote or checked it), then run `culturebench reference fill {folder} {out}`"
    )


@reference_app.command("fill")
def reference_fill_command(
    folder: Annotated[Path, typer.Argument(help="The pack folder to merge into.")],
    sheet: Annotated[Path, typer.Argument(help="A filled sheet: the CSV `reference sheet` wrote, or an .xlsx of it.")],
) -> None:
    """Merge a filled sheet into the pack: every row with a translation; nothing when any row is refused."""
    from data.pack_entries import apply_changes
    from data.pack_sheet import SheetError, sheet_changes
    from data.reference import PackErrors, load_pack

    writable_pack(folder, "FOLDER")
    pack = load_pack(folder)
    try:
        changes = sheet_changes(pack, sheet)
        written = apply_changes(pack, changes)
    except PackErrors as exc:  # a translation the pack may not hold: its line names the file, row and field
        raise BadInput(f"{sheet}: refused, nothing written: {exc.errors[0]}") from None
    except SheetError as exc:
        raise BadInput(str(exc)) from None
    except ValueError as exc:  # a change no file can hold (a country's name without its form)
        raise BadInput(f"{sheet}: refused, nothing written: {exc}") from None
    reviewed = sum(c.status == "native_reviewed" for c in changes)
    console.print(
        f"merged {len(changes)} translation(s) from {sheet} ({reviewed} by a named reviewer) into "
        f"{len(written)} file(s) of {folder}"
    )
    print(f"valid: {load_pack(folder).summary()}")


from flows.cli.reference_translate import reference_translate_command  # noqa: E402  (registered on reference_app)

reference_app.command("translate")(reference_translate_command)
