"""`culturebench validate` (a release folder), `audit` (a 3XCM benchmark file) and `reassemble` (a violation-free
3XCM benchmark over an existing one's images): the commands that check a benchmark against its rules."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flows.cli.errors import BadInput, Refused
from flows.cli.output import console


def validate_command(release_dir: Annotated[Path, typer.Argument(exists=True, file_okay=False)]) -> None:
    """Check a release folder (3XCM or MixCuBe): every file against its manifest, then the benchmark's rules; exit
    1 when a file differs or a row breaks a rule, 2 when the folder is not a readable release."""
    from flows.operations.validate import check_release

    manifest, report = check_release(release_dir)  # a ReleaseReadError: exit 2
    console.print(f"{manifest.name} {manifest.version}: {report.summary()}", markup=False, soft_wrap=True)
    if not report.ok:
        raise typer.Exit(1)


def audit_command(
    file: Annotated[
        Path,
        typer.Argument(help="A 3XCM RQ2 benchmark: the authors' xcm-bench.csv, a .csv or .parquet, a release folder."),
    ],
    metadata: Annotated[
        Path | None,
        typer.Option(
            help="image_metadata Parquet (a file or a folder of parts) for the tag, copy and index checks; "
            "a release folder's own by default."
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(help="Write the violations (rule, row, detail, the row's own columns) to a .csv or .parquet."),
    ] = None,
    max_reuse: Annotated[
        int | None,
        typer.Option(min=1, show_default=False, help="Most times one image may be a candidate (default 5)."),
    ] = None,
) -> None:
    """Audit a 3XCM benchmark file against every rule it can decide by itself; exit 1 on violations, 2 on bad input."""
    import time

    from rich.markup import escape
    from rich.table import Table

    from curation.rule_audit import DEFAULT_MAX_REUSE, audit_path, check_out_path, write_violations

    started = time.perf_counter()
    # an AuditInputError (exit 2) is one line, whatever the path holds
    if out is not None:
        check_out_path(out, [file, *([metadata] if metadata else [])])  # before the work: a typo costs nothing
    audit = audit_path(file, metadata, max_reuse or DEFAULT_MAX_REUSE)
    report = audit.report
    table = Table(title=f"audit of {escape(report.source)}: {report.rows:,} rows, {report.images:,} images")
    table.add_column("rule", no_wrap=True, min_width=max(len(rule.rule) for rule in report.rules))
    table.add_column("checked", justify="right")
    table.add_column("violations", justify="right")
    table.add_column("what must hold")
    for rule in report.rules:
        count = f"[red]{rule.violations:,}[/red]" if rule.violations else "0"
        table.add_row(rule.rule, f"{rule.checked:,}", count, rule.description)
    console.print(table)
    reuse = report.reuse
    console.print(
        f"candidate reuse: max {reuse.maximum} ({', '.join(reuse.most_reused[:5])}), mean {reuse.mean:.2f} over "
        f"{reuse.candidate_images:,} candidate images, cap {reuse.cap}",
        markup=False,
    )
    console.print(
        "images by times used as a candidate: " + ", ".join(f"{k}: {v:,}" for k, v in reuse.distribution.items()),
        markup=False,
    )
    if report.metadata is None:
        console.print("no image_metadata given: the tag, copy and index rules were not checked (--metadata)")
    if out is not None:
        try:
            write_violations(audit.violations, out)
        except OSError as exc:
            raise BadInput(f"{out}: cannot write the violations ({' '.join(str(exc).split())})") from None
        console.print(f"violations written to {out}", markup=False)
    rows = len(audit.violations["row"].unique())
    verdict = f"{report.violations:,} violation(s) in {rows:,} row(s)" if not report.ok else "no violations"
    timing = f"read and checked in {time.perf_counter() - started:.2f} s, the checks {report.seconds:.2f} s"
    console.print(f"{verdict} ({timing})", style="red" if not report.ok else "green")
    if not report.ok:
        raise typer.Exit(1)


def reassemble_command(
    pool: Annotated[
        Path,
        typer.Option(
            help="The benchmark whose images form the pool: the authors' xcm-bench.csv, a .csv or .parquet, "
            "or a release folder (its image_metadata's tags count)."
        ),
    ],
    out: Annotated[Path, typer.Option(help="Folder to write (benchmarks/xcm-bench.csv, Parquet, card, manifest).")],
    seed: Annotated[int, typer.Option(help="Seed of the assembler's tie-break order.")] = 0,
    max_reuse: Annotated[int, typer.Option(min=1, help="Most times one image may be an RQ2 candidate.")] = 5,
) -> None:
    """Build a violation-free RQ2 benchmark (and RQ3 sextets) over the images of an existing one, keeping its image
    ids, its indexes and every row that already obeys the rules. Exit 1 if the result breaks a rule, 2 on bad input."""
    import time

    from curation.reassemble import reassemble
    from data.output_paths import check_output
    from flows.xcm.reassembled import write_reassembled

    started = time.perf_counter()
    # an OutputPathError (a file, a FIFO or /dev/zero as --out, or a path inside the pool) or AuditInputError: exit 2
    check_output(out, [pool], immutable_target=True, what="a reassembled benchmark")
    result = reassemble(pool, seed=seed, max_reuse=max_reuse)
    console.print(
        f"{result.benchmark.num_rows:,} queries over {result.pool.table.num_rows:,} images: {result.kept:,} rows kept, "
        + ", ".join(f"{n:,} replaced ({why})" for why, n in result.replaced.items())
        + f"; {result.benchmark_cd.num_rows:,} sextets",
        markup=False,
    )
    console.print(f"validation: {result.validation.summary()}", markup=False)
    if not result.validation.ok:
        raise Refused("nothing written: the reassembled benchmark breaks a rule")
    # a ReleaseExistsError or an OSError: exit 1
    written = write_reassembled(str(out), result.benchmark, result.benchmark_cd, result.unassembled, result.manifest())
    after = result.audit_after.report
    console.print(
        f"{written.status}: {written.path} (max candidate reuse {result.audit_before.report.reuse.maximum} -> "
        f"{after.reuse.maximum}; {time.perf_counter() - started:.1f} s)",
        markup=False,
    )
