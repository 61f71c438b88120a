"""`culturebench export RELEASE --harness vlmevalkit`: MixCuBe as VLMEvalKit's custom VQA TSV. Format-level checks
(deterministic bytes, the released images and App. B.2 prompts round-trip, URL-only releases refused, the release
untouched), then with the real VLMEvalKit (`make harnesses` builds .venv-harness-vlmevalkit): `build_dataset` loads
the TSV from a temp LMUData, and its inference loop, driven by a model that replays the demo VLM's answers, writes
the `<model>_MixCuBe.xlsx` that `evaluate mixcube --predictions` scores exactly as `--demo-model` did."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from data.reference import default_pack
from flows.cli import app
from tests.support.paths import REPO_ROOT

COUNTRY_PROMPTS = default_pack().mixcube().evaluation_prompts
ROOT = REPO_ROOT
HARNESS_PYTHON = ROOT / ".venv-harness-vlmevalkit" / "bin" / "python"


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def tree_digest(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def read_tsv(path: Path) -> list[dict[str, str]]:
    csv.field_size_limit(1 << 30)
    return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"), newline=""), delimiter="\t"))


@pytest.fixture(scope="module")
def exported(small_releases: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    release = small_releases["mixcube"]
    before = tree_digest(release)
    out = tmp_path_factory.mktemp("export") / "vlmevalkit"
    result = invoke("export", str(release), "--harness", "vlmevalkit", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert tree_digest(release) == before  # nothing written into the release
    return out


def test_export_is_deterministic_and_round_trips(
    small_releases: dict[str, Path], exported: Path, tmp_path: Path
) -> None:
    release = small_releases["mixcube"]
    again = tmp_path / "again"
    result = invoke("export", str(release), "--harness", "vlmevalkit", "--out", str(again))
    assert result.exit_code == 0, result.output
    assert tree_digest(again) == tree_digest(exported)
    assert {"MixCuBe.tsv", "README.md", "manifest.json"} <= set(tree_digest(exported))

    files = sorted((release / "default").glob("*.parquet"))
    rows = pq.read_table(files).to_pylist()
    tsv = read_tsv(exported / "MixCuBe.tsv")
    assert len(tsv) == len(rows) > 0
    for position, (line, row) in enumerate(zip(tsv, rows, strict=True)):
        assert line["index"] == str(position)
        assert base64.b64decode(line["image"], validate=True) == row["image"]["bytes"]
        assert line["question"] == COUNTRY_PROMPTS[row["category"]]
        assert line["answer"] == row["country"]
        assert (line["category"], line["l2-category"], line["split"]) == (
            row["ethnicity"],
            row["country"],
            row["category"],
        )
        assert line["sample_id"] == row["sample_id"]
    readme = (exported / "README.md").read_text()
    assert "--data MixCuBe" in readme and "--predictions" in readme
    assert "python -m vlmeval.run --data MixCuBe --model" in result.output.replace("\n", " ")


def test_export_refuses_a_url_only_release(small_releases: dict[str, Path], tmp_path: Path) -> None:
    copy = tmp_path / "release"
    shutil.copytree(small_releases["mixcube"], copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["mode"] = "urls"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    before = tree_digest(copy)
    out = tmp_path / "out"
    result = invoke("export", str(copy), "--harness", "vlmevalkit", "--out", str(out))
    assert result.exit_code == 2, result.output
    assert "culturebench fetch-release" in " ".join(result.output.split())
    assert "Traceback" not in result.output
    assert not out.exists() and tree_digest(copy) == before
    inside = invoke("export", str(small_releases["mixcube"]), "--harness", "vlmevalkit", "--out",
                    str(small_releases["mixcube"] / "export"))  # fmt: skip
    assert inside.exit_code == 2 and not (small_releases["mixcube"] / "export").exists()


# -- the real VLMEvalKit ---------------------------------------------------------------------------------------------
REPLAY = r'''
import json, os, sys
from vlmeval.dataset import build_dataset
from vlmeval.inference import infer_data_job

answers = json.load(open(sys.argv[1]))  # index -> the demo VLM's answer
dataset = build_dataset("MixCuBe")
assert type(dataset).__name__ == "CustomVQADataset", type(dataset)


class Replay:
    """Answers each image as the demo VLM did: the image VLMEvalKit dumped is <LMUData>/images/MixCuBe/<index>.png."""

    is_api = False

    def set_dump_image(self, dump):
        self.dump = dump

    def generate(self, message, dataset=None):
        image = [m["value"] for m in message if m["type"] == "image"]
        text = [m["value"] for m in message if m["type"] == "text"]
        assert len(image) == 1 and len(text) == 1, message
        return answers[os.path.splitext(os.path.basename(image[0]))[0]]


work = sys.argv[2]
os.makedirs(work, exist_ok=True)
infer_data_job(Replay(), work_dir=work, model_name="replay-demo", dataset=dataset)
print(json.dumps({"rows": len(dataset), "questions": sorted(set(dataset.data["question"]))}))
'''


def harness_env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.endswith("_PROXY") and not k.endswith("_proxy")}
    env.update(
        HOME=str(home), LMUData=str(tmp_path / "lmudata"), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1", HF_HOME=str(home / "hf"), NO_PROXY="127.0.0.1", PYTHONNOUSERSITE="1",
        MPLCONFIGDIR=str(home / "mpl"),
    )  # fmt: skip
    return env


@pytest.mark.harness
@pytest.mark.skipif(not HARNESS_PYTHON.exists(), reason="VLMEvalKit's venv is missing: run `make harnesses`")
def test_vlmevalkit_loads_the_export_and_its_prediction_file_scores_as_the_demo_model(
    small_releases: dict[str, Path], exported: Path, tmp_path: Path
) -> None:
    release = small_releases["mixcube"]
    lmu = tmp_path / "lmudata"
    lmu.mkdir()
    shutil.copy(exported / "MixCuBe.tsv", lmu / "MixCuBe.tsv")
    demo = tmp_path / "demo"
    result = invoke("evaluate", "mixcube", str(release), "--demo-model", "--out", str(demo), "--results-root",
                    str(tmp_path))  # fmt: skip
    assert result.exit_code == 0, result.output
    by_id = {r["sample_id"]: r["answer"] or "" for r in pq.read_table(demo / "per_query.parquet").to_pylist()}
    tsv = read_tsv(exported / "MixCuBe.tsv")
    answers = {line["index"]: by_id[line["sample_id"]] for line in tsv}
    (tmp_path / "answers.json").write_text(json.dumps(answers))
    script = tmp_path / "replay.py"
    script.write_text(REPLAY)
    work = tmp_path / "work"
    run = subprocess.run(
        [str(HARNESS_PYTHON), str(script), str(tmp_path / "answers.json"), str(work)],
        cwd=tmp_path, env=harness_env(tmp_path), capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert summary["rows"] == len(tsv)
    assert summary["questions"] == sorted({COUNTRY_PROMPTS[line["split"]] for line in tsv})
    predictions = work / "replay-demo_MixCuBe.xlsx"  # VLMEvalKit's own file, written by its own dump()
    assert predictions.is_file(), sorted(p.name for p in work.rglob("*"))

    out = tmp_path / "scored"
    result = invoke("evaluate", "mixcube", str(release), "--predictions", str(predictions), "--out", str(out))
    assert result.exit_code == 0, result.output
    ours = {r["sample_id"]: r for r in pq.read_table(out / "per_query.parquet").to_pylist()}
    model = pq.read_table(demo / "per_query.parquet").to_pylist()
    assert [r["correct"] for r in model] == [ours[r["sample_id"]]["correct"] for r in model]
    assert [r["answer"] or "" for r in model] == [ours[r["sample_id"]]["answer"] or "" for r in model]
    metrics = json.loads((out / "metrics.json").read_text())
    expected = json.loads((demo / "metrics.json").read_text())
    for key in ("accuracy", "accuracy_by_ethnicity", "accuracy_by_country", "accuracy_by_category", "answered"):
        assert metrics[key] == expected[key], key
    assert metrics["model"]["name"] == "replay-demo"
    card = (out / "README.md").read_text()
    assert "VLMEvalKit" in card and hashlib.sha256(predictions.read_bytes()).hexdigest() in card
    assert sys.executable  # the scorer ran in this venv; VLMEvalKit only in its own


@pytest.mark.parametrize("harness", ["vlmevalkit", "lmms-eval"])
def test_a_release_whose_table_differs_from_its_manifest_is_not_exported(
    small_releases: dict[str, Path], tmp_path: Path, harness: str
) -> None:
    release = tmp_path / "mixcube" / "0.0.1"
    shutil.copytree(small_releases["mixcube"], release)
    part = next((release / "default").glob("*.parquet"))
    pq.write_table(pq.read_table(part).slice(1), part)  # one image fewer: a valid Parquet file, other bytes
    result = invoke("export", str(release), "--harness", harness, "--out", str(tmp_path / "export"))
    assert result.exit_code == 2
    assert "differ from manifest.json" in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "export").exists()
