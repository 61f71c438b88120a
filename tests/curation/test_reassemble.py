"""`culturebench reassemble`: a violation-free benchmark over the images of an existing one, keeping its image ids,
its indexes and every row that already obeys the rules."""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import flows.cli
from curation.reassemble import reassemble
from curation.rule_audit import audit_path
from data.reference import default_pack
from data.schemas import RQ2_SLOTS, XCM_BENCH_CSV_COLUMNS
from flows.cli import app
from flows.xcm.build import build_locally
from tests.support.paths import REPO_ROOT

AUTHORS = REPO_ROOT / "data" / "authors" / "xcm-bench.csv"
SLOTS = (("query", "query_"), *RQ2_SLOTS)


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flows.cli.console, "width", 1000)


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _images(rows: list[dict[str, str]]) -> dict[str, tuple[str, str, str]]:
    """image id -> (index, concept, country), over every column of the file."""
    out = {}
    for row in rows:
        for _, prefix in SLOTS:
            key = "query_image_id" if prefix == "query_" else f"{prefix}image_id"
            out[row[key]] = (row[f"{prefix}index"], row[f"{prefix}concept"], row[f"{prefix}country"])
    return out


def _group(country: str) -> str:
    return default_pack().country_by_name()[country].language_group


@pytest.mark.slow
def test_the_authors_benchmark_reassembled_keeps_their_images_and_breaks_no_rule(tmp_path: Path) -> None:
    out = tmp_path / "repaired"
    result = CliRunner().invoke(app, ["reassemble", "--pool", str(AUTHORS), "--out", str(out)])
    assert result.exit_code == 0, result.output
    theirs, ours = _rows(AUTHORS), _rows(out / "benchmarks" / "xcm-bench.csv")
    assert list(ours[0]) == list(XCM_BENCH_CSV_COLUMNS)
    # The same queries, in the same order, over exactly their images, with their ids and indexes.
    assert [r["query_image_id"] for r in ours] == [r["query_image_id"] for r in theirs]
    their_images, our_images = _images(theirs), _images(ours)
    assert set(our_images) <= set(their_images)
    assert all(our_images[i] == their_images[i] for i in our_images)
    # Every rule holds, restated here row by row; reuse is at most 5.
    uses: dict[str, int] = {}
    for row in ours:
        q = row["query_country"]
        assert row["semantically_relevant_candidate_concept"] == row["query_concept"]
        assert _group(row["semantically_relevant_candidate_country"]) != _group(q)
        assert row["culturally_relevant_candidate_country"] == q
        assert row["culturally_relevant_candidate_concept"] != row["query_concept"]
        assert row["non_relevant_candidate_concept"] != row["query_concept"]
        assert _group(row["non_relevant_candidate_country"]) != _group(q)
        ids = [row[f"{p}image_id"] for _, p in RQ2_SLOTS]
        assert len({*ids, row["query_image_id"]}) == 4
        for image in ids:
            uses[image] = uses.get(image, 0) + 1
    assert max(uses.values()) <= 5
    # The rows said to be kept are the authors' rows, unchanged; the others changed.
    manifest = json.loads((out / "manifest.json").read_text())
    unchanged = sum(a == b for a, b in zip(theirs, ours, strict=True))
    assert unchanged == manifest["kept"] > len(theirs) // 2
    assert sum(manifest["replaced"].values()) == len(theirs) - manifest["kept"]
    assert manifest["replaced"]["rq2.correct"] == audit_path(AUTHORS).report.counts()["correct_outside_query_group"]
    assert manifest["input"] == {"file": "xcm-bench.csv", "sha256": hashlib.sha256(AUTHORS.read_bytes()).hexdigest()}
    assert manifest["validation"]["summary"].startswith("valid")
    card = (out / "README.md").read_text()
    assert "Without tags, the assembler could only use concept labels" in card and str(manifest["kept"]) in card
    sextets = pq.read_table(out / "benchmark_cd")
    assert sextets.num_rows == len(theirs)
    assert set(sextets["correct_candidate_image_id"].to_pylist()) <= set(their_images)
    # Immutable like a release: the same run again changes nothing; another seed is refused.
    again = CliRunner().invoke(app, ["reassemble", "--pool", str(AUTHORS), "--out", str(out)])
    assert again.exit_code == 0 and "unchanged" in again.output
    other = CliRunner().invoke(app, ["reassemble", "--pool", str(AUTHORS), "--out", str(out), "--seed", "1"])
    assert other.exit_code == 1 and "already exists" in other.output


def test_a_row_that_breaks_a_rule_is_replaced_and_the_others_kept(tmp_path: Path) -> None:
    """A few authors' rows, one of them broken on purpose (its correct candidate from the query's own group)."""
    rows = _rows(AUTHORS)
    sample = [r for r in rows if _group(r["semantically_relevant_candidate_country"]) != _group(r["query_country"])
              and _group(r["non_relevant_candidate_country"]) != _group(r["query_country"])][:400]  # fmt: skip
    images = _images(rows)
    broken = sample[0]
    same_group = next(
        (image, facts) for image, facts in images.items()
        if facts[1] == broken["query_concept"] and _group(facts[2]) == _group(broken["query_country"])
        and image != broken["query_image_id"]
    )  # fmt: skip
    image, (index, concept, country) = same_group
    prefix = "semantically_relevant_candidate_"
    broken.update({f"{prefix}index": index, f"{prefix}image_id": image, f"{prefix}concept": concept,
                   f"{prefix}country": country})  # fmt: skip
    path = tmp_path / "sample.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(XCM_BENCH_CSV_COLUMNS))
        writer.writeheader()
        writer.writerows(sample)
    result = reassemble(path)
    assert result.validation.ok, result.validation.summary()
    assert result.replaced.get("rq2.correct") == 1
    first = result.benchmark.to_pylist()[0]
    assert first["query_image_id"] == broken["query_image_id"]
    assert first["semantically_relevant_candidate_image_id"] != image
    assert _group(first["semantically_relevant_candidate_country"]) != _group(broken["query_country"])


@pytest.mark.slow
def test_a_release_of_ours_is_reassembled_with_its_tags(small_demo_config, tmp_path: Path) -> None:
    release = Path(build_locally(small_demo_config).release_path)
    result = reassemble(release)
    assert result.pool.tagged and result.validation.ok, result.validation.summary()
    assert result.kept == result.benchmark.num_rows  # a release of ours already obeys every rule
    assert "labels" not in json.dumps(result.manifest()["pool"])


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    broken = tmp_path / "broken.csv"
    shutil.copy(AUTHORS, broken)
    broken.write_text("query_index,query_image_id\n1,x\n")
    result = CliRunner().invoke(app, ["reassemble", "--pool", str(broken), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "Traceback" not in result.output and str(broken) in result.output
    assert not (tmp_path / "out").exists()
