"""Benchmark integrity: copies across concepts never serve as distractors, the validator ties each query to its
image and accounts for every image, a damaged workspace is repaired (never published), and the release is
validated on exactly the tables it publishes."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from typer.testing import CliRunner

import collectors.importer
from curation.catalog import build_catalog
from curation.image_thumbnails import pixel_sha256
from curation.validate import validate_benchmark
from data.process_pool import run_apart
from data.reference import default_pack
from data.schemas import CATALOG, COPIES, IMAGE_DEDUP, RQ2_SLOTS, STATUS_OK
from data.stage import stats_from_table
from data.workspace import DamagedFileError, Workspace
from flows.cli import app
from flows.engine.task_runner import DefaultTaskRunnerConfig
from flows.xcm import build as xcm_build
from flows.xcm.build import XCM, build_locally, release
from flows.xcm.config import Build3XCMConfig
from flows.xcm.stages import BuildValidationError
from tests.support.catalog_rows import catalog_row
from tests.support.paths import REPO_ROOT

FOOD, DANCE, WEDDING = (default_pack().concept_by_name()[name].concept_id for name in ("food", "dance", "wedding"))
RQ2_DISTRACTORS = {prefix for slot, prefix in RQ2_SLOTS if slot != "correct"}
RQ3_DISTRACTORS = {f"{slot}_candidate_" for slot in ("cultural_descriptor_relevant", "language_biased", "irrelevant")}


def _config(root: Path, **overrides: object) -> Build3XCMConfig:
    return Build3XCMConfig.demo(
        workspace_root=str(root / "ws"), release={"root": str(root / "rel"), "version": "0.0.1"}, **overrides
    )


# Its tests are `slow` (tests/support/scheduling.py): the full demo build, out of `make test-fast`.
SLOW_FIXTURES = {"demo"}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Build3XCMConfig, Path]:
    """The full offline demo (the one `make demo` releases), built once for the module's read-only checks."""
    config = _config(tmp_path_factory.mktemp("demo"))
    return config, Path(build_locally(config).release_path)


def _released(release_dir: Path, name: str) -> pa.Table:
    return pa.concat_tables([pq.read_table(f) for f in sorted((release_dir / name).glob("*.parquet"))])


@pytest.mark.slow
def test_no_distractor_of_the_demo_release_is_a_copy_of_an_image_of_the_query_concept(
    demo: tuple[Build3XCMConfig, Path],
) -> None:
    """Re-derived from every stored image of the build (kept or dropped): no distractor has the bytes or the decoded
    pixels of an image found for the query concept. The demo's row 88 ("food" with a byte copy of a food picture
    filed under "dance" as its "not food" candidate) broke this."""
    config, release_dir = demo
    ws = Workspace(config.workspace_root, config.resolved_build_id())
    concept_of = {h["image_id"]: h["concept_id"] for h in ws.read_table("search").to_pylist() if h["status"] == "ok"}
    stored = [r for r in ws.read_table("images").to_pylist() if r["status"] == STATUS_OK]
    shas, pixels = defaultdict(set), defaultdict(set)
    for row in stored:
        shas[concept_of[row["image_id"]]].add(row["sha256"])
        pixels[concept_of[row["image_id"]]].add(pixel_sha256(ws.blobs.get(row["sha256"])))
    images = _released(release_dir, "image_metadata").select(["sha256"]).to_pylist()
    pixel_of = {i["sha256"]: pixel_sha256(ws.blobs.get(i["sha256"])) for i in images}
    checked = 0
    for table, prefixes in (("benchmark", RQ2_DISTRACTORS), ("benchmark_cd", RQ3_DISTRACTORS)):
        for row in _released(release_dir, table).to_pylist():
            for prefix in prefixes:
                sha = images[row[f"{prefix}index"]]["sha256"]
                assert sha not in shas[row["query_concept_id"]], (table, row["query_image_id"], prefix)
                assert pixel_of[sha] not in pixels[row["query_concept_id"]], (table, row["query_image_id"], prefix)
                checked += 1
    assert checked > 1000
    # Both planted copies across concepts (one byte copy, one PNG re-save) show both concepts.
    catalog = _released(release_dir, "image_metadata").select(["image_id", "concept_id", "tags", "url"]).to_pylist()
    planted = [r for r in catalog if "_cross_concept" in r["url"]]
    assert len(planted) == 2 and all(len(set(r["tags"])) == 2 for r in planted)
    # ...and the validator holds the published release to it.
    result = CliRunner().invoke(app, ["validate", str(release_dir)])
    assert result.exit_code == 0, result.output


def _catalog(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=CATALOG)


def _case(shared: str) -> tuple[pa.Table, pa.Table]:
    """A food query from the USA whose language-biased candidate (a USA dance image) is a copy of a food image,
    by bytes or by pixels (`shared`), while its tags say only "dance"."""
    query, other_food, correct, copy_id, irrelevant = (
        f"usa-{FOOD}-1-eng",
        f"usa-{FOOD}-2-eng",
        f"japan-{FOOD}-1-eng",
        f"usa-{DANCE}-1-eng",
        f"japan-{DANCE}-1-eng",
    )
    rows = [
        catalog_row(0, query, "USA", FOOD, 1, [FOOD], "test"),  # the query: food
        catalog_row(1, other_food, "USA", FOOD, 2, [FOOD], "test"),  # another food image
        catalog_row(2, correct, "Japan", FOOD, 1, [FOOD], "test"),  # correct
        catalog_row(3, copy_id, "USA", DANCE, 1, [DANCE], "test"),  # the copy, filed under dance
        catalog_row(4, irrelevant, "Japan", DANCE, 1, [DANCE], "test"),  # irrelevant
    ]
    rows.sort(key=lambda r: (r["concept_id"], r["country"] != "USA"))
    for index, row in enumerate(rows):
        row["index_in_dataset"] = index
    position = {r["image_id"]: i for i, r in enumerate(rows)}
    copy, food = rows[position[copy_id]], rows[position[other_food]]
    if shared == "bytes":
        copy["sha256"] = food["sha256"]
    else:
        copy["pixel_sha256"] = food["pixel_sha256"] = "f" * 64
    catalog = _catalog(rows)
    q, c, lb, ir = (position[i] for i in (query, correct, copy_id, irrelevant))
    benchmark = pa.Table.from_pylist(
        [
            {
                "query_index": q,
                "query_image_id": query,
                "query_concept": "food",
                "query_country": "USA",
                **{f"semantically_relevant_candidate_{k}": v for k, v in zip(
                    ("index", "image_id", "concept", "country"), (c, correct, "food", "Japan"), strict=True
                )},
                **{f"culturally_relevant_candidate_{k}": v for k, v in zip(
                    ("index", "image_id", "concept", "country"), (lb, copy_id, "dance", "USA"), strict=True
                )},
                **{f"non_relevant_candidate_{k}": v for k, v in zip(
                    ("index", "image_id", "concept", "country"), (ir, irrelevant, "dance", "Japan"), strict=True
                )},
                "query_concept_id": FOOD,
                "query_language": "en",
                "query_text": "food",
            }
        ]
    )  # fmt: skip
    return catalog, benchmark


@pytest.mark.parametrize("shared", ["bytes", "pixels"])
def test_the_validator_rejects_a_distractor_that_copies_an_image_of_the_query_concept(shared: str) -> None:
    catalog, benchmark = _case(shared)
    report = validate_benchmark(catalog, benchmark, None, pack=default_pack())
    assert "rq2.language_biased" in {v.rule for v in report.violations}, report.summary()
    # The same row with a candidate that is no copy passes the slot rule.
    clean = catalog.set_column(
        catalog.schema.get_field_index("pixel_sha256"), "pixel_sha256", pa.nulls(catalog.num_rows, pa.string())
    ).set_column(
        catalog.schema.get_field_index("sha256"), "sha256", pa.array([f"{i:064x}" for i in range(catalog.num_rows)])
    )
    assert "rq2.language_biased" not in {
        v.rule for v in validate_benchmark(clean, benchmark, None, pack=default_pack()).violations
    }


def test_every_image_gets_the_concepts_and_tags_of_its_copies_under_other_concepts() -> None:
    food, dance_1, dance_2 = f"usa-{FOOD}-1-eng", f"usa-{DANCE}-1-eng", f"usa-{DANCE}-2-eng"
    concepts = pa.table({"concept_id": pa.array([DANCE, FOOD], pa.int32()), "concept": ["dance", "food"]})
    hit = {"status": "ok", "country": "USA", "title": None, "query_lang": "eng", "url": "x", "source_page": None}
    hits = pa.Table.from_pylist(
        [
            {**hit, "image_id": food, "concept_id": FOOD, "rank": 1, "query": "food USA"},
            {**hit, "image_id": dance_1, "concept_id": DANCE, "rank": 1, "query": "dance USA"},
            {**hit, "image_id": dance_2, "concept_id": DANCE, "rank": 2, "query": "dance USA"},
        ]
    )
    image = {"status": "ok", "num_bytes": 10, "width": 8, "height": 8, "format": "JPEG"}
    images = pa.Table.from_pylist(
        [
            {**image, "image_id": food, "sha256": "a"},
            {**image, "image_id": dance_1, "sha256": "a"},
            {**image, "image_id": dance_2, "sha256": "b"},
        ]
    )
    review = pa.table({"image_id": [dance_1, dance_2, food], "keep": [True, True, False]})
    # The tagger saw "wedding" in the food copy, which is dropped; its tags still count for the group.
    tags = pa.Table.from_pylist(
        [
            {"image_id": dance_1, "concept_ids": [DANCE], "tagger": "gemini"},
            {"image_id": dance_2, "concept_ids": [DANCE], "tagger": "gemini"},
            {"image_id": food, "concept_ids": [FOOD, WEDDING], "tagger": "gemini"},
        ]
    )
    translations = pa.Table.from_pylist(
        [{"concept_id": c, "language_code": "en", "text": t} for c, t in ((DANCE, "dance"), (FOOD, "food"))]
    )
    copies = pa.Table.from_pylist(
        [
            {"image_id": food, "copy_group": dance_1, "pixel_sha256": None},
            {"image_id": dance_1, "copy_group": dance_1, "pixel_sha256": None},
            {"image_id": dance_2, "copy_group": dance_2, "pixel_sha256": None},
        ],
        schema=COPIES,
    )
    catalog = build_catalog(concepts, hits, images, review, tags, translations, copies, default_pack())
    by_id = {r["image_id"]: r["tags"] for r in catalog.to_pylist()}
    assert by_id == {dance_1: [DANCE, *sorted([FOOD, WEDDING])], dance_2: [DANCE]}  # its own tags, then its copies'


def test_the_validator_ties_the_query_to_its_image_and_accounts_for_every_image(
    demo: tuple[Build3XCMConfig, Path],
) -> None:
    config, _ = demo
    ws = Workspace(config.workspace_root, config.resolved_build_id())
    images = ws.read_table("image_metadata")
    benchmark, translations = ws.read_table("assembly"), ws.read_table("translations")
    unassembled = ws.read_extra_table("assembly", "unassembled")
    assert validate_benchmark(images, benchmark, None, translations, unassembled=unassembled, pack=default_pack()).ok

    # One row's query moved, text and id together, to another concept: consistent, but not its image's.
    rows = benchmark.to_pylist()
    other = next(t for t in translations.to_pylist() if t["language_code"] == rows[0]["query_language"]
                 and t["concept_id"] != rows[0]["query_concept_id"])  # fmt: skip
    rows[0].update(query_concept_id=other["concept_id"], query_text=other["text"])
    moved = pa.Table.from_pylist(rows, schema=benchmark.schema)
    report = validate_benchmark(images, moved, None, translations, pack=default_pack())
    assert [v.rule for v in report.violations] == ["rq2.query_concept_id"], report.summary()

    # A dropped row: its image is neither a query nor unassembled.
    dropped = benchmark.slice(1)
    report = validate_benchmark(images, dropped, None, translations, unassembled=unassembled, pack=default_pack())
    assert {v.rule for v in report.violations} == {"rq2.complete"}
    assert rows[0]["query_image_id"] in report.violations[0].detail
    # Listed in unassembled with a reason, it is accounted for.
    explained = pa.concat_tables(
        [
            unassembled,
            pa.Table.from_pylist(
                [{"task": "rq2", "query_index": 0, "query_image_id": rows[0]["query_image_id"], "reason": "x"}],
                schema=unassembled.schema,
            ),
        ]
    )
    assert validate_benchmark(images, dropped, None, translations, unassembled=explained, pack=default_pack()).ok


# -- a damaged workspace -----------------------------------------------------------------------------------------


def _files(release_dir: str | Path) -> dict:
    return json.loads((Path(release_dir) / "manifest.json").read_text())["files"]


def _built(config: Build3XCMConfig) -> tuple[Workspace, dict]:
    """Build, then take the release away (keeping what it held), so a rebuild of the same version can compare."""
    summary = build_locally(config)
    files = _files(summary.release_path)
    shutil.rmtree(summary.release_path)
    return Workspace(config.workspace_root, config.resolved_build_id()), files


@pytest.mark.slow
def test_a_flipped_bit_in_a_finished_table_is_repaired_never_published(small_demo_config: Build3XCMConfig) -> None:
    ws, clean = _built(small_demo_config)
    part = Path(ws.stage_dir("image_metadata")) / "part-00000.parquet"
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0x01
    part.write_bytes(bytes(data))

    with pytest.raises(DamagedFileError) as damaged:
        ws.read_table("image_metadata")
    assert str(part) in str(damaged.value) and "completion marker" in str(damaged.value)

    summary = build_locally(small_demo_config)
    repaired = {s.stage: s.repaired_files for s in summary.stages}
    assert repaired["image_metadata"] == {"part-00000.parquet": "its bytes changed since the stage finished"}
    assert "image_metadata" not in summary.skipped_stages and "images" in summary.skipped_stages
    assert _files(summary.release_path) == clean  # the release is the undamaged build's, byte for byte
    assert summary.validation.startswith("valid")


@pytest.mark.slow
def test_a_deleted_part_is_redone_alone(
    small_demo_config: Build3XCMConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = small_demo_config.model_copy(
        update={"download": small_demo_config.download.model_copy(update={"shard_size": 10})}
    )
    ws, clean_files = _built(config)
    (Path(ws.stage_dir("images")) / "part-00001.parquet").unlink()

    real, imported = collectors.importer.examine_image, []
    monkeypatch.setattr(
        collectors.importer,
        "examine_image",
        lambda data, limits, decode: imported.append(1) or real(data, limits, decode),
    )
    summary = build_locally(config)
    images = next(s for s in summary.stages if s.stage == "images")
    assert images.repaired_files == {"part-00001.parquet": "missing"}
    assert len(imported) == 10  # only that shard's hits were imported again
    assert images.rows_in == ws.marker("images").rows and _files(summary.release_path) == clean_files


@pytest.mark.slow
def test_a_truncated_part_names_its_file(small_demo_config: Build3XCMConfig) -> None:
    ws, _ = _built(small_demo_config)
    part = Path(ws.stage_dir("assembly")) / "part-00000.parquet"
    part.write_bytes(part.read_bytes()[:-40])
    marker = ws.marker("assembly")
    assert marker is not None and marker.files is not None
    # Even when the marker agrees with the truncated bytes (a bug, not damage), the error names the file.
    marker.files["part-00000.parquet"].sha256 = __import__("hashlib").sha256(part.read_bytes()).hexdigest()
    marker.files["part-00000.parquet"].bytes = part.stat().st_size
    ws.storage.write_json(f"{ws.stage_dir('assembly')}/_SUCCESS", marker.model_dump(mode="json"))
    with pytest.raises(DamagedFileError, match="not a readable Parquet file") as damaged:
        ws.read_table("assembly")
    assert damaged.value.filename == str(part)


@pytest.mark.slow
@pytest.mark.parametrize("apart", [False, True], ids=["in-process", "worker-process"])
def test_the_release_validates_exactly_the_tables_it_publishes(
    small_demo_config: Build3XCMConfig, apart: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table changed behind the validation stage's back (its marker rewritten to match, as a bug could) is caught
    by the release's own validation, and nothing is published; also where the validation runs in a worker process
    (`flows.xcm.build.validate_published`, at scale)."""
    ws, _ = _built(small_demo_config)
    rows = ws.read_table("assembly").to_pylist()
    rows[0]["semantically_relevant_candidate_index"] = rows[0]["query_index"]  # the query as its own answer
    marker = ws.marker("assembly")
    record = ws.storage.write_parquet(
        f"{ws.stage_dir('assembly')}/part-00000.parquet",
        pa.Table.from_pylist(rows, schema=ws.read_table("assembly").schema),
    )
    marker.files["part-00000.parquet"] = record  # type: ignore[index]
    ws.storage.write_json(f"{ws.stage_dir('assembly')}/_SUCCESS", marker.model_dump(mode="json"))
    runner = DefaultTaskRunnerConfig(processes=2, processes_from_items=1 if apart else 10**9)
    config = small_demo_config.model_copy(update={"task_runner": runner})  # the same build: how it runs differs
    sent: list[object] = []

    def recorded(function: Any, describe: str) -> Any:
        sent.append(describe)
        return run_apart(function, describe)

    monkeypatch.setattr(xcm_build, "run_apart", recorded)
    with pytest.raises(BuildValidationError, match=r"rq2\.correct"):
        release(XCM.build(config))
    assert len(sent) == (1 if apart else 0)  # the validation ran in a worker process, or in this one
    assert not Path(config.release.root).exists() or not any(Path(config.release.root).rglob("*.parquet"))


# -- what the cards claim -----------------------------------------------------------------------------------------


def test_the_demo_card_opens_with_the_demo_notice_and_the_auto_accepted_review_and_names_every_deviation(
    demo: tuple[Build3XCMConfig, Path],
) -> None:
    _, release_dir = demo
    card = (release_dir / "README.md").read_text().split("---\n", 2)[2]
    opening = [line for line in card.splitlines() if line.strip()][:3]
    assert opening[0].startswith("# 3XCM")
    assert opening[1].startswith("> **This is a pipeline demonstration, not the benchmark**"), opening  # as MixCuBe's
    assert "No human reviewed the near-duplicate decisions" in opening[2]
    # the validator's line is for people, not a Python dict
    checked = next(line for line in card.splitlines() if line.startswith("Every row was checked by the validator"))
    assert "{" not in checked and re.search(r"valid: \d+ image_metadata, \d+ benchmark, .* rows checked", checked)
    deviations = json.loads((release_dir / "manifest.json").read_text())["deviations"]
    for expected in ("deduplicated lexically", "shipped drafts", "local folder", "CLIP-embedding tier was off",
                     "No human reviewed", "own concept only"):  # fmt: skip
        assert any(expected in d for d in deviations), expected
    assert all(f"* {d}" in card for d in deviations)
    assert "Every stage ran on the paper's backend" not in card


def test_the_production_configs_run_as_the_papers_do() -> None:
    """The `release` deployments (the production configs) differ from the papers in nothing a card would list,
    CLIP filter and human review with three annotators included."""
    from flows.mixcube.config import BuildMixCubeConfig
    from flows.mixcube.deviations import mixcube_deviations
    from flows.xcm.deviations import xcm_deviations

    spec = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())
    configs = {
        (d["entrypoint"], d["name"]): d["parameters"]["config"]
        for d in spec["deployments"]
        if "config" in d.get("parameters", {})
    }
    xcm = Build3XCMConfig.model_validate(configs[("flows/xcm/build.py:build_3xcm", "release")])
    mixcube = BuildMixCubeConfig.model_validate(configs[("flows/mixcube/build.py:build_mixcube", "release")])
    assert xcm_deviations(xcm, reviewer="label_studio") == []
    assert mixcube_deviations(mixcube, reviewers=["label_studio"]) == []
    assert mixcube.filters.clip is not None
    # The demos differ, and say so.
    assert len(xcm_deviations(Build3XCMConfig.demo(), reviewer="auto_accept")) == 6
    assert len(mixcube_deviations(BuildMixCubeConfig.demo(), reviewers=["auto_accept"])) == 6


@pytest.mark.slow
def test_reviews_wait_for_people_unless_a_config_says_otherwise(small_demo_config: Build3XCMConfig) -> None:
    """The papers' reviews are human (3XCM App. J, MixCuBe §2): without a completed export a build waits; only the
    demos, which nobody annotates, accept automatically (and their cards say so)."""
    from annotation.backends import LabelStudioFilesReviewConfig
    from annotation.collect import ReviewPending
    from flows.mixcube.config import BuildMixCubeConfig

    assert LabelStudioFilesReviewConfig().when_unreviewed == "wait"
    assert Build3XCMConfig().review.when_unreviewed == "wait"  # type: ignore[union-attr]
    assert Build3XCMConfig.demo().review.when_unreviewed == "auto_accept"  # type: ignore[union-attr]
    assert BuildMixCubeConfig.demo().qa.when_unreviewed == "auto_accept"  # type: ignore[union-attr]
    waiting = Build3XCMConfig.model_validate(
        {**small_demo_config.model_dump(), "review": {"backend": "label_studio_files"}}
    )
    with pytest.raises(ReviewPending):
        build_locally(waiting)
    assert not Path(waiting.release.root).exists()


def test_every_file_reaches_the_disk_before_its_name_and_the_marker_comes_last(
    workspace_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(
        os, "fsync", lambda fd: events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"))) or real_fsync(fd)
    )
    monkeypatch.setattr(os, "replace", lambda a, b: events.append(("replace", str(b))) or real_replace(a, b))
    ws = Workspace(str(workspace_root), "b1")
    table = pa.table({"x": pa.array([1, 2], pa.int64())})
    ws.write_stage("s", "fp", table, table.schema, stats_from_table("s", table), {"side": (table, table.schema)})
    renamed = [path for kind, path in events if kind == "replace"]
    assert Path(renamed[-1]).name == "_SUCCESS"  # the marker is the last name to appear
    for position, (kind, path) in enumerate(events):
        if kind == "replace":  # its bytes were synced under the temporary name just before
            synced = events[position - 1]
            assert synced[0] == "fsync" and Path(synced[1]).name.endswith(Path(path).name) and ".tmp-" in synced[1]
            assert events[position + 1] == ("fsync", str(Path(path).parent))  # and then the rename itself


def test_the_demo_corpus_and_the_contact_sheet_are_written_through_the_workspace_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from curation.contact_sheet import write_contact_sheet
    from data.workspace import Storage
    from demo.corpus import DemoCorpusConfig, generate_demo_corpus

    written: list[str] = []
    real = Storage.write_bytes
    monkeypatch.setattr(Storage, "write_bytes", lambda self, path, data: written.append(path) or real(self, path, data))
    root = tmp_path / "corpus"
    generate_demo_corpus(
        DemoCorpusConfig(countries=["USA", "Japan"], concepts=["train", "food"]), str(root), pack=default_pack()
    )
    on_disk = sorted(str(p) for p in root.rglob("*") if p.is_file())
    assert on_disk and sorted(written) == on_disk
    written.clear()
    sheet = tmp_path / "sheet.png"
    decisions = pa.Table.from_pylist(
        [
            {"image_id": "a", "concept_id": 0, "cluster_id": "a", "cluster_size": 2, "keep": True},
            {"image_id": "b", "concept_id": 0, "cluster_id": "a", "cluster_size": 2, "keep": False,
             "duplicate_of": "a", "method": "exact_bytes", "score": 0.0},
        ],
        schema=IMAGE_DEDUP,
    )  # fmt: skip
    picture = (root / on_disk[0].split(str(root) + "/", 1)[1]).read_bytes()
    assert write_contact_sheet(decisions, lambda image_id: picture, str(sheet)) == str(sheet)
    assert written == [str(sheet)]


@pytest.mark.slow
def test_tables_that_change_after_the_validation_are_not_released(
    small_demo_config: Build3XCMConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The release reads its tables after the validation (in a worker process at scale): if their stages' digests
    then differ from those the validation read, nothing is published."""
    _built(small_demo_config)
    real = xcm_build._table_digests
    calls: list[dict[str, str]] = []

    def digests(ws: Workspace) -> dict[str, str]:
        calls.append(real(ws))
        return calls[-1] if len(calls) == 1 else {**calls[-1], "assembly": "rebuilt meanwhile"}

    monkeypatch.setattr(xcm_build, "_table_digests", digests)
    with pytest.raises(BuildValidationError, match="changed while they were validated"):
        release(XCM.build(small_demo_config))
    assert len(calls) == 2 and calls[0] == calls[1]  # the tables themselves did not change: only the digest check
    assert not Path(small_demo_config.release.root).exists() or not any(
        Path(small_demo_config.release.root).rglob("*.parquet")
    )


@pytest.mark.slow
def test_the_release_validates_once_where_the_validation_stage_vouches_for_its_tables(
    small_demo_config: Build3XCMConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 60: the validation stage's verdict guards the release when every upstream marker is as that stage saw
    it; the release then runs no validation of its own, and states the same verdict, byte for byte. An upstream
    marker rewritten since (here: image_metadata's, with the same files) breaks the chain, and it validates again."""
    ws, files = _built(small_demo_config)
    stage_summary = ws.stats("validation").extra["summary"]
    calls: list[str] = []
    real = xcm_build.validate_published
    monkeypatch.setattr(xcm_build, "validate_published", lambda build: calls.append("validated") or real(build))
    result = release(XCM.build(small_demo_config))
    assert calls == []
    manifest = json.loads((Path(result.path) / "manifest.json").read_text())
    assert manifest["validation"] == {"summary": stage_summary}
    assert _files(result.path) == files  # what the build released with its own validation
    shutil.rmtree(result.path)
    marker = ws.marker("image_metadata")
    assert marker is not None
    marker.inputs = {**marker.inputs, "tags": "another digest"}  # not what assembly recorded of image_metadata
    ws.storage.write_json(f"{ws.stage_dir('image_metadata')}/_SUCCESS", marker.model_dump(mode="json"))
    assert not ws.inputs_are_current("validation")
    release(XCM.build(small_demo_config))
    assert calls == ["validated"]
