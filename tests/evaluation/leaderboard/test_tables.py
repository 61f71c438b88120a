"""`evaluate compare`'s breakdowns and `--html`'s leaderboard page, on the demo results in evaluations/ (read only;
copied into tmp_path where a test alters them). Expected values are read from each result's metrics.json (or, for
the drop per country, recounted from swap_drops.parquet, a table the code does not read for it)."""

from __future__ import annotations

import json
import random
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from evaluation.leaderboard.page import INDEX, MARKER, PLOT, page_files
from evaluation.leaderboard.spec import OVERALL, Cell
from evaluation.leaderboard.tables import published_rows, read_results, tables
from evaluation.xcm.leaderboard import RETRIEVAL_BY_LANGUAGE
from evaluation.xcm.metrics import PAPER_SYMBOL
from flows.cli import app
from tests.support.paths import REPO_ROOT

XCM = REPO_ROOT / "evaluations" / "3xcm" / "0.1.0-demo" / "open_clip--demo-random-clip--demo-random-clip-seed0--all"
MIXCUBE = REPO_ROOT / "evaluations" / "mixcube" / "0.1.0-demo" / "transformers--demo-random-vlm"
AUDIT = (
    REPO_ROOT / "evaluations" / "mixcube" / "0.1.0-demo" / "open_clip--demo-random-clip--demo-random-clip-seed0--audit"
)
PACK = json.loads((REPO_ROOT / "data" / "reference" / "mixcube.json").read_text())
HOSTILE = '<script>alert("id")</script><img src=x onerror=alert(1)>'


def cli(*args: object) -> tuple[int, str]:
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.output


def metrics(folder: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((folder / "metrics.json").read_text())
    return document


def copy_result(source: Path, target: Path, **changes: Any) -> Path:
    """A copy of a result folder with top-level metrics.json fields replaced."""
    shutil.copytree(source, target)
    document = metrics(target) | changes
    (target / "metrics.json").write_text(json.dumps(document))
    return target


def by_key(results_tables: list[Any]) -> dict[str, Any]:
    return {t.key: t for t in results_tables}


# -- breakdowns ------------------------------------------------------------------------------------------------------
def test_3xcm_breakdowns_are_the_metrics_per_query_language() -> None:
    document = metrics(XCM)
    found = by_key(tables(read_results([XCM])))
    for task in ("rq2", "rq3"):
        report = document[task]
        groups = [(OVERALL, report["overall"]), *((g["group"], g) for g in report["by_language"])]
        assert len(groups) > 2
        for category, symbol in PAPER_SYMBOL[task].items():
            (row,) = found[f"{task}.M_{symbol}"].rows
            assert found[f"{task}.M_{symbol}"].columns == [name for name, _ in groups]
            for name, group in groups:
                rate = group["rates"][category]
                assert row.cells[name] == Cell(rate["value"], rate["ci_low"], rate["ci_high"])
    (sp,) = found["rq2.SP"].rows
    groups = [(OVERALL, document["rq2"]["overall"]), *((g["group"], g) for g in document["rq2"]["by_language"])]
    assert sp.cells == {name: Cell(g["sp"]["value"], g["sp"]["ci_low"], g["sp"]["ci_high"]) for name, g in groups}
    (rq3,) = [r for r in found["rq3"].rows if r.kind != "published"]
    overall = document["rq3"]["overall"]["rates"]
    assert {c: v.value for c, v in rq3.cells.items()} == {
        f"M_{s}": overall[c]["value"] for c, s in PAPER_SYMBOL["rq3"].items()
    }
    retrieval = document["retrieval"]
    for metric in RETRIEVAL_BY_LANGUAGE:
        (row,) = found[f"retrieval.{metric}"].rows
        expected = {OVERALL: retrieval["overall"]["metrics"][metric]["value"]}
        expected |= {lang: g["metrics"][metric]["value"] for lang, g in retrieval["by_language"].items()}
        assert {c: v.value for c, v in row.cells.items()} == expected


def rewrite(path: Path, rows: list[dict[str, Any]]) -> None:
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(path)), path)


def _mixcube_with_counts(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """The MixCuBe demo result (every answer wrong) with other counts: accuracy.parquet and swap_drops.parquet
    rewritten alike from made-up correct counts, and metrics.json's per-ethnicity accuracies from the same counts."""
    folder = tmp_path / "mixcube-counts"
    shutil.copytree(MIXCUBE, folder)
    accuracy = pq.read_table(folder / "accuracy.parquet").to_pylist()
    draw = random.Random(0)
    for row in accuracy:
        row["correct"] = draw.randint(0, row["answered"])
        row["accuracy"] = row["correct"] / row["answered"]
    pq.write_table(
        pa.Table.from_pylist(accuracy, schema=pq.read_schema(folder / "accuracy.parquet")), folder / "accuracy.parquet"
    )
    original = PACK["original_label"]
    cells = {(r["country"], r["category"], r["ethnicity"]): r for r in accuracy}
    drops = pq.read_table(folder / "swap_drops.parquet").to_pylist()
    for row in drops:
        o, s = (
            cells[(row["country"], row["category"], original)],
            cells[(row["country"], row["category"], row["ethnicity"])],
        )
        row.update(original_answered=o["answered"], swap_answered=s["answered"])
        row.update(original_accuracy=o["accuracy"], swap_accuracy=s["accuracy"], drop=o["accuracy"] - s["accuracy"])
    pq.write_table(
        pa.Table.from_pylist(drops, schema=pq.read_schema(folder / "swap_drops.parquet")), folder / "swap_drops.parquet"
    )
    document = metrics(folder)
    by_ethnicity: dict[str, list[int]] = {}
    for r in accuracy:
        tally = by_ethnicity.setdefault(r["ethnicity"], [0, 0])
        tally[0] += r["correct"]
        tally[1] += r["answered"]
    document["accuracy_by_ethnicity"] = {e: c / n for e, (c, n) in by_ethnicity.items()}
    (folder / "metrics.json").write_text(json.dumps(document))
    return folder, document


def test_mixcube_breakdowns_per_ethnicity_country_and_drop(tmp_path: Path) -> None:
    folder, document = _mixcube_with_counts(tmp_path)
    found = by_key(tables(read_results([folder])))
    original = PACK["original_label"]
    swaps = [e["label"] for e in PACK["ethnicities"]]

    def ours(key: str) -> dict[str, float | None]:
        (row,) = [r for r in found[key].rows if r.kind != "published"]
        return {c: v.value for c, v in row.cells.items()}

    for key in ("accuracy_by_ethnicity", "accuracy_by_country", "accuracy_by_category", "marker_accuracy_by_ethnicity"):
        assert ours(key) == document[key]
    assert ours("original_vs_synthesized") == {
        "original": document["accuracy_original"],
        "synthesized": document["accuracy_synthesized"],
        "drop": document["drop_original_minus_synthesized"],
    }
    base = document["accuracy_by_ethnicity"][original]
    assert ours("drop_by_ethnicity") == {e: base - document["accuracy_by_ethnicity"][e] for e in swaps}
    assert len(set(ours("drop_by_ethnicity").values())) > 1  # the made-up counts tell the ethnicities apart
    # Recounted from swap_drops.parquet: each country's originals once per category, every swap once.
    drops = pq.read_table(folder / "swap_drops.parquet").to_pylist()
    expected = {}
    for country in dict.fromkeys(r["country"] for r in drops):
        rows = [r for r in drops if r["country"] == country]
        originals = {r["category"]: (r["original_accuracy"], r["original_answered"]) for r in rows}
        o = sum(a * n for a, n in originals.values()) / sum(n for _, n in originals.values())
        s = sum(r["swap_accuracy"] * r["swap_answered"] for r in rows) / sum(r["swap_answered"] for r in rows)
        expected[country] = o - s
    assert ours("drop_by_country") == pytest.approx(expected)
    assert len(set(expected.values())) > 1


def test_compare_prints_the_breakdowns(tmp_path: Path) -> None:
    other = copy_result(XCM, tmp_path / "model-b", model={"model_id": "model-b"}, meaningless_demo_model=False)
    code, output = cli("evaluate", "compare", XCM, other)
    assert code == 0, output
    assert "M_cr" in output.splitlines()[0]  # the headline table comes first, as before
    document = metrics(XCM)
    languages = [g["group"] for g in document["rq2"]["by_language"]]
    header = "| model | " + " | ".join([OVERALL, *languages]) + " |"
    section = output.split("## RQ2 M_lb per query language")[1].split("## ")[0]
    assert header in section
    values = [document["rq2"]["overall"]["rates"]["language_biased"]["value"]]
    values += [g["rates"]["language_biased"]["value"] for g in document["rq2"]["by_language"]]
    assert f" @ 0.1.0-demo | {' | '.join(f'{v:.3f}' for v in values)} |" in section
    assert section.count("model-b @ 0.1.0-demo") == 1
    code, output = cli("evaluate", "compare", MIXCUBE)
    assert code == 0 and "## Drop from the originals to the swaps per country" in output, output
    for country in metrics(MIXCUBE)["accuracy_by_country"]:
        assert f" {country} |" in output.split("## Drop from the originals to the swaps per country")[1]


# -- published rows --------------------------------------------------------------------------------------------------
def test_published_rows_fill_our_columns_say_whose_they_are_and_stay_out_of_the_ranking() -> None:
    found = by_key(tables(read_results([XCM]), published=True))
    # The paper measured on its own data, not on this release: no published row is ranked among ours (issue 59).
    assert not any(r.kind == "published" for table in found.values() for r in table.rows)
    published = found["triplet"].elsewhere
    assert [r.label for r in published] == [p.model for p in published_rows("3xcm") if p.table == "triplet"]
    assert all(r.kind == "published" for r in published)
    assert all(set(r.cells) == {"M_cr", "M_lb", "M_ti", "SP"} and "Table 2" in r.source for r in published)
    assert {r.label for r in found["rq3"].elsewhere} == {r.label for r in published}
    assert not found["rq2.M_cr"].elsewhere  # the paper gives no such breakdown here
    mixcube = by_key(tables(read_results([MIXCUBE]), published=True))
    by_country = mixcube["accuracy_by_country"].elsewhere
    assert len(by_country) == 3 and all(None not in [c.value for c in r.cells.values()] for r in by_country)
    questions = mixcube["questions"].elsewhere
    assert all(r.cells["accuracy_with_our_aliases"].value is None for r in questions)  # ours: never published


def test_published_rows_measured_on_the_release_are_ranked_there(monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from evaluation.leaderboard import published_baselines

    sha = read_results([XCM])[0].release[2]
    measured_here = [dataclasses.replace(p, measured_on=sha) for p in published_baselines.xcm_rows()]
    monkeypatch.setattr(published_baselines, "xcm_rows", lambda: measured_here)
    found = by_key(tables(read_results([XCM]), published=True))
    ranked = [r.label for r in found["triplet"].rows if r.kind == "published"]
    assert ranked == [p.model for p in measured_here if p.table == "triplet"] and not found["triplet"].elsewhere
    elsewhere = [dataclasses.replace(p, measured_on="0" * 64) for p in measured_here]
    monkeypatch.setattr(published_baselines, "xcm_rows", lambda: elsewhere)
    found = by_key(tables(read_results([XCM]), published=True))
    assert not any(r.kind == "published" for r in found["triplet"].rows) and found["triplet"].elsewhere


# -- the page --------------------------------------------------------------------------------------------------------
class _Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def test_hostile_text_is_escaped_in_the_page_and_the_terminal(tmp_path: Path) -> None:
    document = metrics(XCM)
    document["rq2"]["by_language"][0]["group"] = HOSTILE
    hostile = copy_result(
        XCM,
        tmp_path / "hostile",
        model={"model_id": HOSTILE, "name": f"</code>{HOSTILE}", "backend": "x\u202eevil"},
        rq2=document["rq2"],
        meaningless_demo_model=False,
    )
    code, output = cli("evaluate", "compare", XCM, hostile, "--html", tmp_path / "page")
    assert code == 0, output
    # the breakdowns (the headline table before them is evaluation/results/folder.py's)
    breakdowns = output[output.index("\n## ") :]
    assert "<script>" not in breakdowns and "&lt;script&gt;" in breakdowns
    page = (tmp_path / "page" / INDEX).read_text()
    assert "<script>alert" not in page and "<img src=x" not in page and "\u202e" not in page
    assert html_escaped(HOSTILE) in page
    parsed = _Elements()
    parsed.feed(page)
    assert [tag for tag, _ in parsed.tags].count("script") == 1  # ours
    assert not [a for _, attrs in parsed.tags for a in attrs if a.startswith("on")]
    sources = [attrs.get("src") or "" for tag, attrs in parsed.tags if tag == "img"]
    assert all(src.startswith("results/") or src == PLOT for src in sources) and PLOT in sources


def html_escaped(text: str) -> str:
    import html

    return html.escape(text, quote=True)


def test_page_holds_every_row_card_and_figure_and_is_deterministic(tmp_path: Path) -> None:
    other = copy_result(XCM, tmp_path / "model-b", model={"model_id": "model-b"}, meaningless_demo_model=False)
    code, output = cli("evaluate", "compare", other, XCM, "--html", tmp_path / "one")
    assert code == 0, output
    code, output = cli("evaluate", "compare", other, XCM, "--html", tmp_path / "two")
    assert code == 0, output
    one = {p.relative_to(tmp_path / "one"): p.read_bytes() for p in (tmp_path / "one").rglob("*") if p.is_file()}
    two = {p.relative_to(tmp_path / "two"): p.read_bytes() for p in (tmp_path / "two").rglob("*") if p.is_file()}
    assert one == two
    figures = sorted(p.relative_to(XCM).as_posix() for p in XCM.rglob("*.png"))
    assert figures
    for slug, source in (("results/01-model-b", other), ("results/02-" + XCM.name, XCM)):
        assert one[Path(slug) / "README.md"] == (source / "README.md").read_bytes()
        for figure in figures:
            assert one[Path(slug) / figure] == (source / figure).read_bytes()
    page = one[Path(INDEX)].decode()
    assert metrics(XCM)["release"]["manifest_sha256"] in page
    assert set(json.loads(one[Path(MARKER)])["files"]) == {p.as_posix() for p in one} - {MARKER}
    for p in published_rows("3xcm"):
        assert html_escaped(p.model) in page
    # a page written before is replaced (here by one with a row fewer), unless something else was put into it
    code, output = cli("evaluate", "compare", XCM, "--html", tmp_path / "one")
    assert code == 0, output
    assert not (tmp_path / "one" / "results" / f"02-{XCM.name}").exists()
    assert "model-b" not in (tmp_path / "one" / INDEX).read_text()
    (tmp_path / "one" / "results" / "notes.txt").write_text("mine")
    code, output = cli("evaluate", "compare", XCM, "--html", tmp_path / "one")
    assert code == 2 and "results/notes.txt" in output, output
    assert (tmp_path / "one" / "results" / "notes.txt").read_text() == "mine"


def test_one_release_per_page_but_the_demo_model_may_come_from_another(tmp_path: Path) -> None:
    release = metrics(XCM)["release"]
    a = copy_result(XCM, tmp_path / "a", model={"model_id": "a"}, meaningless_demo_model=False)
    b = copy_result(
        XCM, tmp_path / "b", model={"model_id": "b"}, meaningless_demo_model=False,
        release={**release, "version": "0.2.0", "manifest_sha256": "cd" * 32},
    )  # fmt: skip
    code, output = cli("evaluate", "compare", a, b, "--html", tmp_path / "page")
    assert code == 2 and not (tmp_path / "page").exists(), output
    line = [line for line in output.splitlines() if "one release per page" in line]
    assert len(line) == 1 and "0.1.0-demo" in line[0] and "0.2.0" in line[0]
    # the random demo model (0.1.0-demo) beside a real model's 0.2.0 result: a reference row, named
    code, output = cli("evaluate", "compare", b, XCM, "--html", tmp_path / "page")
    assert code == 0, output
    page = (tmp_path / "page" / INDEX).read_text()
    assert "0.2.0 leaderboard" in page and "meaningless, release 0.1.0-demo" in page and "cd" * 32 in page
    code, output = cli("evaluate", "compare", XCM, MIXCUBE, "--html", tmp_path / "mixed")
    assert code == 2 and "different benchmarks" in output and not (tmp_path / "mixed").exists(), output


@pytest.mark.parametrize("where", ["input", "inside-input", "inside-release", "file", "foreign", "holds-input"])
def test_html_dir_refusals(tmp_path: Path, where: str) -> None:
    a = copy_result(XCM, tmp_path / "results" / "a", model={"model_id": "a"})
    (tmp_path / "file").write_text("keep")
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("keep")
    out = {
        "input": a,
        "inside-input": a / "page",
        "inside-release": REPO_ROOT / "releases" / "3xcm" / "0.1.0-demo" / "page",
        "file": tmp_path / "file",
        "foreign": tmp_path / "foreign",
        "holds-input": tmp_path / "results",
    }[where]
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    code, output = cli("evaluate", "compare", a, "--html", out)
    assert code == 2, output
    assert len([line for line in output.splitlines() if "--html" in line]) == 1, output
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    assert not (REPO_ROOT / "releases" / "3xcm" / "0.1.0-demo" / "page").exists()


@pytest.mark.parametrize("plant", ["link", "not-png", "odd-name"])
def test_a_figure_that_is_not_ours_is_one_line(tmp_path: Path, plant: str) -> None:
    a = copy_result(XCM, tmp_path / "a", model={"model_id": "a"})
    figure = a / "figures" / "win_rates_rq2.png"
    if plant == "link":
        figure.unlink()
        figure.symlink_to("/etc/passwd")
    elif plant == "not-png":
        figure.write_text("<html>not a png</html>")
    else:
        shutil.copy(XCM / "figures" / "win_rates_rq2.png", a / "figures" / "a b<c>.png")
    code, output = cli("evaluate", "compare", a, "--html", tmp_path / "page")
    assert code == 2 and not (tmp_path / "page").exists(), output
    assert len([line for line in output.splitlines() if "cannot compare" in line and "figure" in line]) == 1, output


def test_a_breakdown_field_of_the_wrong_type_is_named(tmp_path: Path) -> None:
    document = metrics(XCM)
    document["rq2"]["by_language"][1]["rates"]["correct"]["value"] = "0.9"
    a = copy_result(XCM, tmp_path / "a", rq2=document["rq2"])
    code, output = cli("evaluate", "compare", a)
    assert code == 2, output
    line = [line for line in output.splitlines() if "rq2.by_language[1].rates.correct.value" in line]
    assert len(line) == 1 and str(a / "metrics.json") in line[0], output


def test_page_files_of_the_audit_result_show_its_headline() -> None:
    files = page_files(read_results([AUDIT]))
    page = files[INDEX].decode()
    skews = metrics(AUDIT)["max_skew"]
    for name, value in skews.items():
        assert f"max_skew.{name}" in page and f'data-sort="{value!r}"' in page
    assert any(re.fullmatch(r"results/01-[^/]+/audit/figures/[^/]+\.png", f) for f in files)
