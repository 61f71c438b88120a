"""The release: HF datasets round trips, WebDataset shards, the authors' CSV, the manifest and immutability."""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import webdataset as wds
import yaml
from datasets import load_dataset
from typer.testing import CliRunner

from data.publish.folder import ReleaseExistsError
from data.schemas import XCM_BENCH_CSV_COLUMNS
from flows.cli import app
from flows.xcm.build import build_locally
from flows.xcm.stages import STAGES
from tests.support.release_tamper import rehash_manifest

AUTHOR_FIELDS = ["concept_id", "concept_in_native", "image_id", "index_in_dataset", "concept", "concept_country",
                 "country", "title", "image"]  # fmt: skip


@pytest.mark.slow
def test_release_loads_with_datasets_and_webdataset(small_demo_config) -> None:
    summary = build_locally(small_demo_config)
    release = Path(summary.release_path)
    assert release == Path(small_demo_config.release.root) / "3xcm" / "0.0.1"

    images = load_dataset(str(release), "image_metadata", split="train")  # what the authors' evaluator calls
    benchmark = load_dataset(str(release), "benchmark", split="train")
    sextets = load_dataset(str(release), "benchmark_cd", split="train")
    assert images.num_rows == summary.stages[-3].rows_in  # every image of the image_metadata stage
    assert set(AUTHOR_FIELDS) <= set(images.column_names)
    assert type(images.features["image"]).__name__ == "Image"
    assert images["index_in_dataset"] == list(range(images.num_rows))
    first = images[0]
    assert first["image"].size == (320, 240)
    assert first["country"] in {"USA", "UK", "Spain", "Japan", "Kenya"}
    assert benchmark.num_rows > 0 and sextets.num_rows > 0
    for row in benchmark:
        for prefix in ("query_", "semantically_relevant_candidate_", "culturally_relevant_candidate_",
                       "non_relevant_candidate_"):  # fmt: skip
            target = images[row[f"{prefix}index"]]
            assert target["image_id"] == row[f"{prefix}image_id"]

    # Row groups of 100 rows for the image table (the Hugging Face convention for image tables).
    parquet = pq.ParquetFile(next((release / "image_metadata").glob("*.parquet")))
    assert parquet.metadata.row_group(0).num_rows == min(100, images.num_rows)
    assert b"huggingface" in parquet.schema_arrow.metadata

    # WebDataset: <image_id>.jpg + <image_id>.json, next to each other, keys without dots.
    shards = sorted(str(p) for p in (release / "images").glob("*.tar"))
    samples = list(wds.WebDataset(shards, shardshuffle=False).decode("pil"))
    assert [s["__key__"] for s in samples] == images["image_id"]
    assert samples[0]["json"]["image_id"] == samples[0]["__key__"]
    assert samples[0]["jpg"].size == first["image"].size

    # The authors' CSV, with their exact columns.
    with open(release / "benchmarks" / "xcm-bench.csv", newline="") as handle:
        reader = csv.DictReader(handle)
        assert tuple(reader.fieldnames) == XCM_BENCH_CSV_COLUMNS
        assert sum(1 for _ in reader) == benchmark.num_rows

    # The card names each config and carries the licence and a figure that exists.
    card = (release / "README.md").read_text()
    meta = yaml.safe_load(card.split("---")[1])
    assert meta["license"] == "cc-by-nc-sa-4.0"
    # Every table with rows is a config; an empty one cannot load (tests/data/publish/test_loading.py) and is named
    # instead.
    unassembled_rows = pq.read_metadata(next((release / "unassembled").glob("*.parquet"))).num_rows
    tables = ["image_metadata", "benchmark", "benchmark_cd"] + (["unassembled"] if unassembled_rows else [])
    assert [c["config_name"] for c in meta["configs"]] == tables
    assert "](figures/images_per_concept_country.png)" in card and (release / "figures").is_dir()
    assert "auto-accept" in card and "tagger=none" in card  # embedded defaults are declared


@pytest.mark.slow
def test_manifest_hashes_every_file_and_records_provenance(small_demo_config) -> None:
    release = Path(build_locally(small_demo_config).release_path)
    manifest = json.loads((release / "manifest.json").read_text())
    on_disk = {str(p.relative_to(release)) for p in release.rglob("*") if p.is_file()} - {"manifest.json"}
    assert set(manifest["files"]) == on_disk
    for rel, entry in manifest["files"].items():
        assert hashlib.sha256((release / rel).read_bytes()).hexdigest() == entry["sha256"]
    assert manifest["config"]["assembly"]["seed"] == small_demo_config.assembly.seed
    assert manifest["seeds"] == {"assembly": 0, "demo_corpus": 0}
    assert manifest["code_version"]["version"] == "0.1.0"
    assert {s["stage"] for s in manifest["stage_stats"]} >= {"search", "images", "image_dedup", "assembly"}
    assert manifest["backends"]["review"] == "auto_accept"
    assert str(small_demo_config.workspace_root) not in json.dumps(manifest)  # no machine paths
    assert all(
        not url.startswith("/") for url in pq.read_table(release / "image_metadata", columns=["url"])["url"].to_pylist()
    )


@pytest.mark.slow
def test_a_version_is_immutable(small_demo_config) -> None:
    first = build_locally(small_demo_config)
    assert first.release_status == "created"
    before = {p: p.read_bytes() for p in Path(first.release_path).rglob("*") if p.is_file()}
    again = build_locally(small_demo_config)
    assert again.release_status == "unchanged" and len(again.skipped_stages) == len(STAGES)
    changed = small_demo_config.model_copy(
        update={"assembly": small_demo_config.assembly.model_copy(update={"seed": 7})}
    )
    with pytest.raises(ReleaseExistsError, match="immutable"):
        build_locally(changed)
    after = {p: p.read_bytes() for p in Path(first.release_path).rglob("*") if p.is_file()}
    assert after == before  # the refused write touched nothing
    assert not list(Path(first.release_path).parent.glob(".staging-*"))
    bumped = changed.model_copy(update={"release": changed.release.model_copy(update={"version": "0.0.2"})})
    assert build_locally(bumped).release_status == "created"


@pytest.mark.slow
def test_validate_command_on_a_release(small_demo_config) -> None:
    release = Path(build_locally(small_demo_config).release_path)
    runner = CliRunner()
    ok = runner.invoke(app, ["validate", str(release)])
    assert ok.exit_code == 0, ok.output
    # Tamper: point a correct candidate at the query image itself (same language group).
    path = next((release / "benchmark").glob("*.parquet"))
    table = pq.read_table(path)
    column = table.schema.get_field_index("semantically_relevant_candidate_index")
    values = table["query_index"]
    tampered = table.set_column(column, table.schema.field(column), values)
    pq.write_table(tampered, path)
    bad = runner.invoke(app, ["validate", str(release)])
    assert bad.exit_code == 1
    assert "integrity" in bad.output and "rq2.correct" not in bad.output  # the files first
    rehash_manifest(release)  # a manifest that agrees with the tampered files: the rules find it
    bad = runner.invoke(app, ["validate", str(release)])
    assert bad.exit_code == 1
    assert "rq2.correct" in bad.output


def test_manifest_config_never_carries_secrets() -> None:
    from data.provenance import REDACTED, redact

    config = {"gemini": {"api_key": "AIza-secret", "model": "gemini-2.5-flash"}, "ls": [{"token": "t0k"}], "seed": 1}
    clean = redact(config)
    assert clean == {
        "gemini": {"api_key": REDACTED, "model": "gemini-2.5-flash"},
        "ls": [{"token": REDACTED}],
        "seed": 1,
    }
    assert "secret" not in json.dumps(clean) and "t0k" not in json.dumps(clean)
