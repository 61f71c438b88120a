"""The README's demo tables are `make demo`'s own output (issue 40):
`python -m evaluation.leaderboard.demo_tables --check`,
the command docs/contributors.md gives, passes on the repository after `make demo`, and fails, naming the table,
when a number, a row or a marker of a table is off."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from evaluation.leaderboard import demo_tables
from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT
CHECK = ".venv/bin/python -m evaluation.leaderboard.demo_tables --check"


def _run(command: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(command)
    argv[0] = sys.executable if argv[0] == ".venv/bin/python" and not (cwd / argv[0]).exists() else argv[0]
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_the_documented_check_passes_on_the_demo_output() -> None:
    assert CHECK in (ROOT / "docs" / "contributors.md").read_text(encoding="utf-8")
    result = _run(CHECK)
    assert result.returncode == 0, result.stderr


def _bump_first_number(table: str) -> str:
    """The first number of the table's first data row, one unit of its last digit plus one higher."""
    lines = table.splitlines()
    match = re.search(r"\d+\.(\d+)", lines[2])
    assert match, lines[2]
    digits = len(match.group(1))
    bumped = f"{float(match.group(0)) + 2 * 10.0**-digits:.{digits}f}"
    lines[2] = lines[2][: match.start()] + bumped + lines[2][match.end() :]
    return "\n".join(lines)


def _marked(tables: dict[str, str]) -> str:
    return "".join(f"<!-- demo-table: {n} -->\n{t}<!-- /demo-table -->\n\n" for n, t in tables.items())


@pytest.mark.parametrize("name", list(demo_tables.TABLES))
def test_a_changed_number_fails_the_check_naming_its_table(
    tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    tables = demo_tables.render(ROOT / "evaluations")
    document = demo_tables.document_of(name)  # README.md, or the docs page the table is on
    own = {n: tables[n] for n in demo_tables.DOCUMENTS[document]}
    text = _marked(own)
    assert demo_tables.differences(text, own, document) == []
    stale = text.replace(tables[name], _bump_first_number(tables[name]) + "\n")
    problems = demo_tables.differences(stale, own, document)
    assert len(problems) == 1 and repr(name) in problems[0] and problems[0].startswith(document), problems
    # the command checks every document beside the README, and --write puts the demo's numbers back, only inside
    # the markers
    readme = tmp_path / "README.md"
    readme.write_text(_marked({n: tables[n] for n in demo_tables.DOCUMENTS["README.md"]}), encoding="utf-8")
    path = tmp_path / document
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# Title\n\ntext kept\n\n" + stale, encoding="utf-8")
    results = ["--results", str(ROOT / "evaluations")]
    assert demo_tables.main(["--check", "--readme", str(readme), *results]) == 1
    assert capsys.readouterr().err.startswith(f"{document}: demo table {name!r} differs")
    assert demo_tables.main(["--write", "--readme", str(readme), *results]) == 0
    written = path.read_text(encoding="utf-8")
    assert written.startswith("# Title\n\ntext kept\n\n")
    assert demo_tables.differences(written, own, document) == []
    assert demo_tables.main(["--check", "--readme", str(readme), *results]) == 0


def test_a_missing_marker_or_row_fails(tmp_path: Path) -> None:
    tables = demo_tables.render(ROOT / "evaluations")
    first, *rest = tables
    readme = "".join(f"<!-- demo-table: {n} -->\n{tables[n]}<!-- /demo-table -->\n" for n in rest)
    assert any(repr(first) in p for p in demo_tables.differences(readme, tables))
    short = {n: "\n".join(t.splitlines()[:-1]) + "\n" for n, t in tables.items()}
    readme = "".join(f"<!-- demo-table: {n} -->\n{short[n]}<!-- /demo-table -->\n" for n in tables)
    assert len(demo_tables.differences(readme, tables)) == len(tables)


def test_a_cell_within_one_unit_of_rounding_passes_and_other_text_does_not() -> None:
    # 0.194 against 0.195: one unit of the third decimal, another CPU's rounding; 0.197 is three units off
    assert demo_tables._same_cell("0.194 [0.144, 0.250]", "0.195 [0.144, 0.249]")
    assert not demo_tables._same_cell("0.194 [0.144, 0.250]", "0.197 [0.144, 0.250]")
    assert not demo_tables._same_cell("all (36 queries)", "all (35 queries)")
    assert not demo_tables._same_cell("en", "es")


def test_without_results_it_says_to_run_make_demo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert demo_tables.main(["--check", "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "make demo" in err and "\n" not in err.strip()


@pytest.mark.slow
def test_the_documented_write_rewrites_a_stale_readme(tmp_path: Path) -> None:
    write = ".venv/bin/python -m evaluation.leaderboard.demo_tables --write"
    assert write in (ROOT / "docs" / "contributors.md").read_text(encoding="utf-8")
    rendered = demo_tables.render(ROOT / "evaluations")
    tables = {n: rendered[n] for n in demo_tables.DOCUMENTS["README.md"]}  # a folder with the README alone
    name = next(iter(tables))
    (tmp_path / "evaluations").symlink_to(ROOT / "evaluations")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (tmp_path / "README.md").write_text(readme.replace(tables[name], _bump_first_number(tables[name]) + "\n"))
    assert demo_tables.differences((tmp_path / "README.md").read_text(), tables)  # stale before
    result = _run(write, cwd=tmp_path)  # exactly as written, from a folder holding README.md and evaluations/
    assert result.returncode == 0, result.stderr
    assert demo_tables.differences((tmp_path / "README.md").read_text(), tables) == []
