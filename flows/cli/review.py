"""`culturebench review translations`: a pack's draft translations reviewed by native speakers in Label Studio."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from flows.cli.errors import BadInput
from flows.cli.output import console
from flows.cli.pack_paths import writable_pack

if TYPE_CHECKING:  # imported when a command runs: the CLI starts without them
    from annotation.label_studio import LabelStudioProject

review_app = typer.Typer(help="People review what a build or a pack needs reviewed.", no_args_is_help=True)


@review_app.command("translations")
def review_translations_command(
    folder: Annotated[Path, typer.Argument(help="The pack folder.")],
    languages: Annotated[
        str | None, typer.Option(help="Language codes, comma-separated (default: every language of the pack).")
    ] = None,
    collect: Annotated[
        bool, typer.Option("--collect", help="Read the projects' annotations back into the pack.")
    ] = False,
    url: Annotated[str, typer.Option(help="The Label Studio server.")] = "http://127.0.0.1:8080",
    api_key_env: Annotated[
        str, typer.Option(help="Environment variable holding a Label Studio access token.")
    ] = "LABEL_STUDIO_API_KEY",
    annotators: Annotated[int, typer.Option(min=1, max=50, help="Native speakers per entry.")] = 2,
    decisions: Annotated[Path, typer.Option(help="With --collect: where to list every entry's decision (CSV).")] = Path(
        "translation_review.csv"
    ),
) -> None:
    """Create one Label Studio project per language with a task per draft entry; with --collect, decide each entry
    by majority (ties undecided), mark the accepted and corrected ones native-reviewed, and report Fleiss' kappa."""
    from annotation.label_studio import LabelStudioProject, LabelStudioServerConfig
    from annotation.translation_review import SPEC, project_name, translation_tasks
    from data.pack_entries import entry_languages
    from data.reference import load_pack
    from data.reference_parse import known_language

    writable_pack(folder, "FOLDER")
    pack = load_pack(folder)
    codes = entry_languages(pack, [c.strip() for c in languages.split(",") if c.strip()] if languages else None)
    unknown = [c for c in codes if not known_language(c)]
    if not codes or unknown:
        raise BadInput(f"--languages: {unknown or languages!r} is not a list of language codes CLDR knows")
    if not os.environ.get(api_key_env, "").strip():
        raise BadInput(f"--api-key-env: {api_key_env} is not set; put a Label Studio access token in it")
    # Text tasks serve no files: the document root is never read.
    server = LabelStudioServerConfig(url=url, api_key_env=api_key_env, document_root=str(folder))
    projects = {code: LabelStudioProject(server, SPEC, project_name(pack, code), annotators) for code in codes}
    if collect:
        _collect(folder, projects, annotators, decisions)
        return
    for code, project in projects.items():
        tasks = translation_tasks(pack, code)
        if not tasks:
            console.print(f"{code}: no draft to review")
            continue
        new, total = project.export(tasks)
        console.print(f"{code}: {total} entries to review ({new} new) at {project.location}")


def _collect(folder: Path, projects: dict[str, LabelStudioProject], annotators: int, decisions: Path) -> None:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    from annotation.translation_review import DECISION_FIELDS, collect_language
    from data.pack_entries import apply_changes
    from data.reference import load_pack

    writable_pack(decisions, "--decisions", inputs=[folder])
    rows = []
    for code, project in projects.items():
        pack = load_pack(folder)  # again per language: the last one's changes are in it
        collected = collect_language(pack, code, project.snapshot(), annotators)
        written = apply_changes(pack, collected.changes) if collected.changes else []
        rows += collected.decisions
        counts = ", ".join(f"{n} {what}" for what, n in sorted(collected.counts().items())) or "no votes yet"
        kappa = collected.agreement.fleiss_kappa
        agreement = (
            f"Fleiss' kappa {kappa:.3f} over {collected.agreement.tasks_rated} entries rated by {annotators}"
            if kappa is not None
            else f"Fleiss' kappa undefined ({collected.agreement.tasks_rated} entries rated by {annotators})"
        )
        console.print(f"{code}: {counts}; {agreement}; {len(collected.changes)} entries native-reviewed")
        if written:
            console.print(f"{code}: wrote {', '.join(written)}")
    staging = decisions.with_name(f".{decisions.name}.partial-{os.getpid()}")
    pacsv.write_csv(pa.Table.from_pylist(rows, schema=DECISION_FIELDS), staging)
    os.replace(staging, decisions)
    print(f"valid: {load_pack(folder).summary()}; decisions in {decisions}")
