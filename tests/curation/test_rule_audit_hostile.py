"""Hostile benchmark files at `audit` and `reassemble` (issue 27, items 6, 10 and 21): formula and markup concept
names are refused, no output overwrites an input or lands in a release, every CSV cell we write is inert, and an
image under two indexes is one line, not a traceback."""

from __future__ import annotations

import csv
import io
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import flows.cli
from curation.rule_audit import read_violations, write_violations
from data import reference
from data.publish.release import ReleaseConfig, ReleaseWriter
from data.schemas import XCM_BENCH_CSV_COLUMNS
from data.text_safety import csv_cell, csv_safe_table
from flows.cli import app

AUTHORS = Path(reference.__file__).parent / "authors" / "xcm-bench.csv"
FORMULAS = ['=HYPERLINK("http://x","y")', "=cmd|' /C calc'!A0", "+1+1", "-2+3", "@SUM(A1)", "\tx", "\r=1"]


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flows.cli.console, "width", 1000)


def _authors_rows(limit: int = 400) -> list[dict[str, str]]:
    with AUTHORS.open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))[:limit]


def _write(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(XCM_BENCH_CSV_COLUMNS))
        writer.writeheader()
        writer.writerows(rows)
    return path


def _one_line(output: str, needle: str) -> str:
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if needle in line]
    assert len(lines) == 1, output
    return lines[0]


@pytest.mark.parametrize("formula", FORMULAS[:3])
@pytest.mark.parametrize("command", ["audit", "reassemble"])
def test_formula_concept_names_are_refused_naming_the_column(tmp_path: Path, command: str, formula: str) -> None:
    rows = _authors_rows()
    rows[3]["culturally_relevant_candidate_concept"] = formula
    source = _write(tmp_path / "formula.csv", rows)
    out = tmp_path / ("v.csv" if command == "audit" else "out")
    args = [command, str(source), "--out", str(out)] if command == "audit" else [command, "--pool", str(source)]
    result = CliRunner().invoke(app, args + (["--out", str(out)] if command == "reassemble" else []))
    assert result.exit_code == 2, result.output
    line = _one_line(result.output, "culturally_relevant_candidate_concept")
    assert "formula.csv" in line and "data row 3" in line
    assert not out.exists()


def test_markup_and_control_characters_in_concept_names_are_refused(tmp_path: Path) -> None:
    for name in ("<script>alert(1)</script>", "train\nschool", "[x](javascript:alert(1))"):
        rows = _authors_rows(50)
        rows[0]["query_concept"] = name
        result = CliRunner().invoke(app, ["audit", str(_write(tmp_path / "bad.csv", rows))])
        assert result.exit_code == 2, (name, result.output)
        _one_line(result.output, "query_concept")


def test_every_written_csv_cell_is_inert() -> None:
    for formula in FORMULAS:
        assert csv_cell(formula) == "'" + formula
    assert csv_cell("train") == "train" and csv_cell(-1) == -1 and csv_cell(None) is None
    table = pa.table({"detail": [*FORMULAS, "ok", None], "row": list(range(len(FORMULAS) + 2))})
    safe = csv_safe_table(table).to_pydict()
    assert safe["detail"] == ["'" + f for f in FORMULAS] + ["ok", None]
    assert safe["row"] == table["row"].to_pylist()


def test_the_release_csv_writer_neutralises_formulas_and_keeps_the_authors_bytes(tmp_path: Path) -> None:
    """The authors' file goes through our CSV writer byte for byte (no cell of it starts like a formula), while a
    formula cell is written inert."""
    from curation.rule_audit import read_benchmark_file

    authors = read_benchmark_file(AUTHORS)
    writer = ReleaseWriter(ReleaseConfig(root=str(tmp_path), version="0.0.1"), "csv-check")
    writer.write_csv("authors.csv", authors, XCM_BENCH_CSV_COLUMNS)
    staged = Path(writer.staging)
    assert (staged / "authors.csv").read_bytes() == AUTHORS.read_bytes()
    hostile = pa.table({"a": ["=1+1", "fine"], "b": ["@x", "-y"]})
    writer.write_csv("hostile.csv", hostile, ["a", "b"])
    written = list(csv.reader(io.StringIO((staged / "hostile.csv").read_text())))
    assert written == [["a", "b"], ["'=1+1", "'@x"], ["fine", "'-y"]]
    writer.abort()


def test_audit_violations_csv_is_inert_and_written_atomically(tmp_path: Path) -> None:
    from curation.rule_audit import VIOLATIONS

    row = {f.name: 0 if pa.types.is_integer(f.type) else "x" for f in VIOLATIONS}
    row |= {"rule": "distinct_candidates", "slot": "row", "image_id": None, "detail": "=cmd|' /C calc'!A0"}
    table = pa.Table.from_pylist([row], schema=VIOLATIONS)
    out = tmp_path / "out" / "v.csv"
    out.parent.mkdir()
    write_violations(table, out)
    assert ",\"'=cmd" in out.read_text()  # pyarrow quotes every string cell; this one starts with '
    assert read_violations(out)["detail"].to_pylist() == ["'=cmd|' /C calc'!A0"]
    assert sorted(p.name for p in out.parent.iterdir()) == ["v.csv"]  # no temporary file left


def test_audit_out_may_not_be_the_input_or_inside_a_release(tmp_path: Path) -> None:
    mine = tmp_path / "mine.csv"
    shutil.copy(AUTHORS, mine)
    before = mine.read_bytes()
    result = CliRunner().invoke(app, ["audit", str(mine), "--out", str(mine)])
    assert result.exit_code == 2
    assert "is the input" in _one_line(result.output, "--out")
    (tmp_path / "alias").symlink_to(tmp_path)
    result = CliRunner().invoke(app, ["audit", str(mine), "--out", str(tmp_path / "alias" / "mine.csv")])
    assert result.exit_code == 2, result.output
    assert mine.read_bytes() == before
    release = tmp_path / "releases" / "3xcm" / "0.0.1"
    release.mkdir(parents=True)
    (release / "manifest.json").write_text("{}")
    result = CliRunner().invoke(app, ["audit", str(mine), "--out", str(release / "benchmarks" / "v.csv")])
    assert result.exit_code == 2
    assert "immutable" in _one_line(result.output, "--out")
    assert sorted(p.name for p in release.iterdir()) == ["manifest.json"]


def test_reassemble_refuses_an_out_inside_its_pool(tmp_path: Path) -> None:
    pool = tmp_path / "pool"
    pool.mkdir()
    (pool / "benchmark").mkdir()
    result = CliRunner().invoke(app, ["reassemble", "--pool", str(pool), "--out", str(pool / "again")])
    assert result.exit_code == 2
    assert "inside the input" in _one_line(result.output, "--out")
    assert not (pool / "again").exists()


def test_an_image_under_two_indexes_is_one_line_naming_the_row(tmp_path: Path) -> None:
    rows = _authors_rows()
    prefix = "non_relevant_candidate_"
    seen = [row[f"{prefix}image_id"] for row in rows]
    r = max(i for i, image in enumerate(seen) if seen.index(image) < i)  # an image named in an earlier row too
    rows[r][f"{prefix}index"] = "999999"  # the same image id under a second index
    source = _write(tmp_path / "two.csv", rows)
    result = CliRunner().invoke(app, ["reassemble", "--pool", str(source), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    line = _one_line(result.output, "999999")
    assert "two.csv" in line and f"data row {r}" in line and seen[r] in line
    assert not (tmp_path / "out").exists()
    rows = _authors_rows()
    rows[7]["query_image_id"] = rows[8]["query_image_id"]  # two images named at one index... and the reverse
    result = CliRunner().invoke(
        app, ["reassemble", "--pool", str(_write(tmp_path / "swap.csv", rows)), "--out", str(tmp_path / "o2")]
    )
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
