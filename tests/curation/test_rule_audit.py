"""`culturebench audit`: every file-only rule on synthetic benchmarks (each broken once, exactly that rule fires), the
image-level rules against an image_metadata table, the CLI's exit codes and --out, a release the project built, and
the authors' vendored xcm-bench.csv checked against a plain per-row restatement of the rules."""

from __future__ import annotations

import copy
import csv
import random
import re
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import flows.cli
from curation.rule_audit import (
    DEFAULT_MAX_REUSE,
    RULES,
    VIOLATIONS,
    AuditInputError,
    audit_benchmark,
    audit_path,
    load_input,
    read_violations,
)
from data import reference
from data.reference import default_pack
from data.schemas import BENCHMARK, XCM_BENCH_CSV_COLUMNS
from flows.cli import app
from flows.xcm.build import build_locally

AUTHORS_FILE = Path(reference.__file__).parent / "authors" / "xcm-bench.csv"
SLOTS = (
    ("query", "query_"),
    ("correct", "semantically_relevant_candidate_"),
    ("language_biased", "culturally_relevant_candidate_"),
    ("irrelevant", "non_relevant_candidate_"),
)
Row = dict[str, object]
Found = set[tuple[str, int, str]]  # (rule, row, slot)


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's error messages are one line; an 80-column terminal would wrap the table and them."""
    monkeypatch.setattr(flows.cli.console, "width", 1000)


# -- a small clean benchmark ------------------------------------------------------------------------------------

COUNTRIES = ["USA", "UK", "Spain", "Argentina", "Japan", "Kenya"]  # groups en, en, es, es, ja, sw
CONCEPTS = ["train", "food", "school"]  # concept ids 0, 1, 2 in the image ids
# Two bijections onto countries outside each country's language group: every image is a correct candidate once
# and an irrelevant one once (and a language-biased one once), so each is used 3 times.
CORRECT_FROM = {
    "USA": "Spain",
    "UK": "Japan",
    "Spain": "Kenya",
    "Argentina": "USA",
    "Japan": "Argentina",
    "Kenya": "UK",
}
IRRELEVANT_FROM = {
    "USA": "Japan",
    "UK": "Kenya",
    "Spain": "USA",
    "Argentina": "UK",
    "Japan": "Spain",
    "Kenya": "Argentina",
}


def image_id(country: str, concept: int, rank: int = 1) -> str:
    return f"{country.lower()}-{concept}-{rank}-eng"


IMAGES = [(country, concept) for country in COUNTRIES for concept in range(len(CONCEPTS))]
INDEX = {image_id(country, concept): i for i, (country, concept) in enumerate(IMAGES)}


def cell(prefix: str, image: str, concept: str, country: str, index: int | None = None) -> Row:
    return {
        f"{prefix}index": INDEX[image] if index is None else index,
        f"{prefix}image_id": image,
        f"{prefix}concept": concept,
        f"{prefix}country": country,
    }


def image_cell(prefix: str, country: str, concept: int) -> Row:
    return cell(prefix, image_id(country, concept), CONCEPTS[concept], country)


def clean_rows() -> list[Row]:
    """One query per image: 18 rows, every rule kept, each image a candidate 3 times."""
    rows = []
    for country, concept in IMAGES:
        row: Row = {}
        row |= image_cell("query_", country, concept)
        row |= image_cell("semantically_relevant_candidate_", CORRECT_FROM[country], concept)
        row |= image_cell("culturally_relevant_candidate_", country, (concept + 1) % 3)
        row |= image_cell("non_relevant_candidate_", IRRELEVANT_FROM[country], (concept + 2) % 3)
        rows.append(row)
    return rows


def row_of(rows: list[Row], query: str) -> int:
    return next(r for r, row in enumerate(rows) if row["query_image_id"] == query)


USA_TRAIN = 0  # row of the query usa-0-1-eng: correct spain-0-1-eng, biased usa-1-1-eng, irrelevant japan-2-1-eng


def with_extras(rows: list[Row]) -> list[Row]:
    """Our release's extra query columns: the concept id, the query country's language, a text per both."""
    by_name = default_pack().country_by_name()
    out = []
    for row in rows:
        language = by_name[str(row["query_country"])].language_code
        concept_id = int(str(row["query_image_id"]).split("-")[1])
        text = f"{row['query_concept']}@{language}"
        out.append(row | {"query_concept_id": concept_id, "query_language": language, "query_text": text})
    return out


def metadata(rows: list[Row]) -> list[Row]:
    """image_metadata for every image the rows name, tagged with its own concept, with unique hashes."""
    images: dict[int, Row] = {}
    for row in rows:
        for _, prefix in SLOTS:
            image = str(row[f"{prefix}image_id"])
            images[int(str(row[f"{prefix}index"]))] = {
                "index_in_dataset": row[f"{prefix}index"],
                "image_id": image,
                "concept_id": int(image.split("-")[1]),
                "concept": row[f"{prefix}concept"],
                "country": row[f"{prefix}country"],
                "tags": [int(image.split("-")[1])],
                "sha256": f"bytes-of-{image}",
                "pixel_sha256": f"pixels-of-{image}",
            }
    return [images[i] for i in sorted(images)]


METADATA_SCHEMA = pa.schema(
    [
        pa.field("index_in_dataset", pa.int32()),
        pa.field("image_id", pa.string()),
        pa.field("concept_id", pa.int32()),
        pa.field("concept", pa.string()),
        pa.field("country", pa.string()),
        pa.field("tags", pa.list_(pa.int32())),
        pa.field("sha256", pa.string()),
        pa.field("pixel_sha256", pa.string()),
    ]
)


def table_of(rows: list[Row]) -> pa.Table:
    names = list(BENCHMARK.names) if "query_text" in rows[0] else list(XCM_BENCH_CSV_COLUMNS)
    return pa.Table.from_pylist(rows, schema=pa.schema([BENCHMARK.field(n) for n in names]))


def write_csv(rows: list[Row], path: Path) -> Path:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(XCM_BENCH_CSV_COLUMNS), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return path


def meta_table(meta: list[Row]) -> pa.Table:
    return pa.Table.from_pylist(meta, schema=METADATA_SCHEMA)


def found(rows: list[Row], meta: list[Row] | None = None, max_reuse: int = DEFAULT_MAX_REUSE) -> Found:
    audit = audit_benchmark(
        table_of(rows), meta_table(meta) if meta is not None else None, max_reuse, pack=default_pack()
    )
    violations = audit.violations.to_pylist()
    assert audit.report.violations == len(violations)
    return {(v["rule"], v["row"], v["slot"]) for v in violations}


def test_the_clean_benchmark_has_no_violations() -> None:
    rows = clean_rows()
    assert found(rows) == set()
    audit = audit_benchmark(table_of(with_extras(rows)), meta_table(metadata(rows)), pack=default_pack())
    assert audit.report.ok and audit.violations.num_rows == 0 and audit.violations.schema == VIOLATIONS
    assert set(audit.report.counts()) == set(RULES)  # every rule ran, metadata and query columns included
    assert audit.report.reuse.maximum == 3 and audit.report.reuse.distribution == {3: 18}


# -- each rule, broken once -------------------------------------------------------------------------------------


def set_cell(rows: list[Row], r: int, prefix: str, image: str, concept: str, country: str, index: int) -> None:
    rows[r] |= cell(prefix, image, concept, country, index)


def rename_everywhere(rows: list[Row], old: str, new: str) -> None:
    for row in rows:
        for _, prefix in SLOTS:
            if row[f"{prefix}image_id"] == old:
                row[f"{prefix}image_id"] = new


def first_cell(rows: list[Row], image: str) -> tuple[int, str]:
    return next((r, slot) for r, row in enumerate(rows) for slot, p in SLOTS if row[f"{p}image_id"] == image)


def extra_row(rows: list[Row], query: Row) -> int:
    """A new row, a copy of the usa-0-1-eng row with another query; returns its number."""
    rows.append(rows[USA_TRAIN] | query)
    return len(rows) - 1


def break_correct_group(rows: list[Row]) -> Found:
    set_cell(rows, USA_TRAIN, "semantically_relevant_candidate_", "uk-0-1-eng", "train", "UK", INDEX["uk-0-1-eng"])
    return {("correct_outside_query_group", USA_TRAIN, "correct")}


def break_irrelevant_group(rows: list[Row]) -> Found:
    set_cell(rows, USA_TRAIN, "non_relevant_candidate_", "uk-2-1-eng", "school", "UK", INDEX["uk-2-1-eng"])
    return {("irrelevant_outside_query_group", USA_TRAIN, "irrelevant")}


def break_biased_country(rows: list[Row]) -> Found:
    set_cell(rows, USA_TRAIN, "culturally_relevant_candidate_", "uk-1-1-eng", "food", "UK", INDEX["uk-1-1-eng"])
    return {("language_biased_query_country", USA_TRAIN, "language_biased")}


def break_correct_concept(rows: list[Row]) -> Found:
    set_cell(
        rows, USA_TRAIN, "semantically_relevant_candidate_", "spain-1-1-eng", "food", "Spain", INDEX["spain-1-1-eng"]
    )
    return {("correct_query_concept", USA_TRAIN, "correct")}


def break_biased_concept(rows: list[Row]) -> Found:
    # Another USA train picture (used once): the query's country, and the query's concept.
    set_cell(rows, USA_TRAIN, "culturally_relevant_candidate_", "usa-0-2-eng", "train", "USA", 100)
    return {("language_biased_other_concept", USA_TRAIN, "language_biased")}


def break_irrelevant_concept(rows: list[Row]) -> Found:
    set_cell(rows, USA_TRAIN, "non_relevant_candidate_", "japan-0-1-eng", "train", "Japan", INDEX["japan-0-1-eng"])
    return {("irrelevant_other_concept", USA_TRAIN, "irrelevant")}


def break_distinct(rows: list[Row]) -> Found:
    # The slot rules are disjoint, so two equal slots always break one of them too: here the biased one's concept.
    set_cell(rows, USA_TRAIN, "culturally_relevant_candidate_", "usa-0-1-eng", "train", "USA", INDEX["usa-0-1-eng"])
    return {("distinct_images", USA_TRAIN, "row"), ("language_biased_other_concept", USA_TRAIN, "language_biased")}


def break_one_query(rows: list[Row]) -> Found:
    rows.append(dict(rows[5]))
    return {("one_query_per_image", 18, "query")}


def break_index_one_id(rows: list[Row]) -> Found:
    # A new, well-formed id under an existing index (its own index is consistent: one direction only).
    rows[USA_TRAIN]["non_relevant_candidate_image_id"] = "japan-2-7-eng"
    return {("index_one_image_id", USA_TRAIN, "irrelevant")}


def break_id_one_index(rows: list[Row]) -> Found:
    rows[USA_TRAIN]["non_relevant_candidate_index"] = 999  # an index no other image has
    return {("image_id_one_index", USA_TRAIN, "irrelevant")}


def break_index_swap(rows: list[Row]) -> Found:
    # Another image's index: both directions break, at the same cell.
    rows[USA_TRAIN]["non_relevant_candidate_index"] = INDEX["kenya-2-1-eng"]
    return {("index_one_image_id", USA_TRAIN, "irrelevant"), ("image_id_one_index", USA_TRAIN, "irrelevant")}


def break_image_concept(rows: list[Row]) -> Found:
    rows[USA_TRAIN]["non_relevant_candidate_concept"] = "food"  # japan-2-1-eng is school in its other 3 cells
    return {("image_one_concept", USA_TRAIN, "irrelevant")}


def break_image_country(rows: list[Row]) -> Found:
    rows[USA_TRAIN]["non_relevant_candidate_country"] = "Kenya"  # still outside the query's group
    return {("image_one_country", USA_TRAIN, "irrelevant")}


def break_id_scheme(rows: list[Row]) -> Found:
    rename_everywhere(rows, "japan-2-1-eng", "japan_school_1")
    return {("image_id_scheme", *first_cell(rows, "japan_school_1"))}


def break_id_country(rows: list[Row]) -> Found:
    rename_everywhere(rows, "usa-1-1-eng", "uk-1-9-eng")  # the country columns still say USA
    return {("image_id_country", *first_cell(rows, "uk-1-9-eng"))}


def break_id_country_alias(rows: list[Row]) -> Found:
    rename_everywhere(rows, "usa-1-1-eng", "america-1-1-eng")  # as the authors' file names 36 USA images
    return {("image_id_country_alias", *first_cell(rows, "america-1-1-eng"))}


def break_concept_id_name(rows: list[Row]) -> Found:
    rename_everywhere(rows, "japan-2-1-eng", "japan-1-9-eng")  # a school picture under food's concept id
    return {("concept_id_one_name", *first_cell(rows, "japan-1-9-eng"))}


def break_known_country(rows: list[Row]) -> Found:
    r = extra_row(rows, cell("query_", "usa-0-3-eng", "train", "USA", 101))
    set_cell(rows, r, "semantically_relevant_candidate_", "atlantis-0-1-eng", "train", "Atlantis", 102)
    return {("known_country", r, "correct")}


def break_reuse(rows: list[Row]) -> Found:
    # The candidates of usa-0-1-eng's row serve a second USA train query: 4 uses each, over a cap of 3.
    r = extra_row(rows, cell("query_", "usa-0-3-eng", "train", "USA", 101))
    return {("max_candidate_reuse", r, slot) for slot in ("correct", "language_biased", "irrelevant")}


BREAKS: dict[str, Callable[[list[Row]], Found]] = {
    "correct_outside_query_group": break_correct_group,
    "irrelevant_outside_query_group": break_irrelevant_group,
    "language_biased_query_country": break_biased_country,
    "correct_query_concept": break_correct_concept,
    "language_biased_other_concept": break_biased_concept,
    "irrelevant_other_concept": break_irrelevant_concept,
    "distinct_images": break_distinct,
    "one_query_per_image": break_one_query,
    "index_one_image_id": break_index_one_id,
    "image_id_one_index": break_id_one_index,
    "index_swap": break_index_swap,
    "image_one_concept": break_image_concept,
    "image_one_country": break_image_country,
    "image_id_scheme": break_id_scheme,
    "image_id_country": break_id_country,
    "image_id_country_alias": break_id_country_alias,
    "concept_id_one_name": break_concept_id_name,
    "known_country": break_known_country,
    "max_candidate_reuse": break_reuse,
}


@pytest.mark.parametrize("case", sorted(BREAKS))
def test_each_file_rule_broken_once(case: str) -> None:
    rows = clean_rows()
    expected = BREAKS[case](rows)
    max_reuse = 3 if case == "max_candidate_reuse" else DEFAULT_MAX_REUSE
    assert found(rows, max_reuse=max_reuse) == expected
    assert plain_audit(rows, max_reuse)[0] == expected  # the restatement the authors' file is checked with agrees
    if case == "max_candidate_reuse":
        assert found(rows) == set()  # 4 uses are within the default cap


def test_every_file_rule_has_a_break() -> None:
    file_rules = {
        r for r in RULES if not r.startswith(("metadata_", "query_")) and not r.endswith(("_untagged", "_copy"))
    }
    assert file_rules <= set(BREAKS)


def test_ids_in_another_scheme_are_one_violation_per_image() -> None:
    rows = clean_rows()
    for i, image in enumerate(INDEX):
        rename_everywhere(rows, image, f"picture{i}")
    assert found(rows) == {("image_id_scheme", *first_cell(rows, f"picture{i}")) for i in range(len(INDEX))}


@pytest.mark.parametrize(
    ("column", "value", "rule"),
    [
        ("query_concept_id", 1, "query_concept_id"),
        ("query_language", "fr", "query_language"),
        ("query_text", "another word", "query_text_one_per_concept_language"),
    ],
)
def test_our_query_columns(column: str, value: object, rule: str) -> None:
    rows = with_extras(clean_rows())
    r = row_of(rows, "uk-0-1-eng")  # the second English train query: the text's minority is this row
    rows[r][column] = value
    assert found(rows) == {(rule, r, "query")}


# -- image-level rules, against image_metadata ------------------------------------------------------------------


def test_metadata_tag_violation() -> None:
    rows = clean_rows()
    meta = metadata(rows)
    biased = next(m for m in meta if m["image_id"] == "usa-1-1-eng")  # the biased candidate of usa-0-1-eng
    biased["tags"] = [1, 0]  # a food picture that also shows a train
    # Where it is a distractor of another concept (an irrelevant one for a school query), it breaks nothing.
    assert found(rows, meta) == {("language_biased_untagged", USA_TRAIN, "language_biased")}


@pytest.mark.parametrize(("column", "rule"), [("sha256", "byte"), ("pixel_sha256", "pixel")])
def test_metadata_copy_violation(column: str, rule: str) -> None:
    rows = clean_rows()
    meta = metadata(rows)
    irrelevant = next(m for m in meta if m["image_id"] == "japan-2-1-eng")  # usa-0-1-eng's irrelevant candidate
    train = next(m for m in meta if m["image_id"] == "uk-0-1-eng")
    irrelevant[column] = train[column]  # the same picture as a train image, filed under school
    # A copy shows both concepts: the school picture is no "not train" distractor, and the train one (the biased
    # candidate of the UK school query) no "not school" distractor.
    assert found(rows, meta) == {
        (f"irrelevant_no_{rule}_copy", USA_TRAIN, "irrelevant"),
        (f"language_biased_no_{rule}_copy", row_of(rows, "uk-2-1-eng"), "language_biased"),
    }


def test_a_distractor_of_the_query_concept_is_left_to_the_concept_rule() -> None:
    """It is tagged with, and a copy of, an image of the query concept (itself): one violation, not three."""
    rows = clean_rows()
    expected = break_irrelevant_concept(rows)
    assert found(rows, metadata(rows)) == expected


def test_missing_pixel_hashes_are_never_copies() -> None:
    rows = clean_rows()
    meta = metadata(rows)
    for m in meta:
        m["pixel_sha256"] = None
    assert found(rows, meta) == set()


def test_metadata_must_agree_with_the_file() -> None:
    rows = clean_rows()
    r = extra_row(rows, cell("query_", "usa-0-3-eng", "train", "USA", 101))  # an image in one cell only
    meta = metadata(rows)
    fresh = next(m for m in meta if m["image_id"] == "usa-0-3-eng")
    for field, value, rule in (
        ("image_id", "usa-0-4-eng", "metadata_image_id"),
        ("concept", "food", "metadata_concept"),
        ("country", "UK", "metadata_country"),
        ("index_in_dataset", 555, "metadata_index"),
    ):
        changed = copy.deepcopy(meta)
        next(m for m in changed if m["image_id"] == fresh["image_id"])[field] = value
        assert found(rows, changed) == {(rule, r, "query")}, field


# -- the CLI ----------------------------------------------------------------------------------------------------


def run(*args: str | Path) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["audit", *map(str, args)])
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.output


def test_cli_exits_0_on_a_clean_file(tmp_path: Path) -> None:
    code, output = run(write_csv(clean_rows(), tmp_path / "clean.csv"))
    assert code == 0, output
    assert "no violations" in output and "correct_outside_query_group" in output


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_cli_writes_the_violations(tmp_path: Path, suffix: str) -> None:
    rows = clean_rows()
    expected = break_correct_group(rows) | break_id_country_alias(rows) | break_one_query(rows)
    source = tmp_path / "bench.parquet"
    pq.write_table(table_of(with_extras(rows)), source)  # int32 indexes and our extra columns, as a release has
    out = tmp_path / f"violations{suffix}"
    code, output = run(source, "--out", out)
    assert code == 1, output
    assert f"{len(expected)} violation(s)" in output
    table = read_violations(out)
    assert table.schema == VIOLATIONS
    assert {(v["rule"], v["row"], v["slot"]) for v in table.to_pylist()} == expected
    for violation in table.to_pylist():  # each carries its row's own columns and query image
        assert {c: violation[c] for c in XCM_BENCH_CSV_COLUMNS} == {
            c: rows[violation["row"]][c] for c in XCM_BENCH_CSV_COLUMNS
        }
        assert violation["detail"]
    alias = next(v for v in table.to_pylist() if v["rule"] == "image_id_country_alias")
    assert alias["image_id"] == "america-1-1-eng" and "america" in alias["detail"]


def test_cli_writes_an_empty_file_when_clean(tmp_path: Path) -> None:
    out = tmp_path / "none.csv"
    code, _ = run(write_csv(clean_rows(), tmp_path / "clean.csv"), "--out", out)
    assert code == 0
    assert read_violations(out).num_rows == 0 and read_violations(out).schema == VIOLATIONS


def test_cli_max_reuse(tmp_path: Path) -> None:
    source = write_csv(clean_rows(), tmp_path / "clean.csv")
    assert run(source, "--max-reuse", "3")[0] == 0
    code, _ = run(source, "--max-reuse", "2", "--out", tmp_path / "v.parquet")
    assert code == 1
    assert set(read_violations(tmp_path / "v.parquet")["rule"].to_pylist()) == {"max_candidate_reuse"}
    assert read_violations(tmp_path / "v.parquet").num_rows == 18  # each image once, at its third use


def test_cli_metadata_option(tmp_path: Path) -> None:
    rows = clean_rows()
    meta = metadata(rows)
    next(m for m in meta if m["image_id"] == "usa-1-1-eng")["tags"] = [1, 0]
    folder = tmp_path / "image_metadata"  # a folder of parts, as in a release
    folder.mkdir()
    pq.write_table(meta_table(meta[:9]), folder / "train-00000-of-00002.parquet")
    pq.write_table(meta_table(meta[9:]), folder / "train-00001-of-00002.parquet")
    source = write_csv(rows, tmp_path / "bench.csv")
    code, output = run(source, "--metadata", folder, "--out", tmp_path / "v.csv")
    assert code == 1, output
    assert read_violations(tmp_path / "v.csv")["rule"].to_pylist() == ["language_biased_untagged"]
    code, output = run(source)
    assert code == 0 and "were not checked" in output


def _error_line(output: str, needle: str) -> str:
    lines = [line for line in output.splitlines() if needle in line]
    assert len(lines) == 1, output
    return lines[0]


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    good = write_csv(clean_rows(), tmp_path / "good.csv")
    missing_column = tmp_path / "short.csv"
    missing_column.write_text(good.read_text().replace("query_country", "country_of_query", 1))
    not_integer = tmp_path / "letters.csv"
    lines = good.read_text().splitlines()
    lines[3] = "x" + lines[3]
    not_integer.write_text("\n".join(lines))
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"\x00not parquet at all")
    empty_cell = tmp_path / "empty.csv"
    empty_cell.write_text(good.read_text().replace(",usa-1-1-eng,", ",,", 1))
    cases: list[tuple[tuple[str | Path, ...], Path, str]] = [  # (arguments, the path named, the complaint)
        ((tmp_path / "nope.csv",), tmp_path / "nope.csv", "no such file or folder"),
        ((missing_column,), missing_column, "missing columns ['query_country']"),
        ((not_integer,), not_integer, "not a readable 3XCM benchmark"),
        ((garbage,), garbage, "not a readable 3XCM benchmark"),
        (
            (empty_cell,),
            empty_cell,
            "column culturally_relevant_candidate_image_id has 1 empty value(s), the first in data row 0",
        ),
        ((tmp_path,), tmp_path, "not a 3XCM release folder"),
        ((good, "--out", tmp_path / "v.json"), tmp_path / "v.json", "--out must end in .csv or .parquet"),
        ((good, "--out", good / "v.csv"), good / "v.csv", "cannot write the violations"),  # a folder that is a file
        ((good, "--metadata", tmp_path / "no.parquet"), tmp_path / "no.parquet", "no such file or folder"),
        ((good, "--metadata", good), good, "not a readable Parquet file"),
    ]
    for args, named, needle in cases:
        code, output = run(*args)
        assert code == 2, (args, output)
        assert str(named) in _error_line(output, needle)


def test_metadata_with_repeated_indexes_is_bad_input(tmp_path: Path) -> None:
    meta = metadata(clean_rows())
    meta[1]["index_in_dataset"] = meta[0]["index_in_dataset"]
    pq.write_table(meta_table(meta), tmp_path / "meta.parquet")
    with pytest.raises(AuditInputError, match="repeated index_in_dataset"):
        load_input(write_csv(clean_rows(), tmp_path / "b.csv"), tmp_path / "meta.parquet")
    with pytest.raises(AuditInputError, match="repeated index_in_dataset"):
        audit_benchmark(table_of(clean_rows()), meta_table(meta), pack=default_pack())


# -- a release the project built --------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_release_built_by_the_project_audits_clean(small_demo_config) -> None:
    release = Path(build_locally(small_demo_config).release_path)
    code, output = run(release)
    assert code == 0, output
    assert "irrelevant_no_byte_copy" in output  # its own image_metadata was used
    audit = audit_path(release)
    assert audit.report.metadata == str(release / "image_metadata")
    assert set(audit.report.counts()) == set(RULES)
    assert audit.report.reuse.maximum <= DEFAULT_MAX_REUSE
    code, output = run(release / "benchmarks" / "xcm-bench.csv", "--metadata", release / "image_metadata")
    assert code == 0, output


# -- the authors' file, against a plain restatement of the rules ------------------------------------------------

ID = re.compile(r"([^-]+)-([0-9]{1,9})-([0-9]{1,9})-(eng|nav)")


def plain_audit(rows: list[Row], max_reuse: int = DEFAULT_MAX_REUSE) -> tuple[Found, Counter[str]]:
    """The file-only rules, row by row in plain Python: (rule, row, slot) of each violation, and candidate uses.
    A key with two values takes the one most cells give, ties to the first seen (Counter keeps insertion order)."""
    groups = {c.name: c.language_group for c in default_pack().countries}
    out: Found = set()
    cells = []  # (row, slot, index, image id, concept, country), in file order
    for r, row in enumerate(rows):
        c = {slot: (int(row[f"{p}index"]), row[f"{p}image_id"], row[f"{p}concept"], row[f"{p}country"])  # type: ignore[call-overload]
             for slot, p in SLOTS}  # fmt: skip
        for slot, _ in SLOTS:
            cells.append((r, slot, *c[slot]))
            if c[slot][3] not in groups:
                out.add(("known_country", r, slot))
        query = c["query"]
        for slot in ("correct", "irrelevant"):
            if query[3] in groups and c[slot][3] in groups and groups[query[3]] == groups[c[slot][3]]:
                out.add((f"{slot}_outside_query_group", r, slot))
        if c["language_biased"][3] != query[3]:
            out.add(("language_biased_query_country", r, "language_biased"))
        if c["correct"][2] != query[2]:
            out.add(("correct_query_concept", r, "correct"))
        for slot in ("language_biased", "irrelevant"):
            if c[slot][2] == query[2]:
                out.add((f"{slot}_other_concept", r, slot))
        if len({c[slot][1] for slot, _ in SLOTS}) < 4:
            out.add(("distinct_images", r, "row"))
    queried: set[object] = set()
    for r, row in enumerate(rows):
        if row["query_image_id"] in queried:
            out.add(("one_query_per_image", r, "query"))
        queried.add(row["query_image_id"])

    def own(pairs: list[tuple[object, object]]) -> dict[object, object]:
        counts: dict[object, Counter[object]] = defaultdict(Counter)
        for key, value in pairs:
            counts[key][value] += 1
        return {key: c.most_common(1)[0][0] for key, c in counts.items()}

    for rule, key, value in (
        ("index_one_image_id", 2, 3),
        ("image_id_one_index", 3, 2),
        ("image_one_concept", 3, 4),
        ("image_one_country", 3, 5),
    ):
        ref = own([(c[key], c[value]) for c in cells])
        out |= {(rule, c[0], c[1]) for c in cells if c[value] != ref[c[key]]}
    first: dict[object, tuple[int, str]] = {}
    for c in cells:
        first.setdefault(c[3], (c[0], c[1]))
    concept_of = own([(c[3], c[4]) for c in cells])
    country_of = own([(c[3], c[5]) for c in cells])
    named = []
    for image, where in first.items():
        match = ID.fullmatch(str(image))
        if not match:
            out.add(("image_id_scheme", *where))
            continue
        if match[1] != str(country_of[image]).lower():
            alias = (match[1], country_of[image]) == ("america", "USA")
            out.add(("image_id_country_alias" if alias else "image_id_country", *where))
        named.append((int(match[2]), concept_of[image], where))
    name_of = own([(concept_id, concept) for concept_id, concept, _ in named])
    out |= {("concept_id_one_name", *where) for concept_id, concept, where in named if concept != name_of[concept_id]}
    uses: Counter[str] = Counter()
    for r, row in enumerate(rows):
        for slot, p in SLOTS[1:]:
            uses[str(row[f"{p}image_id"])] += 1
            if uses[str(row[f"{p}image_id"])] == max_reuse + 1:
                out.add(("max_candidate_reuse", r, slot))
    return out, uses


def read_rows(path: Path) -> list[Row]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def assert_matches_plain(path: Path, rows: list[Row]) -> dict[str, int]:
    audit = audit_path(path)
    expected, uses = plain_audit(rows)
    got = {(v["rule"], v["row"], v["slot"]) for v in audit.violations.to_pylist()}
    assert got == expected
    assert audit.report.counts() == {rule: sum(1 for v in expected if v[0] == rule) for rule in audit.report.counts()}
    reuse = audit.report.reuse
    assert reuse.maximum == max(uses.values())
    assert reuse.distribution == dict(sorted(Counter(uses.values()).items()))
    assert reuse.most_reused == sorted(i for i, n in uses.items() if n == reuse.maximum)
    assert audit.report.images == len({c for row in rows for _, p in SLOTS for c in [row[f"{p}image_id"]]})
    return audit.report.counts()


def test_the_authors_file_matches_the_plain_restatement() -> None:
    rows = read_rows(AUTHORS_FILE)
    counts = assert_matches_plain(AUTHORS_FILE, rows)
    # The faults of the released triplets that the README reports (the exact numbers come from the restatement).
    assert counts["correct_outside_query_group"] > 0 and counts["irrelevant_outside_query_group"] > 0
    assert counts["image_id_country_alias"] > 0 and counts["max_candidate_reuse"] > 0
    code, output = run(AUTHORS_FILE)
    (top, uses), *_ = plain_audit(rows)[1].most_common(1)
    assert code == 1 and f"max {uses} ({top})" in output
    assert f"{sum(counts.values()):,} violation(s)" in output


def test_a_damaged_copy_of_the_authors_file_matches_the_plain_restatement(tmp_path: Path) -> None:
    """Random damage of every kind the rules look at, so the rules that the authors' file keeps fire too."""
    rows = read_rows(AUTHORS_FILE)
    rng = random.Random(7)
    ids = sorted({str(row[f"{p}image_id"]) for row in rows for _, p in SLOTS})
    concepts = sorted({str(row["query_concept"]) for row in rows})
    for _ in range(300):
        r, (_, p) = rng.randrange(len(rows)), rng.choice(SLOTS)
        kind = rng.randrange(9)
        if kind == 0:
            rows[r][f"{p}index"] = str(rng.randrange(12_000))
        elif kind == 1:
            rows[r][f"{p}image_id"] = rng.choice(ids)
        elif kind == 2:
            rows[r][f"{p}concept"] = rng.choice(concepts)
        elif kind == 3:
            rows[r][f"{p}country"] = rng.choice([*COUNTRIES, "Atlantis"])
        elif kind == 4:
            old = str(rows[r][f"{p}image_id"])
            rename_everywhere(rows, old, rng.choice([old.replace("-", "_"), f"atlantis-{rng.randrange(200)}-1-nav"]))
        elif kind == 5:
            rows[r]["query_image_id"] = rows[rng.randrange(len(rows))]["query_image_id"]
        elif kind == 6:
            other = rng.randrange(len(rows))
            for field in ("index", "image_id", "concept", "country"):
                rows[r][f"{p}{field}"] = rows[other][f"{p}{field}"]
        elif kind == 7:
            rows[r][f"{p}concept"] = rows[r]["query_concept"]
        else:  # the query again, as one of its own candidates
            _, candidate = rng.choice(SLOTS[1:])
            for field in ("index", "image_id", "concept", "country"):
                rows[r][f"{candidate}{field}"] = rows[r][f"query_{field}"]
    counts = assert_matches_plain(write_csv(rows, tmp_path / "damaged.csv"), rows)
    assert all(counts.values()), counts  # every rule had something to catch
