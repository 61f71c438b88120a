"""Every kind of folder we write loads the standard ways (issue 29, part 1): each config its card declares with
`datasets.load_dataset` by config name, and every WebDataset tar with the `webdataset` builder given the features
beside the tars. A table with no rows is not declared (datasets cannot load an empty Parquet file), and the card says
so. Folders: a 3XCM and a MixCuBe release, a URL-only release, a takedown patch, a reassembled benchmark, and the
evaluation results of both benchmarks."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml
from typer.testing import CliRunner

from data.publish.format import WEBDATASET_FEATURES
from flows.cli import app
from tests.conftest import SMALL_CONCEPTS, SMALL_COUNTRIES
from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT
KEYS = {"3xcm": "image_id", "mixcube": "sample_id"}
pytestmark = pytest.mark.slow  # every test reads `folders`: three builds, a takedown, a reassembly, two evaluations


def invoke(*args: str) -> None:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def folders(small_releases: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from flows.xcm.build import build_locally
    from flows.xcm.config import Build3XCMConfig

    root = tmp_path_factory.mktemp("loading")
    url_only = Build3XCMConfig.demo(
        workspace_root=str(root / "ws-urls"),
        countries=SMALL_COUNTRIES,
        concepts={"include": SMALL_CONCEPTS},
        demo_corpus={"countries": SMALL_COUNTRIES, "concepts": SMALL_CONCEPTS, "images_per_query": 2},
        release={"root": str(root / "urls"), "version": "0.0.1", "mode": "urls"},
    )
    patched = root / "patched"
    shutil.copytree(small_releases["3xcm"].parent.parent, patched, ignore=shutil.ignore_patterns("mixcube"))
    parent = patched / "3xcm" / "0.0.1"
    image_id = pq.read_table(next((parent / "benchmark").glob("*.parquet")))[
        "semantically_relevant_candidate_image_id"
    ][0].as_py()
    invoke("takedown", str(parent), "--image-id", image_id, "--reason", "asked", "--date", "2026-05-01")
    pool = ROOT / "data" / "authors" / "xcm-bench.csv"
    invoke("reassemble", "--pool", str(pool), "--out", str(root / "reassembled"))
    for name in ("3xcm", "mixcube"):
        invoke("evaluate", name, str(small_releases[name]), "--demo-model", "--out", str(root / f"eval-{name}"))
    return {
        "3xcm": small_releases["3xcm"],
        "mixcube": small_releases["mixcube"],
        "3xcm-urls": Path(build_locally(url_only).release_path),
        "3xcm-patch": patched / "3xcm" / "0.0.2",
        "reassembled": root / "reassembled",
        "eval-3xcm": root / "eval-3xcm",
        "eval-mixcube": root / "eval-mixcube",
    }


def card(folder: Path) -> tuple[dict[str, Any], str]:
    text = (folder / "README.md").read_text(encoding="utf-8")
    _, front, body = text.split("---\n", 2)
    return yaml.safe_load(front), body


def parquet_rows(folder: Path, pattern: str) -> int:
    return sum(pq.read_metadata(path).num_rows for path in sorted(folder.glob(pattern)))


def empty_tables(folder: Path) -> set[str]:
    """Each Parquet table of the folder with no rows, by config name (its folder, or its file's stem)."""
    out = set()
    for path in folder.rglob("*.parquet"):
        if pq.read_metadata(path).num_rows == 0:
            rel = path.relative_to(folder)
            out.add(rel.parts[0] if len(rel.parts) > 1 else path.stem)
    return out


KINDS = ["3xcm", "mixcube", "3xcm-urls", "3xcm-patch", "reassembled", "eval-3xcm", "eval-mixcube"]


@pytest.mark.parametrize("kind", KINDS)
def test_every_declared_config_loads_by_name_and_empty_tables_are_named(folders: dict[str, Path], kind: str) -> None:
    from datasets import load_dataset

    folder = folders[kind]
    meta, body = card(folder)
    declared = {c["config_name"]: c for c in meta["configs"]}
    assert declared, f"{kind}: the card declares no config"
    assert sum(bool(c.get("default")) for c in declared.values()) == 1
    for name, config in declared.items():
        (files,) = config["data_files"]
        rows = load_dataset(str(folder), name, split=files["split"])
        expected = parquet_rows(folder, files["path"])
        assert expected > 0 and rows.num_rows == expected, (kind, name)
    empty = empty_tables(folder)
    assert not empty & set(declared), f"{kind}: an empty table is declared: {empty & set(declared)}"
    for name in empty:
        assert f"`{name}`" in body and "no rows in this release" in body, (kind, name)


def test_an_empty_table_is_among_the_folders(folders: dict[str, Path]) -> None:
    # Otherwise the test above never sees one: the small demo has no unassembled query slot.
    assert any(empty_tables(folder) for folder in folders.values())


@pytest.mark.parametrize("kind", ["3xcm", "mixcube", "3xcm-patch"])
def test_every_tar_loads_with_the_webdataset_builder(folders: dict[str, Path], kind: str) -> None:
    from datasets import Features, load_dataset

    folder = folders[kind]
    benchmark = "mixcube" if kind == "mixcube" else "3xcm"
    key = KEYS[benchmark]
    features = Features.from_dict(json.loads((folder / WEBDATASET_FEATURES).read_text(encoding="utf-8")))
    table = "default" if benchmark == "mixcube" else "image_metadata"
    columns = [f for f in pq.read_schema(next((folder / table).glob("*.parquet"))).names if f != "image"]
    rows = {
        row[key]: row
        for path in sorted((folder / table).glob("*.parquet"))
        for row in pq.read_table(path, columns=columns).to_pylist()
    }
    tars = sorted(folder.glob("images/*.tar"))
    assert tars
    seen = 0
    for tar in tars:
        with tarfile.open(tar) as archive:
            members = sum(1 for m in archive.getmembers() if m.name.endswith(".json"))
        samples = load_dataset("webdataset", data_files=str(tar), features=features, split="train")
        assert samples.num_rows == members
        for sample in samples:
            assert sample["json"] == rows[sample["__key__"]]  # every value typed, nulls kept
            assert sample["jpg"] is not None
        seen += samples.num_rows
    assert seen == len(rows)


def test_the_cards_carry_the_hub_listing_metadata(folders: dict[str, Path]) -> None:
    retrieval = {"text-retrieval", "zero-shot-image-classification"}
    for kind, tasks in (("3xcm", retrieval), ("mixcube", {"visual-question-answering"})):
        meta, _ = card(folders[kind])
        assert tasks <= set(meta["task_categories"])
        assert not {"image-to-text", "text-to-image"} & set(meta["task_categories"])  # the Hub's generation tasks
        assert meta["size_categories"] == ["n<1K"]  # the small demos have fewer than 1,000 images
        assert meta["language"] and all(len(code) == 2 for code in meta["language"])
    three, _ = card(folders["3xcm"])
    codes = set(pq.read_table(next((folders["3xcm"] / "benchmark").glob("*.parquet")))["query_language"].to_pylist())
    assert codes <= set(three["language"]) and three["multilinguality"] == "multilingual"
