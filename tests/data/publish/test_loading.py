"""Every kind of folder we write loads the standard ways (issue 29, part 1): each config its card declares with
`datasets.load_dataset` by config name, and every WebDataset tar with the `webdataset` builder given the features
beside the tars. A table with no rows is not declared (datasets cannot load an empty Parquet file), and the card says
so. Folders: a 3XCM and a MixCuBe release, a URL-only release, a takedown patch, a reassembled benchmark, and the
evaluation results of both benchmarks."""

from __future__ import annotations

import json
import os
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
def test_every_tar_loads_with_the_bare_webdataset_builder(folders: dict[str, Path], kind: str) -> None:
    """`load_dataset("webdataset", data_files=...)` with no `features=`, the first thing a user tries: each sample's
    JSON is its row's never-null columns (the table schema's), exactly, and the rest join by the key."""
    from datasets import Features, load_dataset

    from data.schemas import IMAGE_METADATA, MIXCUBE_ROWS

    folder = folders[kind]
    benchmark = "mixcube" if kind == "mixcube" else "3xcm"
    key = KEYS[benchmark]
    schema = MIXCUBE_ROWS if benchmark == "mixcube" else IMAGE_METADATA
    never_null = {f.name for f in schema if not f.nullable}
    table = "default" if benchmark == "mixcube" else "image_metadata"
    columns = [f for f in pq.read_schema(next((folder / table).glob("*.parquet"))).names if f != "image"]
    rows = {
        row[key]: row
        for path in sorted((folder / table).glob("*.parquet"))
        for row in pq.read_table(path, columns=columns).to_pylist()
    }
    assert any(v is None for row in rows.values() for v in row.values())  # nullable columns the tars leave out
    tars = sorted(folder.glob("images/*.tar"))
    assert tars
    with_images = 0
    for tar in tars:
        with tarfile.open(tar) as archive:
            with_images += sum(1 for m in archive.getmembers() if m.name.endswith(".json"))
    samples = load_dataset("webdataset", data_files=str(folder / "images" / "*.tar"), split="train")
    assert samples.num_rows == with_images == len(rows)
    for sample in samples:
        row = rows[sample["__key__"]]
        assert sample["json"] == {name: row[name] for name in never_null & set(columns)}  # no null blurred into ""
        assert sample["jpg"] is not None
    # the features beside the tars give the same rows, typed as the tables type them
    features = Features.from_dict(json.loads((folder / WEBDATASET_FEATURES).read_text(encoding="utf-8")))
    typed = load_dataset("webdataset", data_files=str(folder / "images" / "*.tar"), features=features, split="train")
    assert [s["json"] for s in typed] == [s["json"] for s in samples]


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


def test_the_documented_load_keys_the_cache_by_the_manifest(folders: dict[str, Path], tmp_path: Path) -> None:
    """Two releases in folders of the same name share one `datasets` cache entry when loaded bare (the second gets
    the first one's rows); the README's `load`, keyed by the manifest's sha256, loads each one's own rows."""
    from datasets import load_dataset

    from tests.support.documented_commands import DOCUMENTS, python_snippets

    readme = next(s for s in python_snippets() if s.document == "README.md" and "def load(" in s.code)
    definitions: dict[str, Any] = {}
    exec(readme.code.split("\n\n\ntriplets")[0], definitions)  # the imports and `load`, not the demo calls
    assert DOCUMENTS[0].name == "README.md"
    first, second = tmp_path / "a" / "0.1.0-demo", tmp_path / "b" / "0.1.0-demo"
    shutil.copytree(folders["3xcm"], first)
    shutil.copytree(folders["3xcm"], second)
    # the second: the same card, fewer rows, another manifest (as a rebuilt demo with other data would have)
    (table,) = sorted((second / "image_metadata").glob("*.parquet"))
    pq.write_table(pq.read_table(table).slice(0, 5), table)
    (second / "manifest.json").write_text((second / "manifest.json").read_text() + "\n")
    rows = [parquet_rows(folder, "image_metadata/*.parquet") for folder in (first, second)]
    assert rows[0] != rows[1]
    cache = str(tmp_path / "cache")
    bare = [load_dataset(str(f), "image_metadata", split="train", cache_dir=cache).num_rows for f in (first, second)]
    assert bare == [rows[0], rows[0]]  # the trap: the second folder's load returns the first one's rows
    os.environ["HF_DATASETS_CACHE"] = cache
    try:
        keyed = [definitions["load"](str(f), "image_metadata").num_rows for f in (first, second)]
    finally:
        del os.environ["HF_DATASETS_CACHE"]
    assert keyed == rows


@pytest.mark.parametrize("kind", ["3xcm", "mixcube", "3xcm-patch"])
def test_the_cards_python_runs_as_written_on_its_folder(folders: dict[str, Path], kind: str, tmp_path: Path) -> None:
    """Each ```python block of a release card, with `<this folder>` the release's path (its only placeholder)."""
    import subprocess
    import sys

    from tests.support.documented_commands import bash_blocks

    folder = folders[kind]
    blocks = bash_blocks((folder / "README.md").read_text(encoding="utf-8"), "python")
    assert blocks, f"{kind}: the card gives no Python"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    for block in blocks:
        code = "\n".join(line for _, line in block).replace("<this folder>", folder.as_posix())
        assert "<" not in code.replace("<=", ""), code  # no other placeholder left
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{kind}, line {block[0][0]}: {done.stderr[-2000:]}"
