"""Vectors that name the model that made them: the mteb export's runner (`run_mteb.py --save-vectors`) writes its
model's name and revision into both files' Parquet metadata (`culturebench.model`), and `culturebench evaluate 3xcm
--model-backend embeddings` names that model in the result (`model.name`, `model.vectors_from`), under a model id
that says so; files without the metadata keep the identity they always had. The metadata is untrusted: a bad value
is one line naming the file and the key."""

from __future__ import annotations

import hashlib
import json
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data.text_safety import markdown_text
from evaluation.harnesses.exports import mteb_runner
from evaluation.models.encoders import MODEL_METADATA_KEY
from tests.support.cli import invoke, one_line

KEY = MODEL_METADATA_KEY.encode()


def release_keys(release: Path) -> tuple[list[str], list[str]]:
    """The release's image ids and its query texts (RQ2's and RQ3's)."""
    images = pq.read_table(sorted((release / "image_metadata").glob("*.parquet")), columns=["image_id"])
    texts: set[str] = set()
    for config in ("benchmark", "benchmark_cd"):
        texts |= set(pq.read_table(sorted((release / config).glob("*.parquet")))["query_text"].to_pylist())
    return images["image_id"].to_pylist(), sorted(texts)


def vector(key: str, dim: int = 8) -> list[float]:
    """A fixed vector per key, never zero."""
    seed = int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "little")
    return (np.random.default_rng(seed).normal(size=dim) + 0.1).astype(np.float32).tolist()


class FakeMtebModel:
    """What `save_vectors` asks of the run's model: its vectors and mteb's `ModelMeta` (name, revision)."""

    def __init__(self, name: str, revision: str | None) -> None:
        self.mteb_model_meta = types.SimpleNamespace(name=name, revision=revision)

    def image_vectors(self, images: list[str]) -> list[list[float]]:
        return [vector(image) for image in images]  # the fake corpus's "image" is the image id

    def text_vectors(self, texts: list[str]) -> list[list[float]]:
        return [vector(text) for text in texts]


class FakeCorpus:
    """`datasets.load_dataset("parquet", ...)` of data/corpus.parquet, as `save_vectors` slices it."""

    def __init__(self, ids: list[str]) -> None:
        self.ids = ids

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, rows: slice) -> dict[str, list[str]]:
        return {"id": self.ids[rows], "image": self.ids[rows]}


@pytest.fixture
def saved(small_releases: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The runner's `save_vectors` on an export-shaped data folder of the small 3XCM release, with a fake model
    (mteb, torch and the images are not needed to write the files)."""
    ids, texts = release_keys(small_releases["3xcm"])
    data = tmp_path / "export-data"
    data.mkdir()
    pq.write_table(pa.table({"text": texts}), data / "texts.parquet")
    monkeypatch.setattr(mteb_runner, "DATA", data)
    corpus = types.ModuleType("datasets")
    corpus.load_dataset = lambda *args, **kwargs: FakeCorpus(ids)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "datasets", corpus)
    model = FakeMtebModel("local/open_clip-tiny-clip", "0123456789ab")
    folder = tmp_path / "vectors"
    mteb_runner.save_vectors(model, folder, batch_size=3)
    return {
        "release": small_releases["3xcm"],
        "images": folder / mteb_runner.IMAGES_FILE,
        "texts": folder / mteb_runner.TEXTS_FILE,
        "record": mteb_runner.model_record(model),
    }


def evaluate(release: Path, images: Path, texts: Path, out: Path, *extra: str) -> Any:
    return invoke(
        "evaluate", "3xcm", str(release), "--model-backend", "embeddings", "--image-embeddings", str(images),
        "--text-embeddings", str(texts), "--bootstrap-resamples", "0", "--out", str(out), *extra,
    )  # fmt: skip


def rewrite(path: Path, target: Path, metadata: dict[bytes, bytes] | None) -> Path:
    """`path`'s table at `target` with `metadata` as its schema metadata (None: none)."""
    pq.write_table(pq.read_table(path).replace_schema_metadata(metadata), target)
    return target


def test_the_runner_names_its_model_in_both_files_and_no_machine_path(saved: dict[str, Any]) -> None:
    for file in (saved["images"], saved["texts"]):
        metadata = pq.read_schema(file).metadata
        assert json.loads(metadata[KEY]) == saved["record"]
    assert saved["record"]["name"] == "local/open_clip-tiny-clip" and saved["record"]["harness"] == "mteb"
    assert mteb_runner.MODEL_METADATA_KEY == MODEL_METADATA_KEY  # the runner imports no culturebench: one key


def test_scored_vectors_name_the_model_that_made_them(saved: dict[str, Any], tmp_path: Path) -> None:
    result = evaluate(saved["release"], saved["images"], saved["texts"], tmp_path / "carried")
    assert result.exit_code == 0, result.output
    model = json.loads((tmp_path / "carried" / "metrics.json").read_text())["model"]
    record = saved["record"]
    assert model["backend"] == "embeddings" and model["name"] == record["name"]
    assert model["vectors_from"] == record
    # the id says which model, and that these are vectors scored from files (never our open_clip backend's folder)
    assert model["model_id"].startswith("embeddings--") and "open_clip-tiny-clip" in model["model_id"]
    assert json.loads(result.output.splitlines()[-1])["model_id"] == model["model_id"]

    # The same vectors without the metadata: the identity they always had (the image file's stem, no vectors_from).
    images = rewrite(saved["images"], tmp_path / "IMG.parquet", None)
    texts = rewrite(saved["texts"], tmp_path / "TXT.parquet", None)
    plain = evaluate(saved["release"], images, texts, tmp_path / "plain")
    assert plain.exit_code == 0, plain.output
    old = json.loads((tmp_path / "plain" / "metrics.json").read_text())["model"]
    assert old["name"] == "IMG" and "vectors_from" not in old and old["model_id"].startswith("embeddings--IMG--")
    assert set(old) == {"backend", "model_id", "name", "weights_sha256", "device", "precision"}
    # and the numbers are the same vectors' numbers
    carried = pq.read_table(tmp_path / "carried" / "per_query.parquet")
    assert carried.equals(pq.read_table(tmp_path / "plain" / "per_query.parquet"))

    # A config's own `name` still names the model id; the carried model is still said.
    config = tmp_path / "named.json"
    config.write_text(json.dumps({"model": {"backend": "embeddings", "name": "my-run"}}))
    named = evaluate(saved["release"], saved["images"], saved["texts"], tmp_path / "named", "--config", str(config))
    assert named.exit_code == 0, named.output
    model = json.loads((tmp_path / "named" / "metrics.json").read_text())["model"]
    assert model["model_id"] == "embeddings--my-run" and model["vectors_from"] == record


def _deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


@pytest.mark.parametrize(
    ("case", "raw", "needle"),
    [
        ("oversized", json.dumps({"name": "m" * 5000}).encode(), "bytes, more than"),
        ("not-utf8", b'{"name": "\xff\xfe"}', "not UTF-8"),
        ("not-json", b"{name: m}", "not JSON"),
        ("too-deep", _deep(2000), "not JSON"),
        ("a-list", b'["m"]', "must be a JSON object"),
        ("no-name", b'{"revision": "r"}', "field 'name' must be text"),
        ("name-a-number", b'{"name": 3}', "field 'name' must be text"),
        ("name-two-lines", json.dumps({"name": "a\nb"}).encode(), "not printable"),
        ("name-surrogate", b'{"name": "a\\ud800"}', "not printable"),
        ("name-too-long", json.dumps({"name": "m" * 201}).encode(), "more than 200"),
        ("revision-odd", b'{"name": "m", "revision": ["r"]}', "field 'revision' must be text"),
    ],
)
def test_bad_metadata_is_one_line_naming_the_file_and_key(
    saved: dict[str, Any], tmp_path: Path, case: str, raw: bytes, needle: str
) -> None:
    images = rewrite(saved["images"], tmp_path / f"{case}.parquet", {KEY: raw})
    result = evaluate(saved["release"], images, saved["texts"], tmp_path / "out")
    assert result.exit_code == 2, result.output
    line = one_line(result.output)
    assert needle in line and MODEL_METADATA_KEY in line and images.name in line and "image_embeddings" in line
    assert not (tmp_path / "out").exists()


def test_two_files_naming_two_models_are_refused(saved: dict[str, Any], tmp_path: Path) -> None:
    other = json.dumps({**saved["record"], "name": "local/another-model"}).encode()
    texts = rewrite(saved["texts"], tmp_path / "TXT.parquet", {KEY: other})
    result = evaluate(saved["release"], saved["images"], texts, tmp_path / "out")
    assert result.exit_code == 2 and "name two models" in one_line(result.output), result.output
    # one file naming its model, the other silent: the model is the one named
    silent = rewrite(saved["texts"], tmp_path / "silent.parquet", None)
    result = evaluate(saved["release"], saved["images"], silent, tmp_path / "one")
    assert result.exit_code == 0, result.output
    model = json.loads((tmp_path / "one" / "metrics.json").read_text())["model"]
    assert model["vectors_from"] == saved["record"]


@pytest.mark.harness
def test_a_real_mteb_run_saves_vectors_that_name_its_model(small_releases: dict[str, Path], tmp_path: Path) -> None:
    """The export README's run, as written, in mteb's environment (a tiny Hugging Face CLIP): the saved vectors name
    the model mteb's results name, and the evaluation of them says so."""
    from evaluation.harnesses.exports.common import run_export
    from tests.evaluation.harnesses.exports.test_mteb import _needs_harness, _results, _run_readme
    from tests.support.tiny_text_image_models import build_tiny_hf_clip

    _needs_harness()
    export = tmp_path / "export"
    assert run_export(small_releases["3xcm"], "mteb", export).status == "created"
    model = build_tiny_hf_clip(tmp_path / "hf-clip", seed=5)
    out, proc = _run_readme(export, tmp_path, f"hf-clip:{model}")
    folder, _ = _results(out, proc)  # OUT/results/<model>/<revision>
    meta = json.loads((folder / "model_meta.json").read_text(encoding="utf-8"))
    record = json.loads(pq.read_schema(out / "vectors" / "IMG.parquet").metadata[KEY])
    assert record == {"name": meta["name"], "revision": meta["revision"], "harness": "mteb"}
    assert str(tmp_path) not in json.dumps(record)  # no path of the machine that ran it
    vectors = out / "vectors"
    result = evaluate(small_releases["3xcm"], vectors / "IMG.parquet", vectors / "TXT.parquet", tmp_path / "r")
    assert result.exit_code == 0, result.output
    scored = json.loads((tmp_path / "r" / "metrics.json").read_text(encoding="utf-8"))["model"]
    assert scored["name"] == meta["name"] and scored["vectors_from"] == record


def test_the_card_says_the_display_name_and_the_model_the_vectors_came_from(
    saved: dict[str, Any], tmp_path: Path
) -> None:
    result = evaluate(saved["release"], saved["images"], saved["texts"], tmp_path / "r", "--name", "Tiny CLIP")
    assert result.exit_code == 0, result.output
    card = (tmp_path / "r" / "README.md").read_text()
    record = saved["record"]
    (display,) = [line for line in card.splitlines() if line.startswith("| display name")]
    (carried,) = [line for line in card.splitlines() if line.startswith("| vectors from")]
    assert "Tiny CLIP" in display
    assert markdown_text(record["name"]) in carried and f"by {record['harness']}" in carried  # as literal text
    # vectors without the metadata, no --name: neither row
    images = rewrite(saved["images"], tmp_path / "IMG.parquet", None)
    texts = rewrite(saved["texts"], tmp_path / "TXT.parquet", None)
    plain = evaluate(saved["release"], images, texts, tmp_path / "plain")
    assert plain.exit_code == 0, plain.output
    lines = (tmp_path / "plain" / "README.md").read_text().splitlines()
    assert not [line for line in lines if line.startswith(("| display name", "| vectors from"))]
