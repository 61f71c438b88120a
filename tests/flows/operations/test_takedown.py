"""`culturebench takedown`: a patch version without the named images, the rows they touched repaired (3XCM) or
their quintets dropped (MixCuBe), every other row as it was, a CHANGELOG, a denylist that merges and that a rebuild
of the same config honours."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import shutil
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import load_dataset
from typer.testing import CliRunner

from curation.assemble import RQ2_PREFIXES, RQ3_PREFIXES
from curation.rules import RQ2_RULES, RQ3_RULES, Catalog, in_pool
from data.reference import default_pack
from data.schemas import XCM_BENCH_CSV_COLUMNS
from data.takedown.denylist import FILE as DENYLIST
from flows.cli import app
from flows.mixcube.build import build_locally as build_mixcube
from flows.mixcube.config import BuildMixCubeConfig
from flows.xcm.build import build_locally as build_xcm
from flows.xcm.config import Build3XCMConfig
from tests.conftest import SMALL_CONCEPTS, SMALL_COUNTRIES

DATE = "2026-05-01"
PREFIX_OF = {"query_index": "query_image_id"}  # the id column beside each index column


# Its tests are `slow` (tests/support/scheduling.py): a 3XCM build, out of `make test-fast`.
SLOW_FIXTURES = {"xcm_build"}


@pytest.fixture(scope="module")
def xcm_build(tmp_path_factory: pytest.TempPathFactory) -> Build3XCMConfig:
    """One small 3XCM demo build (as conftest's `small_demo_config`), released as 0.0.1; tests take down from copies
    of its release root."""
    root = tmp_path_factory.mktemp("xcm")
    config = Build3XCMConfig.demo(
        workspace_root=str(root / "workspace"),
        countries=SMALL_COUNTRIES,
        concepts={"include": SMALL_CONCEPTS},
        demo_corpus={"countries": SMALL_COUNTRIES, "concepts": SMALL_CONCEPTS, "images_per_query": 2},
        release={"root": str(root / "releases"), "version": "0.0.1"},
    )
    build_xcm(config)
    return config


@pytest.fixture
def xcm_root(xcm_build: Build3XCMConfig, tmp_path: Path) -> Path:
    root = tmp_path / "releases"
    shutil.copytree(xcm_build.release.root, root)
    return root


def invoke(*args: str) -> Any:
    result = CliRunner().invoke(app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def take_down(release: Path, *names: str, reason: str = "the rights holder asked", **options: str) -> Any:
    extra = [arg for key, value in options.items() for arg in (f"--{key}", value)]
    return invoke("takedown", str(release), *names, "--reason", reason, "--date", DATE, *extra)


def table(folder: Path, config: str) -> pa.Table:
    parts = sorted((folder / config).glob("*.parquet"))
    return pa.concat_tables([pq.read_table(p) for p in parts])


def rows_of(folder: Path, config: str) -> list[dict]:
    rows = table(folder, config)
    return (rows.drop_columns(["image"]) if "image" in rows.column_names else rows).to_pylist()


def id_column(index_column: str) -> str:
    return PREFIX_OF.get(index_column, index_column.removesuffix("index") + "image_id")


def with_new_indexes(row: dict, index_of: dict[str, int]) -> dict:
    """A parent row as the patch must hold it: every column as it was, each index following its image."""
    return {k: index_of[row[id_column(k)]] if k.endswith("_index") else v for k, v in row.items()}


def tar_samples(folder: Path) -> dict[str, bytes]:
    samples = {}
    for shard in sorted((folder / "images").glob("*.tar")):
        with tarfile.open(shard) as tar:
            for member in tar.getmembers():
                samples[member.name] = tar.extractfile(member).read()
    return samples


def assert_gone(folder: Path, removed: list[dict]) -> None:
    """No removed image in the image table, the benchmark tables, the authors' CSV or the WebDataset shards; in
    `unassembled` only as a `taken_down` row without an index."""
    ids = {r["image_id"] for r in removed}
    hashes = {r["sha256"] for r in removed}
    urls = {r["url"] for r in removed}
    images = rows_of(folder, "image_metadata")
    assert not ids & {r["image_id"] for r in images}
    assert not hashes & {r["sha256"] for r in images} and not urls & {r["url"] for r in images}
    for config in ("benchmark", "benchmark_cd"):
        named = {v for row in rows_of(folder, config) for k, v in row.items() if k.endswith("image_id")}
        assert not ids & named
    text = (folder / "benchmarks" / "xcm-bench.csv").read_text()
    assert not any(f",{i}," in text for i in ids)
    samples = tar_samples(folder)
    assert {name.rsplit(".", 1)[0] for name in samples} == {r["image_id"] for r in images}
    assert not any(
        h in json.dumps(json.loads(b)) for name, b in samples.items() if name.endswith(".json") for h in hashes
    )
    for row in rows_of(folder, "unassembled"):
        if row["query_image_id"] in ids:
            assert row["reason"] == "taken_down" and row["query_index"] == -1
        else:
            assert row["reason"] != "taken_down"
    taken = {(r["task"], r["query_image_id"]) for r in rows_of(folder, "unassembled") if r["reason"] == "taken_down"}
    assert taken == {(task, i) for task in ("rq2", "rq3") for i in ids}


def assert_untouched_rows_identical(parent: Path, patch: Path, removed_ids: set[str]) -> dict[str, list[dict]]:
    """Image rows and benchmark rows that did not involve a removed image are the parent's, column for column
    (indexes follow their images), in the parent's order; returns the rows that were changed, per table."""
    before, after = rows_of(parent, "image_metadata"), rows_of(patch, "image_metadata")
    index_of = {r["image_id"]: r["index_in_dataset"] for r in after}
    expected = [r | {"index_in_dataset": index_of[r["image_id"]]} for r in before if r["image_id"] not in removed_ids]
    assert after == expected and [r["index_in_dataset"] for r in after] == list(range(len(after)))
    parent_bytes = {r["image_id"]: r["image"]["bytes"] for r in table(parent, "image_metadata").to_pylist()}
    assert all(r["image"]["bytes"] == parent_bytes[r["image_id"]] for r in table(patch, "image_metadata").to_pylist())
    changed = {}
    for config in ("benchmark", "benchmark_cd"):
        new = {r["query_image_id"]: r for r in rows_of(patch, config)}
        task = {"benchmark": "rq2", "benchmark_cd": "rq3"}[config]
        unfilled = {r["query_image_id"]: r for r in rows_of(patch, "unassembled") if r["task"] == task}
        changed[config] = []
        order = []
        for row in rows_of(parent, config):
            named = {v for k, v in row.items() if k.endswith("image_id")}
            if row["query_image_id"] in removed_ids:
                assert row["query_image_id"] not in new  # dropped with its query image
                continue
            if row["query_image_id"] not in new:  # lost a candidate, and its slot has none left
                assert named & removed_ids and unfilled[row["query_image_id"]]["reason"].startswith("no_")
                continue
            if named & removed_ids:
                changed[config].append((row, new[row["query_image_id"]]))
            else:
                assert new[row["query_image_id"]] == with_new_indexes(row, index_of)
            order.append(row["query_image_id"])
        assert [r["query_image_id"] for r in rows_of(patch, config)] == order
    return changed


def assert_repaired_only_the_removed_slot(changed: dict, removed_ids: set[str], patch: Path) -> None:
    images = table(patch, "image_metadata").drop_columns(["image"])
    catalog = Catalog.from_table(images, [c.name for c in default_pack().countries])
    position = {name: i for i, name in enumerate(catalog.country_names)}
    for config, rules, prefixes in (("benchmark", RQ2_RULES, RQ2_PREFIXES), ("benchmark_cd", RQ3_RULES, RQ3_PREFIXES)):
        candidates = tuple(prefixes.values())
        for old, new in changed[config]:
            query = {k for k in old if not k.startswith(candidates) and k != "query_index"}
            assert {k: new[k] for k in query} == {k: old[k] for k in query}  # the same query, text and country Y
            q = new["query_index"]
            y = position[new["descriptor_country"]] if "descriptor_country" in new else -1
            for slot in rules:
                prefix = prefixes[slot.name]
                if old[f"{prefix}image_id"] in removed_ids:  # chosen again, under the slot's rule
                    chosen = np.array([new[f"{prefix}index"]])
                    assert in_pool(catalog, slot, chosen, catalog.concept[[q]], catalog.country[[q]], np.array([y]))[0]
                else:  # the other candidates stay
                    assert new[f"{prefix}image_id"] == old[f"{prefix}image_id"]


@pytest.mark.slow
def test_taking_down_a_candidate_repairs_only_the_rows_that_used_it(xcm_root: Path) -> None:
    parent = xcm_root / "3xcm" / "0.0.1"
    benchmark = rows_of(parent, "benchmark")
    candidate = benchmark[0]["semantically_relevant_candidate_image_id"]
    result = take_down(parent, "--image-id", candidate)
    assert result.exit_code == 0, result.output
    patch = xcm_root / "3xcm" / "0.0.2"
    assert json.loads(result.output.strip().splitlines()[-1])["release_path"] == str(patch)

    assert invoke("validate", str(patch)).exit_code == 0
    manifest = json.loads((patch / "manifest.json").read_text())
    removed = manifest["takedowns"][0]["removed"]
    assert [r["image_id"] for r in removed] == [candidate] and removed[0]["why"] == "requested"
    assert manifest["parent"]["version"] == "0.0.1" and manifest["version"] == "0.0.2"
    assert manifest["seeds"] == json.loads((parent / "manifest.json").read_text())["seeds"]
    for rel, record in manifest["files"].items():
        assert hashlib.sha256((patch / rel).read_bytes()).hexdigest() == record["sha256"]
    assert_gone(patch, removed)
    changed = assert_untouched_rows_identical(parent, patch, {candidate})
    assert changed["benchmark"] and changed["benchmark_cd"]  # rows that used it as a candidate
    assert_repaired_only_the_removed_slot(changed, {candidate}, patch)
    rq2 = manifest["takedowns"][0]["rows"]["rq2"]
    assert rq2["repaired"] == len(changed["benchmark"]) and rq2["dropped"] == 1  # its own query row

    # The authors' CSV is the patch's benchmark, in their columns.
    csv_rows = list(csv.DictReader(io.StringIO((patch / "benchmarks" / "xcm-bench.csv").read_text())))
    expected = table(patch, "benchmark").select(list(XCM_BENCH_CSV_COLUMNS)).to_pylist()
    assert csv_rows == [{k: str(v) for k, v in row.items()} for row in expected]

    card = (patch / "README.md").read_text()
    changelog = card.split("## CHANGELOG", 1)[1]
    assert f"### 0.0.2 ({DATE}, UTC)" in changelog and "the rights holder asked" in changelog
    assert candidate in changelog and removed[0]["sha256"] in changelog and removed[0]["url"] in changelog
    denylist = json.loads((xcm_root / "3xcm" / DENYLIST).read_text())
    assert [(e["image_id"], e["sha256"], e["url"], e["version"], e["date"]) for e in denylist["entries"]] == [
        (candidate, removed[0]["sha256"], removed[0]["url"], "0.0.2", DATE)
    ]

    images = load_dataset(str(patch), "image_metadata", split="train")
    triplets = load_dataset(str(patch), "benchmark", split="train")
    assert len(images) == len(rows_of(parent, "image_metadata")) - 1 and candidate not in images["image_id"]
    assert len(triplets) == len(benchmark) - 1

    # Taking it down again is the same patch (unchanged); another patch under the same version is refused.
    again = take_down(parent, "--image-id", candidate)
    assert again.exit_code == 0 and json.loads(again.output.strip().splitlines()[-1])["status"] == "unchanged"
    other = take_down(parent, "--image-id", benchmark[1]["query_image_id"], version="0.0.2")
    assert other.exit_code == 1 and "already exists" in other.output


def test_taking_down_a_query_drops_its_rows_and_a_second_takedown_merges_changelog_and_denylist(xcm_root: Path) -> None:
    first = xcm_root / "3xcm" / "0.0.1"
    query = rows_of(first, "benchmark")[3]["query_image_id"]
    assert take_down(first, "--image-id", query).exit_code == 0
    patch = xcm_root / "3xcm" / "0.0.2"
    assert query not in {r["query_image_id"] for r in rows_of(patch, "benchmark")}
    assert query not in {r["query_image_id"] for r in rows_of(patch, "benchmark_cd")}
    assert {(r["task"], r["query_index"], r["reason"]) for r in rows_of(patch, "unassembled")} == {
        ("rq2", -1, "taken_down"),
        ("rq3", -1, "taken_down"),
    }

    second = rows_of(patch, "benchmark")[0]["query_image_id"]
    result = take_down(patch, "--image-id", second, reason="a second request")
    assert result.exit_code == 0, result.output
    latest = xcm_root / "3xcm" / "0.0.3"
    assert invoke("validate", str(latest)).exit_code == 0
    manifest = json.loads((latest / "manifest.json").read_text())
    assert manifest["parent"]["version"] == "0.0.2" and [t["version"] for t in manifest["takedowns"]] == [
        "0.0.2",
        "0.0.3",
    ]
    assert_gone(latest, [r for t in manifest["takedowns"] for r in t["removed"]])
    assert_untouched_rows_identical(patch, latest, {second})
    changelog = (latest / "README.md").read_text().split("## CHANGELOG", 1)[1]
    assert changelog.index("### 0.0.3") < changelog.index("### 0.0.2")  # the latest first, the earlier kept
    assert "a second request" in changelog and "the rights holder asked" in changelog
    entries = json.loads((xcm_root / "3xcm" / DENYLIST).read_text())["entries"]
    assert [(e["image_id"], e["version"], e["removed_from"]) for e in entries] == [
        (query, "0.0.2", "0.0.1"),
        (second, "0.0.3", "0.0.2"),
    ]


def test_taking_down_by_sha256_removes_every_copy_and_by_url_and_unknown_names_are_refused(xcm_root: Path) -> None:
    parent = xcm_root / "3xcm" / "0.0.1"
    images = rows_of(parent, "image_metadata")
    counts: dict[str, int] = {}
    for row in images:
        counts[row["sha256"]] = counts.get(row["sha256"], 0) + 1
    copied = next(sha for sha, n in counts.items() if n > 1)  # the demo's byte copy filed under another concept
    copies = {r["image_id"] for r in images if r["sha256"] == copied}
    converted = next(r for r in images if r["format"] != "JPEG")  # released as a JPEG: its file has another sha256
    released = next(r for r in table(parent, "image_metadata").to_pylist() if r["image_id"] == converted["image_id"])
    pixel_copies = {r["image_id"] for r in images if r["pixel_sha256"] == converted["pixel_sha256"]}  # PNG re-save
    assert len(pixel_copies) == 2
    by_url = next(r for r in images if r["sha256"] != copied and r["image_id"] not in pixel_copies)

    unknown = take_down(parent, "--sha256", "0" * 64, "--url", "nowhere/else.jpg", "--image-id", "atlantis-0-1-eng")
    assert unknown.exit_code == 2
    assert "0" * 64 in unknown.output and "nowhere/else.jpg" in unknown.output and "atlantis-0-1-eng" in unknown.output
    assert not (xcm_root / "3xcm" / "0.0.2").exists() and not (xcm_root / "3xcm" / DENYLIST).exists()
    assert take_down(parent, "--image-id", by_url["image_id"], version="0.0.1").exit_code == 2  # not later
    assert take_down(parent, "--image-id", by_url["image_id"], reason=" ").exit_code == 2

    released_sha = hashlib.sha256(released["image"]["bytes"]).hexdigest()
    result = take_down(parent, "--sha256", copied, "--sha256", released_sha, "--url", by_url["url"], version="0.1.0")
    assert result.exit_code == 0, result.output
    patch = xcm_root / "3xcm" / "0.1.0"
    assert invoke("validate", str(patch)).exit_code == 0
    removed = json.loads((patch / "manifest.json").read_text())["takedowns"][0]["removed"]
    gone = {r["image_id"] for r in removed}
    assert gone == copies | pixel_copies | {by_url["image_id"]}
    why = {r["image_id"]: r["why"] for r in removed}
    assert why[by_url["image_id"]] == why[converted["image_id"]] == "requested"
    assert sorted(why[i] for i in pixel_copies - {converted["image_id"]}) == [f"pixel copy of {converted['image_id']}"]
    assert_gone(patch, removed)
    changed = assert_untouched_rows_identical(parent, patch, gone)
    assert_repaired_only_the_removed_slot(changed, gone, patch)
    denylisted = {(e["sha256"], e["url"]) for e in json.loads((xcm_root / "3xcm" / DENYLIST).read_text())["entries"]}
    assert denylisted == {(r["sha256"], r["url"]) for r in removed}


def test_a_rebuild_of_the_same_config_leaves_out_the_denylisted_images(
    xcm_build: Build3XCMConfig, xcm_root: Path
) -> None:
    parent = xcm_root / "3xcm" / "0.0.1"
    images = rows_of(parent, "image_metadata")
    by_id, by_url = images[0]["image_id"], images[10]
    assert take_down(parent, "--image-id", by_id, "--url", by_url["url"]).exit_code == 0
    denylisted = {by_id, by_url["image_id"]}

    config = xcm_build.model_copy(
        update={"release": xcm_build.release.model_copy(update={"root": str(xcm_root), "version": "0.1.0"})}
    )
    summary = build_xcm(config)
    rebuilt = Path(summary.release_path)
    assert invoke("validate", str(rebuilt)).exit_code == 0
    ids = {r["image_id"] for r in rows_of(rebuilt, "image_metadata")}
    assert not ids & denylisted and ids == {r["image_id"] for r in images} - denylisted
    stats = {s["stage"]: s for s in json.loads((rebuilt / "manifest.json").read_text())["stage_stats"]}
    assert stats["image_metadata"]["dropped_by_reason"] == {"taken_down": 2}
    assert set(summary.skipped_stages) >= {"images", "image_dedup"}  # before the catalog: nothing redone
    assert "image_metadata" not in summary.skipped_stages and "assembly" not in summary.skipped_stages


# -- MixCuBe -----------------------------------------------------------------------------------------------------------


def mixcube_config(tmp_path: Path, version: str = "0.0.1") -> BuildMixCubeConfig:
    return BuildMixCubeConfig.demo(
        workspace_root=str(tmp_path / "ws"),
        originals={"per_cell": 1, "cultures": ["South Korea", "UK"], "categories": ["Food", "Clothes"]},
        release={"root": str(tmp_path / "rel"), "version": version},
        shard_size=4,
    )


@pytest.mark.slow
def test_mixcube_takedown_removes_whole_quintets_and_a_rebuild_honours_the_denylist(tmp_path: Path) -> None:
    parent = Path(build_mixcube(mixcube_config(tmp_path)).release_path)
    rows = rows_of(parent, "default")
    originals = [r for r in rows if r["ethnicity"] == "original"]
    first, second = originals[0], originals[1]
    swap = next(r for r in rows if r["original_id"] == second["original_id"] and r["ethnicity"] != "original")

    assert take_down(parent, "--image-id", "nobody-original").exit_code == 2
    result = take_down(parent, "--image-id", first["sample_id"], "--sha256", swap["sha256"])
    assert result.exit_code == 0, result.output
    patch = parent.parent / "0.0.2"
    gone = {first["original_id"], second["original_id"]}
    kept = [r for r in rows if r["original_id"] not in gone]
    assert rows_of(patch, "default") == kept  # every other row as it was, in order
    parent_bytes = {r["sample_id"]: r["image"]["bytes"] for r in table(parent, "default").to_pylist()}
    assert all(r["image"]["bytes"] == parent_bytes[r["sample_id"]] for r in table(patch, "default").to_pylist())
    assert {n.rsplit(".", 1)[0] for n in tar_samples(patch)} == {r["sample_id"] for r in kept}
    assert {p.stem for p in (patch / "masks").glob("*.png")} == {r["mask_sha256"] for r in kept if r["mask_sha256"]}
    food = (patch / "food_label.csv").read_text()
    assert not any(r["sample_id"] in food for r in rows if r["original_id"] in gone)
    assert len(load_dataset(str(patch), split="train")) == len(kept)

    manifest = json.loads((patch / "manifest.json").read_text())
    record = manifest["takedowns"][0]
    assert {r["image_id"] for r in record["removed"]} == {r["sample_id"] for r in rows if r["original_id"] in gone}
    assert record["rows"]["quintets"] == {
        first["original_id"]: [first["sample_id"]],
        second["original_id"]: [swap["sample_id"]],
    }
    changelog = (patch / "README.md").read_text().split("## CHANGELOG", 1)[1]
    assert "a swap named alone takes its original and the other swaps with it" in changelog
    assert swap["sample_id"] in changelog and second["sample_id"] in changelog and DATE in changelog
    entries = json.loads((parent.parent / DENYLIST).read_text())["entries"]
    assert {e["sha256"] for e in entries} >= {first["sha256"], second["sha256"]}
    cells = {(c["country"], c["category"]): c["originals"] for c in manifest["cells_below_target"]}
    assert cells[(first["country"], first["category"])] == 0  # counted again over the patch

    # The same config, rebuilt as 0.1.0: the two originals are failed rows and never reach the release.
    summary = build_mixcube(mixcube_config(tmp_path, "0.1.0"))
    rebuilt = Path(summary.release_path)
    assert {r["original_id"] for r in rows_of(rebuilt, "default")} == {r["original_id"] for r in kept}
    stats = {s["stage"]: s for s in json.loads((rebuilt / "manifest.json").read_text())["stage_stats"]}
    assert stats["originals"]["dropped_by_reason"] == {"taken_down": 2}


def test_the_patch_of_an_unchanged_release_writes_the_parents_bytes(xcm_root: Path) -> None:
    """The materialiser alone, with nothing removed: every data file is the parent's, byte for byte."""
    from data.takedown.patch import ParentRelease, takedown_record
    from flows.xcm.takedown import write_3xcm_patch

    parent = ParentRelease.open(xcm_root / "3xcm" / "0.0.1")
    record = takedown_record(parent, "0.0.9", DATE, "none", {}, [], {"summary": "nothing removed"})
    written = write_3xcm_patch(
        parent,
        parent.images(),
        record,
        parent.table("image_metadata"),
        parent.table("benchmark"),
        parent.table("benchmark_cd"),
        parent.table("unassembled"),
        "valid",
        {},
    )
    before = json.loads((xcm_root / "3xcm" / "0.0.1" / "manifest.json").read_text())["files"]
    differ = {
        k for k in before.keys() | written.manifest["files"].keys() if before.get(k) != written.manifest["files"].get(k)
    }
    assert differ == {"README.md", "croissant.json"}  # they name the version


def test_the_denylist_fetcher_never_requests_a_denylisted_url(tmp_path: Path) -> None:
    from data.schemas import IMAGES, STATUS_OK, blank_row, from_rows
    from data.takedown.denylist import (
        Denylist,
        DenylistEntry,
        DenylistError,
        DenylistFetcher,
        read_denylist,
        write_denylist,
    )

    asked: list[str] = []

    class Fetcher:
        def fetch(self, hits: list[dict], blobs: object) -> pa.Table:
            asked.extend(h["url"] for h in hits)
            return from_rows(
                [blank_row(IMAGES, image_id=h["image_id"], url=h["url"], status=STATUS_OK) for h in hits], IMAGES
            )

    entry = DenylistEntry(
        image_id="a", url="https://example.org/a.jpg", reason="r", date=DATE, version="1.0.1", removed_from="1.0.0"
    )
    path, merged = write_denylist(str(tmp_path), "mixcube", [entry])
    assert write_denylist(str(tmp_path), "mixcube", [entry])[1] == merged  # merging the same entry again adds nothing
    hits = [{"image_id": i, "url": f"https://example.org/{i}.jpg"} for i in ("a", "b")]
    rows = DenylistFetcher(Fetcher(), read_denylist(str(tmp_path), "mixcube")).fetch(hits, None).to_pylist()
    assert asked == ["https://example.org/b.jpg"]
    assert [(r["image_id"], r["status"], r["error"]) for r in rows] == [
        ("a", "failed", "taken_down"),
        ("b", "ok", None),
    ]
    assert read_denylist(str(tmp_path), "3xcm") == Denylist(benchmark="3xcm")  # another benchmark: none
    Path(path).write_text("[1, 2]")
    with pytest.raises(DenylistError, match=r"denylist\.json"):
        read_denylist(str(tmp_path), "mixcube")
