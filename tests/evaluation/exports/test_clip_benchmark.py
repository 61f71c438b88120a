"""`culturebench export --harness clip-benchmark`: the wds layout (always), and clip_benchmark 1.6.2's CLI running
retrieval and zero-shot classification on it offline (its venv from `make harnesses`) with the demo open_clip."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from data.publish.reader import Release
from evaluation.exports.clip_benchmark import languages
from evaluation.exports.common import run_export
from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT
HARNESS_PYTHON = ROOT / ".venv-harness-embedding" / "bin" / "python"


@pytest.fixture(scope="module")
def export(small_releases: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cb-export") / "export"
    assert run_export(small_releases["3xcm"], "clip-benchmark", out).status == "created"
    return out


def test_layout_counts_and_determinism(export: Path, small_releases: dict[str, Path], tmp_path: Path) -> None:
    release = Release.open(small_releases["3xcm"])
    by_language = languages(release)
    assert by_language
    for lang, rows in by_language.items():
        for kind in ("retrieval", "classification"):
            root = export / f"3xcm_{kind}_{lang}"
            assert (root / "dataset_type.txt").read_text().strip() == kind
            assert (root / "test" / "nshards.txt").read_text().strip() == "1"
            with tarfile.open(root / "test" / "0.tar") as tar:
                members = tar.getmembers()
                assert all(m.mtime == 0 and m.uid == 0 and m.gid == 0 and not m.uname for m in members)
                files = {m.name: tar.extractfile(m).read() for m in members}  # type: ignore[union-attr]  # regular files
            metas = [json.loads(v) for k, v in sorted(files.items()) if k.endswith(".json")]
            assert [m["image_id"] for m in metas] == [r["query_image_id"] for r in rows]
            if kind == "retrieval":
                texts = [v.decode() for k, v in sorted(files.items()) if k.endswith(".txt")]
                assert texts == [r["query_text"] for r in rows]
            else:
                names = (root / "classnames.txt").read_text().splitlines()
                classes = [int(v) for k, v in sorted(files.items()) if k.endswith(".cls")]
                assert len(names) == len({r["query_concept"] for r in rows})
                assert [names[c] for c in classes] == [r["query_text"] for r in rows]
                assert (root / "zeroshot_classification_templates.txt").read_text() == "{c}\n"
    assert "not the paper's metric" in (export / "README.md").read_text().replace("\n", " ")
    again = tmp_path / "again"
    run_export(small_releases["3xcm"], "clip-benchmark", again)
    for path in export.rglob("*"):
        if path.is_file():
            assert path.read_bytes() == (again / path.relative_to(export)).read_bytes(), path


@pytest.mark.harness
def test_clip_benchmark_cli_runs(export: Path, small_releases: dict[str, Path], tmp_path: Path) -> None:
    if not HARNESS_PYTHON.is_file():
        pytest.skip("the clip_benchmark venv .venv-harness-embedding is missing: run `make harnesses`")
    from demo.models import random_open_clip

    configs, weights = random_open_clip(tmp_path / "model")
    # The language with the most images (the small release has a few per language; acc5 needs 5 classes).
    lang, rows = max(languages(Release.open(small_releases["3xcm"])).items(), key=lambda item: len(item[1]))
    # The CLI, with the demo architecture registered first (open_clip.add_model_config).
    launcher = (
        "import open_clip, sys; open_clip.add_model_config(sys.argv.pop(1)); "
        "from clip_benchmark.cli import main; sys.argv[0] = 'clip_benchmark'; main()"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(tmp_path / "hf"), NO_PROXY="127.0.0.1")
    for task, kind in (("zeroshot_retrieval", "retrieval"), ("zeroshot_classification", "classification")):
        out = tmp_path / f"{kind}.json"
        proc = subprocess.run(
            [
                str(HARNESS_PYTHON),
                "-c",
                launcher,
                str(configs),
                "eval",
                "--task",
                task,
                "--dataset",
                f"wds/3xcm_{kind}_{lang}",
                "--dataset_root",
                f"{export}/{{dataset}}",
                "--model",
                "tiny-clip-test",
                "--pretrained",
                str(weights),
                "--output",
                str(out),
                "--batch_size",
                "16",
                "--num_workers",
                "0",
                "--recall_k",
                "1",
                "5",
            ],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-4000:]
        result = json.loads(out.read_text())
        assert result["task"] == task and result["dataset"] == f"wds/3xcm_{kind}_{lang}"
        metrics = result["metrics"]
        keys = ["image_retrieval_recall@1", "text_retrieval_recall@1"] if kind == "retrieval" else ["acc1"]
        for key in keys:
            assert 0.0 <= metrics[key] <= 1.0
            assert (
                abs(metrics[key] * len(rows) - round(metrics[key] * len(rows))) < 1e-4
            )  # a share of the images (float32)
    assert sys.version_info >= (3, 11)
