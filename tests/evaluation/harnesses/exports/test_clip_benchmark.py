"""`culturebench export --harness clip-benchmark`: the wds layout (always); the export README's command run as written
by clip_benchmark 1.6.2 offline (its venv from `make harnesses`) on a tiny open_clip in open_clip's local-dir layout;
and a perfect concept recogniser scoring 1.0 through clip_benchmark's own zero-shot classification."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import tarfile
from pathlib import Path

import pytest
from PIL import Image

from data.publish.reader import Release
from evaluation.harnesses.exports.clip_benchmark import languages
from evaluation.harnesses.exports.common import run_export
from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT
HARNESS_BIN = ROOT / ".venv-harness-embedding" / "bin"
HARNESS_PYTHON = HARNESS_BIN / "python"
ORACLE = ROOT / "tests" / "support" / "harness_scripts" / "clip_benchmark_oracle.py"


def _needs_harness() -> None:
    if not HARNESS_PYTHON.is_file():
        pytest.skip("the clip_benchmark venv .venv-harness-embedding is missing: run `make harnesses`")


def _harness_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(tmp_path / "hf"), NO_PROXY="127.0.0.1")
    env["PATH"] = f"{HARNESS_BIN}{os.pathsep}{env.get('PATH', '')}"  # `clip_benchmark` as the venv installs it
    return env


# Its tests are `slow` (tests/support/scheduling.py): an export of the small release, out of `make test-fast`.
SLOW_FIXTURES = {"export"}


@pytest.fixture(scope="module")
def export(small_releases: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cb-export") / "export"
    assert run_export(small_releases["3xcm"], "clip-benchmark", out).status == "created"
    return out


def test_layout_counts_and_determinism(export: Path, small_releases: dict[str, Path], tmp_path: Path) -> None:
    release = Release.open(small_releases["3xcm"])
    by_language = languages(release)
    assert by_language
    assert sorted(p.name for p in export.iterdir() if p.is_dir()) == sorted(
        f"3xcm_classification_{lang}" for lang in by_language
    )  # no retrieval sets: they would measure nothing (the module docstring)
    readme = (export / "README.md").read_text()
    for lang, all_rows in by_language.items():
        # a picture under two concepts (the demo plants copies across concepts) has no single class: left out
        concepts_of: dict[str, set[str]] = {}
        digests = _pixel_digests(small_releases["3xcm"])
        for row in all_rows:
            concepts_of.setdefault(digests[row["query_image_id"]], set()).add(row["query_concept"])
        rows = [r for r in all_rows if len(concepts_of[digests[r["query_image_id"]]]) == 1]
        assert (
            f"| {lang} | {len(rows)} | {len({r['query_concept'] for r in rows})} | {len(all_rows) - len(rows)} |"
            in readme
        )
        root = export / f"3xcm_classification_{lang}"
        assert (root / "dataset_type.txt").read_text().strip() == "classification"
        assert (root / "test" / "nshards.txt").read_text().strip() == "1"
        with tarfile.open(root / "test" / "0.tar") as tar:
            members = tar.getmembers()
            assert all(m.mtime == 0 and m.uid == 0 and m.gid == 0 and not m.uname for m in members)
            files = {m.name: tar.extractfile(m).read() for m in members}  # type: ignore[union-attr]  # regular files
        metas = [json.loads(v) for k, v in sorted(files.items()) if k.endswith(".json")]
        assert [m["image_id"] for m in metas] == [r["query_image_id"] for r in rows]
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


def _readme_command(export: Path) -> str:
    block = re.search(r"```bash\n(.*?)```", (export / "README.md").read_text(encoding="utf-8"), flags=re.S)
    assert block, "the export's README has no command"
    return block.group(1)


def _local_dir_model(folder: Path) -> Path:
    """The demo's tiny random open_clip in open_clip's own layout: `open_clip_config.json` (`model_cfg`) and
    `open_clip_pytorch_model.bin`, the folder a `local-dir:` model name points at."""
    from demo.models import TINY_OPEN_CLIP, random_open_clip

    _, weights = random_open_clip(folder / "build")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "open_clip_config.json").write_text(json.dumps({"model_cfg": TINY_OPEN_CLIP, "preprocess_cfg": {}}))
    (folder / "open_clip_pytorch_model.bin").write_bytes(weights.read_bytes())
    return folder


@pytest.mark.harness
def test_the_readme_command_runs_as_written_and_each_language_leaves_its_results(
    export: Path, small_releases: dict[str, Path], tmp_path: Path
) -> None:
    _needs_harness()
    command = _readme_command(export)
    model = _local_dir_model(tmp_path / "tiny-clip")
    out = tmp_path / "results"
    out.mkdir()
    env = _harness_env(tmp_path) | {"EXPORT": str(export), "MODEL": f"local-dir:{model}", "PRETRAINED": "none",
                                    "OUT": str(out)}  # fmt: skip
    proc = subprocess.run(["bash", "-c", command], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    # The README's test of success is the files, not the exit code.
    for lang in languages(Release.open(small_releases["3xcm"])):
        with tarfile.open(export / f"3xcm_classification_{lang}" / "test" / "0.tar") as tar:
            images = sum(name.endswith(".cls") for name in tar.getnames())
        result_file = out / f"classification_{lang}.json"
        assert result_file.is_file(), f"{lang}: no result ({proc.returncode}):\n{proc.stderr[-3000:]}"
        result = json.loads(result_file.read_text())
        assert result["task"] == "zeroshot_classification" and result["dataset"] == f"wds/3xcm_classification_{lang}"
        acc1 = result["metrics"]["acc1"]
        assert 0.0 <= acc1 <= 1.0 and abs(acc1 * images - round(acc1 * images)) < 1e-4  # a share of the images


def _pixel_digests(release_dir: Path) -> dict[str, str]:
    """image_id -> sha256 of its decoded RGB pixels, from the release."""
    table = Release.open(release_dir).table("image_metadata", ["image_id", "image"]).to_pylist()
    out = {}
    for row in table:
        with Image.open(io.BytesIO(row["image"]["bytes"])) as image:
            out[row["image_id"]] = hashlib.sha256(image.convert("RGB").tobytes()).hexdigest()
    return out


def _truth(release_dir: Path, lang: str) -> dict[str, dict[str, str]]:
    """From the release, not the export: each query image's decoded pixels and each query text -> its concept."""
    rows = languages(Release.open(release_dir))[lang]
    digests = _pixel_digests(release_dir)
    pixels = {digests[row["query_image_id"]]: row["query_concept"] for row in rows}
    return {"pixels": pixels, "names": {row["query_text"]: row["query_concept"] for row in rows}}


@pytest.mark.harness
def test_a_perfect_concept_recogniser_scores_one_through_clip_benchmarks_own_metric(
    export: Path, small_releases: dict[str, Path], tmp_path: Path
) -> None:
    _needs_harness()
    for lang in languages(Release.open(small_releases["3xcm"])):
        truth = tmp_path / f"truth-{lang}.json"
        truth.write_text(json.dumps(_truth(small_releases["3xcm"], lang)), encoding="utf-8")
        proc = subprocess.run([str(HARNESS_PYTHON), str(ORACLE), str(export), lang, str(truth)],
                              env=_harness_env(tmp_path), capture_output=True, text=True, timeout=300)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        metrics = json.loads(proc.stdout.strip().splitlines()[-1])
        assert metrics["acc1"] == 1.0 and metrics["mean_per_class_recall"] == 1.0, (lang, metrics)
