"""`croissant.json` and the card's datasheet, for both benchmarks.

Small demo releases are built once per module (3XCM with a human near-duplicate review imported from a completed
Label Studio export, MixCuBe with the auto-accept policy), then:
- mlcroissant's own validator accepts each `croissant.json`, and its loader reads every record set back as the rows
  of the Parquet and CSV files (images decoded from the Parquet `Image` struct's bytes);
- the distribution's sha256 are the files' (a changed file no longer loads);
- the RAI fields carry the build's facts (the manifest's kappa, backends and deviations; the tables' counts);
- the card carries the datasheet's seven sections, and a rebuild writes the same bytes.
The pure functions are tested on their own for what the demos do not reach: several Parquet shards, timestamps.
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import mlcroissant as mlc
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from annotation.collect import ReviewPending
from annotation.label_configs import DIFFERENT, SAME_SCENE
from data.publish import croissant
from data.publish.datasheet import HEADINGS, datasheet_section
from data.publish.format import WEBDATASET_FEATURES
from data.publish.manifest import Provenance
from data.publish.rai import RaiTexts
from data.publish.reader import REFERENCE_DIR
from data.workspace import Workspace
from flows.mixcube.release_facts import mixcube_facts
from tests.conftest import SMALL_CONCEPTS, SMALL_COUNTRIES
from tests.support.review_inputs import completed_export, verdict

RECORD_SETS = {
    "3xcm": {"image_metadata", "benchmark", "benchmark_cd", "unassembled", "xcm_bench"},
    "mixcube": {"default", "food_label"},
}
FIRST = 6  # records compared field by field per record set (every record is counted)


def _xcm_config(root: Path, review: dict[str, Any]):
    from flows.xcm.config import Build3XCMConfig

    return Build3XCMConfig.demo(
        workspace_root=str(root / "ws"),
        countries=SMALL_COUNTRIES,
        concepts={"include": SMALL_CONCEPTS},
        demo_corpus={"countries": SMALL_COUNTRIES, "concepts": SMALL_CONCEPTS, "images_per_query": 2},
        release={"root": str(root / "rel"), "version": "0.0.1"},
        review=review,
    )


def _reviewed_xcm(root: Path) -> Path:
    """A small 3XCM demo whose near-duplicate pairs were reviewed by three people, who disagreed on some."""
    from flows.xcm.build import build_locally

    config = _xcm_config(root, {"backend": "label_studio_files", "when_unreviewed": "wait"})
    with pytest.raises(ReviewPending):
        build_locally(config)
    ws = Workspace(config.workspace_root, config.resolved_build_id())
    tasks = json.loads(Path(ws.file_path("label_studio", "duplicate_review", "tasks.json")).read_text())
    same, different = verdict("duplicate_review", SAME_SCENE), verdict("duplicate_review", DIFFERENT)
    votes = ([same, same, different], [same] * 3, [different] * 3)
    results = {task["data"]["item_key"]: votes[i % 3] for i, task in enumerate(tasks)}
    export = root / "export.json"
    export.write_text(json.dumps(completed_export(tasks, results)))
    reviewed = config.model_copy(update={"review": config.review.model_copy(update={"completed_export": str(export)})})
    return Path(build_locally(reviewed).release_path)


def _mixcube_config(root: Path):
    from flows.mixcube.config import BuildMixCubeConfig

    return BuildMixCubeConfig.demo(
        workspace_root=str(root / "ws"),
        originals={"per_cell": 1, "cultures": ["South Korea", "UK"], "categories": ["Food", "Clothes"]},
        release={"root": str(root / "rel"), "version": "0.0.1"},
        shard_size=4,
    )


# Its tests are `slow` (tests/support/scheduling.py): a 3XCM and a MixCuBe build, out of `make test-fast`.
SLOW_FIXTURES = {"releases"}


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from flows.mixcube.build import build_locally as build_mixcube

    xcm = _reviewed_xcm(tmp_path_factory.mktemp("croissant-3xcm"))
    mixcube = Path(build_mixcube(_mixcube_config(tmp_path_factory.mktemp("croissant-mixcube"))).release_path)
    return {"3xcm": xcm, "mixcube": mixcube}


def _doc(release: Path) -> dict[str, Any]:
    return json.loads((release / croissant.FILE).read_text())


def _manifest(release: Path) -> dict[str, Any]:
    return json.loads((release / "manifest.json").read_text())


def _parquet(release: Path, config: str) -> pa.Table:
    return pa.concat_tables(pq.read_table(p) for p in sorted((release / config).glob("*.parquet")))


@pytest.mark.slow
@pytest.mark.parametrize("benchmark", ["3xcm", "mixcube"])
def test_mlcroissant_validates_the_release(releases: dict[str, Path], benchmark: str) -> None:
    cli = Path(sys.executable).with_name("mlcroissant")
    done = subprocess.run(
        [str(cli), "validate", "--jsonld", str(releases[benchmark] / croissant.FILE)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "error(s)" not in output and "Traceback" not in output, output


def _expected_rows(release: Path, record_set: dict[str, Any]) -> tuple[list[dict[str, Any]], bool]:
    """The rows of a record set's files, read without mlcroissant, and whether they came from a CSV file."""
    source = record_set["field"][0]["source"]
    ref = source.get("fileObject", source.get("fileSet"))["@id"]
    doc = _doc(release)
    entry = next(d for d in doc["distribution"] if d["@id"] == ref)
    if entry["encodingFormat"] == croissant.CSV:
        with (release / entry["contentUrl"]).open(newline="") as handle:
            return list(csv.DictReader(handle)), True
    paths = [release / entry["contentUrl"]] if "contentUrl" in entry else sorted(release.glob(entry["includes"]))
    return pa.concat_tables(pq.read_table(p) for p in paths).to_pylist(), False


def _same(ours: Any, theirs: Any, from_csv: bool) -> bool:
    if isinstance(theirs, bytes):
        theirs = theirs.decode()
    if isinstance(ours, dict) and "bytes" in ours:  # the Parquet image struct: compare decoded pixels
        with Image.open(io.BytesIO(ours["bytes"])) as expected:
            return isinstance(theirs, Image.Image) and expected.tobytes() == theirs.tobytes()
    if from_csv:
        return str(theirs) == ours if ours else theirs is None or theirs != theirs  # an empty cell reads as NaN
    if isinstance(ours, float):
        return theirs == pytest.approx(ours)
    if isinstance(ours, list):
        return list(theirs) == ours
    return ours == theirs


@pytest.mark.parametrize(
    ("benchmark", "name"), [(b, n) for b, names in sorted(RECORD_SETS.items()) for n in sorted(names)]
)
def test_every_record_set_reads_back_as_its_files_rows(releases: dict[str, Path], benchmark: str, name: str) -> None:
    release = releases[benchmark]
    doc = _doc(release)
    assert {r["@id"] for r in doc["recordSet"]} == RECORD_SETS[benchmark]
    record_set = next(r for r in doc["recordSet"] if r["@id"] == name)
    expected, from_csv = _expected_rows(release, record_set)
    columns = {f["name"] for f in record_set["field"]}
    assert not expected or columns == set(expected[0]), "the fields are the file's columns"

    dataset = mlc.Dataset(jsonld=str(release / croissant.FILE))
    records = list(itertools.islice(dataset.records(record_set=name), FIRST))
    assert len(records) == min(FIRST, len(expected))
    for ours, theirs in zip(expected, records, strict=False):
        for column, value in ours.items():
            got = theirs[f"{name}/{column}"]
            assert _same(value, got, from_csv), (name, column, value, got)
    if name not in {"image_metadata", "default"}:  # counting every record decodes every image: only the tables
        assert sum(1 for _ in dataset.records(record_set=name)) == len(expected)
    keys = record_set.get("key")
    if keys and expected:
        key_columns = [k["@id"].split("/", 1)[1] for k in (keys if isinstance(keys, list) else [keys])]
        assert len({tuple(str(r[k]) for k in key_columns) for r in expected}) == len(expected), "keys are unique"
    assert f"{len(expected)} records" in record_set["description"]


@pytest.mark.parametrize("benchmark", ["3xcm", "mixcube"])
def test_the_distribution_names_every_data_file_with_its_sha256(releases: dict[str, Path], benchmark: str) -> None:
    release = releases[benchmark]
    doc, manifest = _doc(release), _manifest(release)
    objects = {d["@id"]: d for d in doc["distribution"] if d["@type"] == "cr:FileObject"}
    on_disk_files = {str(p.relative_to(release)) for p in release.rglob("*") if p.is_file()}
    # The reference pack the release carries (reference/, issue 39) is no record set: the manifest vouches for it.
    reference = {path for path in on_disk_files if path.startswith(f"{REFERENCE_DIR}/")}
    assert reference and reference <= set(manifest["files"])
    data_files = {path for path in on_disk_files - reference if Path(path).suffix in {".parquet", ".csv", ".tar"}}
    data_files.add(WEBDATASET_FEATURES)  # the tars' features, for the `webdataset` builder
    assert set(objects) == data_files
    for path, entry in objects.items():
        on_disk = (release / path).read_bytes()
        assert entry["sha256"] == hashlib.sha256(on_disk).hexdigest() == manifest["files"][path]["sha256"]
        assert entry["contentSize"] == f"{len(on_disk)} B"
    assert croissant.FILE in manifest["files"]  # the manifest vouches for the Croissant file, not the reverse
    if benchmark == "mixcube":
        masks = next(d for d in doc["distribution"] if d["@id"] == "masks")
        assert masks["@type"] == "cr:FileSet" and masks["includes"] == "masks/*.png"
        assert f"({len(list((release / 'masks').glob('*.png')))} files)" in masks["description"]


def test_a_data_file_changed_after_the_release_no_longer_loads(releases: dict[str, Path], tmp_path: Path) -> None:
    copy = tmp_path / "release"
    shutil.copytree(releases["3xcm"], copy)
    part = next((copy / "benchmark").glob("*.parquet"))
    table = pq.read_table(part)
    pq.write_table(table.slice(1), part)  # one triplet fewer: a valid Parquet file with other bytes
    dataset = mlc.Dataset(jsonld=str(copy / croissant.FILE))
    with pytest.raises(Exception, match="Download") as caught:
        list(dataset.records(record_set="benchmark"))
    chain, error = [], caught.value
    while error is not None:
        chain.append(str(error))
        error = error.__cause__ or error.__context__
    assert any("Expected: " in message for message in chain), chain  # mlcroissant's hash mismatch


def _rai_text(doc: dict[str, Any], name: str) -> str:
    value = doc.get(name, "")
    return " ".join(value) if isinstance(value, list) else value


def test_the_3xcm_rai_fields_state_the_build_facts(releases: dict[str, Path]) -> None:
    release = releases["3xcm"]
    doc, manifest = _doc(release), _manifest(release)
    images = _parquet(release, "image_metadata")
    triplets, sextets = _parquet(release, "benchmark"), _parquet(release, "benchmark_cd")
    for name in RaiTexts.property_names():
        if name != "rai:dataCollectionTimeframe":
            assert _rai_text(doc, name), f"{name} is empty"

    review = manifest["review"]
    assert review["reviewer"] == "label_studio_files" and review["agreement"]["fleiss_kappa"] is not None
    analysis = _rai_text(doc, "rai:dataAnnotationAnalysis")
    assert f"Fleiss' kappa {review['agreement']['fleiss_kappa']:.4f}" in analysis
    assert f"{review['tasks']} items, {review['decided']} decided" in analysis
    assert f"{review['agreement']['disagreements']} items with disagreement" in analysis
    assert "Label Studio" in _rai_text(doc, "rai:dataAnnotationPlatform")
    annotators = manifest["config"]["review"]["annotators"]
    assert doc["rai:annotationsPerItem"].startswith(f"{annotators} ")

    assert f"{images.num_rows} images" in doc["description"]
    assert f"{triplets.num_rows} RQ2 triplets and {sextets.num_rows} RQ3 sextets" in doc["description"]
    collection = _rai_text(doc, "rai:dataCollection")
    assert f"Released: {images.num_rows} images from {len(set(images['country'].to_pylist()))} countries" in collection
    for stage in ("search", "images", "translations", "concepts"):
        assert f"`{manifest['backends'][stage]}`" in collection
    assert set(doc["inLanguage"]) == set(images["language_code"].to_pylist()) | {"en"}
    assert all(deviation in _rai_text(doc, "rai:dataLimitations") for deviation in manifest["deviations"])
    # The demo's images carry no retrieval time: the timeframe is said to be unknown, not made up.
    assert not any(images["retrieved_at"].to_pylist())
    assert "rai:dataCollectionTimeframe" not in doc
    assert "timeframe is not recorded" in collection


def test_the_mixcube_rai_fields_state_the_build_facts(releases: dict[str, Path]) -> None:
    release = releases["mixcube"]
    doc, manifest = _doc(release), _manifest(release)
    rows = _parquet(release, "default")
    originals = rows["ethnicity"].to_pylist().count("original")
    placeholders = sum(rows["placeholder"].to_pylist())
    assert f"({rows.num_rows} images)" in doc["description"] and f"{originals} photos" in doc["description"]
    manipulation = doc["rai:dataManipulationProtocol"]
    assert f"{placeholders} of {rows.num_rows - originals} swaps are placeholders" in manipulation
    assert manifest["models"]["masks"] in manipulation
    assert manifest["backends"]["qa"][0] == "auto_accept"
    assert "no human annotations were collected" in _rai_text(doc, "rai:dataAnnotationAnalysis")
    assert doc["rai:annotationsPerItem"].startswith("0")
    assert "None: no human annotated" in _rai_text(doc, "rai:dataAnnotationPlatform")
    assert all(d in _rai_text(doc, "rai:dataLimitations") for d in manifest["deviations"])
    assert "demonstration build" in doc["description"]


def test_a_human_synthesis_qa_round_is_reported_with_its_agreement(releases: dict[str, Path]) -> None:
    release = releases["mixcube"]
    manifest = _manifest(release)
    rows = _parquet(release, "default").drop(["image"])
    agreement = {"tasks_rated": 16, "fleiss_kappa": 0.3125, "unanimous_share": 0.5, "disagreements": 8}
    human = {"reviewer": "label_studio", "tasks": 16, "decided": 15, "undecided": 1, "agreement": agreement}
    stats = [
        {**s, "extra": {**s["extra"], "review": human}} if s["stage"] == "qa_r1" else s for s in manifest["stage_stats"]
    ]
    facts = mixcube_facts("0.0.1", rows, Provenance.model_validate({**manifest, "stage_stats": stats}))
    analysis = " ".join(facts.rai.data_annotation_analysis)
    assert "Synthesis QA round 1 (`label_studio`): 16 items, 15 decided" in analysis
    assert "Fleiss' kappa 0.3125 over 16 fully annotated items" in analysis
    assert facts.rai.data_annotation_platform == ["Label Studio (`label_studio`: a server)."]
    assert facts.rai.annotations_per_item == f"{manifest['config']['qa']['annotators']} per synthesis attempt."


@pytest.mark.parametrize("benchmark", ["3xcm", "mixcube"])
def test_the_card_carries_the_datasheet(releases: dict[str, Path], benchmark: str) -> None:
    release = releases[benchmark]
    card, doc = (release / "README.md").read_text(), _doc(release)
    section = card[card.index("\n## Datasheet\n") :]
    positions = [section.index(f"\n### {heading}\n") for heading in HEADINGS]
    assert positions == sorted(positions) and len(HEADINGS) == 7
    assert doc["rai:dataCollection"] in section
    assert doc["rai:dataReleaseMaintenancePlan"] in section
    assert all(f"`{r['@id']}`" in section for r in doc["recordSet"])
    assert card.startswith("---\n")  # the front matter `datasets` reads is still first


@pytest.mark.slow
def test_a_rebuild_writes_the_same_croissant_and_card(releases: dict[str, Path], tmp_path: Path) -> None:
    """A fresh workspace and release root: no time of "now" and no path reaches either file."""
    from flows.mixcube.build import build_locally

    again = Path(build_locally(_mixcube_config(tmp_path)).release_path)
    first = releases["mixcube"]
    for name in (croissant.FILE, "README.md"):
        assert (again / name).read_bytes() == (first / name).read_bytes(), name
    assert str(tmp_path) not in (again / croissant.FILE).read_text()
    assert build_locally(_mixcube_config(tmp_path)).release_status == "unchanged"


# --- the pure functions, where the demos do not reach ---------------------------------------------------------------


def _jpeg(color: tuple[int, int, int]) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 6), color).save(buffer, format="JPEG")
    return buffer.getvalue()


def test_several_shards_are_one_file_set_and_every_type_reads_back(tmp_path: Path) -> None:
    image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    schema = pa.schema(
        [
            ("id", pa.string()),
            ("n", pa.int32()),
            ("score", pa.float32()),
            ("flag", pa.bool_()),
            ("tags", pa.list_(pa.int32())),
            ("at", pa.timestamp("us", tz="UTC")),
        ]
    )
    rows = [
        {"id": f"r{i}", "n": i, "score": i / 4, "flag": i % 2 == 0, "tags": [i, i + 1], "at": None, "image": None}
        for i in range(5)
    ]
    for i, row in enumerate(rows):
        row["image"] = {"bytes": _jpeg((40 * i, 0, 0)), "path": f"r{i}.jpg"}
    full = schema.append(pa.field("image", image))
    files = {}
    for shard, part in enumerate((rows[:3], rows[3:])):
        rel = f"things/train-{shard:05d}-of-00002.parquet"
        (tmp_path / "things").mkdir(exist_ok=True)
        pq.write_table(pa.Table.from_pylist(part, schema=full), tmp_path / rel)
        files[rel] = hashlib.sha256((tmp_path / rel).read_bytes()).hexdigest()
    spec = croissant.RecordSetSpec(
        "things", "Things.", "things/*.parquet", schema, len(rows), key=("id",), image_column="image"
    )
    facts = croissant.ReleaseFacts(
        name="toy",
        benchmark="toy",
        version="1.0.0",
        description="A toy.",
        motivation="Testing.",
        keywords=("toy",),
        cite_as="toy",
        languages=("en",),
        record_sets=(spec,),
        file_groups=(),
        composition=("5 things.",),
        rai=RaiTexts(data_collection="made up for a test"),
    )
    doc = croissant.croissant_jsonld(facts, files)
    sets = [d for d in doc["distribution"] if d["@type"] == "cr:FileSet"]
    assert [s["includes"] for s in sets] == ["things/*.parquet"]
    assert sorted(d["@id"] for d in doc["distribution"] if d["@type"] == "cr:FileObject") == sorted(files)
    fields = {f["name"]: f for f in doc["recordSet"][0]["field"]}
    assert fields["tags"]["isArray"] and fields["tags"]["dataType"] == "sc:Integer"
    assert [fields[c]["dataType"] for c in ("n", "score", "flag", "at", "image")] == [
        "sc:Integer",
        "sc:Float",
        "sc:Boolean",
        "sc:DateTime",
        "sc:ImageObject",
    ]
    (tmp_path / croissant.FILE).write_bytes(croissant.to_bytes(doc))
    records = list(mlc.Dataset(jsonld=str(tmp_path / croissant.FILE)).records(record_set="things"))
    assert [r["things/id"].decode() for r in records] == [r["id"] for r in rows]
    assert [list(r["things/tags"]) for r in records] == [r["tags"] for r in rows]
    assert [r["things/flag"] for r in records] == [r["flag"] for r in rows]
    assert [r["things/image"].getpixel((0, 0))[0] // 10 for r in records] == [4 * i for i in range(5)]
    assert datasheet_section(facts).count("\n### ") == 7


def test_the_timeframe_comes_from_retrieved_at_or_is_said_to_be_unknown() -> None:
    strings = pa.table({"retrieved_at": ["2025-03-02T10:00:00Z", None, "2025-01-31T23:59:59Z"]})
    interval, note = croissant.collection_timeframe(strings)
    assert interval == "2025-01-31T23:59:59Z/2025-03-02T10:00:00Z"
    assert "1 of 3 rows have no `retrieved_at`" in note
    stamps = pa.table({"retrieved_at": pa.array([0, 86_400_000_000], pa.timestamp("us"))})
    assert croissant.collection_timeframe(stamps)[0] == "1970-01-01T00:00:00Z/1970-01-02T00:00:00Z"
    interval, note = croissant.collection_timeframe(pa.table({"x": [1]}))
    assert interval is None and "not recorded" in note and "no `retrieved_at` column" in note
    interval, note = croissant.collection_timeframe(pa.table({"retrieved_at": pa.array([None], pa.string())}))
    assert interval is None and "empty for every row" in note
