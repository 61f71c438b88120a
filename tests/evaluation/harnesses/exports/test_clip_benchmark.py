"""`culturebench export --harness clip-benchmark`: the wds layout and its smoke split, and the warning for a language
whose top-5 accuracy means nothing (always); the export README's blocks run as written by clip_benchmark 1.6.2
offline (its venv from `make harnesses`): the smoke test on the folder docs/researchers.md makes from the demo's
model, the loop on a tiny open_clip in open_clip's local-dir layout, and the check of their metrics; and a perfect
concept recogniser scoring 1.0 through clip_benchmark's own zero-shot classification."""

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
from evaluation.harnesses.exports import clip_benchmark as cb
from evaluation.harnesses.exports.clip_benchmark import languages
from evaluation.harnesses.exports.common import run_export
from tests.support.demo_checkpoint import demo_clip
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
        # the smoke split: a few of the test split's samples, byte for byte, as many concepts as it can hold
        assert (root / cb.SMOKE_SPLIT / "nshards.txt").read_text().strip() == "1"
        with tarfile.open(root / cb.SMOKE_SPLIT / "0.tar") as tar:
            smoke = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
        assert smoke.items() <= files.items()
        smoke_classes = [int(v) for k, v in sorted(smoke.items()) if k.endswith(".cls")]
        assert len(smoke_classes) == min(cb.SMOKE_IMAGES, len(rows))
        assert len(set(smoke_classes)) == min(cb.SMOKE_IMAGES, len(names))
    assert "not the paper's metric" in (export / "README.md").read_text().replace("\n", " ")
    again = tmp_path / "again"
    run_export(small_releases["3xcm"], "clip-benchmark", again)
    for path in export.rglob("*"):
        if path.is_file():
            assert path.read_bytes() == (again / path.relative_to(export)).read_bytes(), path


def _readme_blocks(export: Path) -> tuple[str, str, str]:
    """The README's blocks: the smoke test, the loop over the languages, the check of the loop's metrics."""
    smoke, run, check = re.findall(r"```bash\n(.*?)```", (export / "README.md").read_text(encoding="utf-8"), flags=re.S)
    return smoke, run, check


def _classes(export: Path, lang: str) -> int:
    return len((export / f"3xcm_classification_{lang}" / "classnames.txt").read_text(encoding="utf-8").splitlines())


def _check_lines(stdout: str) -> dict[str, dict[str, str]]:
    """The README's check's report: language -> its fields (`name=value`, or the note that acc5 is left out), from
    its lines in `stdout` (clip_benchmark's own come before them in the smoke block's)."""
    lines = [line.split("\t") for line in stdout.splitlines()]
    lines = [fields for fields in lines if len(fields) > 1 and fields[1].startswith("acc1=")]
    report: dict[str, dict[str, str]] = {}
    for lang, *fields in lines:
        report[lang] = {key: value for key, _, value in (field.partition("=") for field in fields)}
    return report


def test_a_language_of_few_classes_is_warned_of_in_one_line(export: Path, small_releases: dict[str, Path]) -> None:
    classes = {lang: _classes(export, lang) for lang in languages(Release.open(small_releases["3xcm"]))}
    few = [lang for lang, n in classes.items() if n <= cb.TOP5]
    assert few, "the small release's languages have few concepts"
    warning = cb.few_classes_warning(classes)
    assert warning is not None and "\n" not in warning
    assert all(f"{cb.dataset(lang)} ({classes[lang]})" in warning for lang in few)
    assert "acc5" in warning and "NaN" in warning
    readme = (export / "README.md").read_text(encoding="utf-8")
    assert f"**Warning:** {warning}." in readme
    assert readme.index("**Warning:**") < readme.index("## Run")  # before anything is run
    # at export time: the result's warnings, first in what `culturebench export` prints
    from typer.testing import CliRunner

    from flows.cli import app

    result = run_export(small_releases["3xcm"], "clip-benchmark", export)
    assert result.status == "unchanged" and result.warnings == (warning,)
    printed = CliRunner().invoke(app, ["export", str(small_releases["3xcm"]), "--harness", "clip-benchmark",
                                       "--out", str(export)])  # fmt: skip
    assert printed.exit_code == 0, printed.output
    assert sum(warning in line for line in printed.output.splitlines()) == 1
    # only the languages of `TOP5` classes or fewer; none, no warning
    many = {lang: cb.TOP5 + 1 for lang in classes}
    assert cb.few_classes_warning(many) is None
    mixed = cb.few_classes_warning({**many, "xx": cb.TOP5})
    assert mixed is not None and f"{cb.dataset('xx')} ({cb.TOP5})" in mixed
    assert not any(cb.dataset(lang) in mixed for lang in many)


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
    _, command, check = _readme_blocks(export)
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

    # The README's check: each language's metrics, acc5 only where it measures something; a missing file fails it.
    checked = subprocess.run(["bash", "-c", check], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stderr
    report = _check_lines(checked.stdout)
    langs = list(languages(Release.open(small_releases["3xcm"])))
    assert list(report) == langs
    for lang in langs:
        metrics = json.loads((out / f"classification_{lang}.json").read_text())["metrics"]
        assert float(report[lang]["acc1"]) == metrics["acc1"]
        if _classes(export, lang) > cb.TOP5:
            assert float(report[lang]["acc5"]) == metrics["acc5"]
        else:
            assert "acc5" not in report[lang] and f"acc5 left out ({_classes(export, lang)} classes)" in report[lang]
    (out / f"classification_{langs[-1]}.json").unlink()
    failed = subprocess.run(["bash", "-c", check], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert failed.returncode == 1 and f"no metrics in {out} for {langs[-1]} (" in failed.stderr, failed.stderr
    assert list(_check_lines(failed.stdout)) == langs[:-1]


@pytest.mark.harness
def test_the_readme_smoke_test_runs_as_written_on_the_docs_demo_checkpoint(
    export: Path, small_releases: dict[str, Path], tmp_path: Path
) -> None:
    _needs_harness()
    smoke_block, _, _ = _readme_blocks(export)
    model = demo_clip(tmp_path / "checkout")  # docs/researchers.md's commands, beside the demo's model
    smoke = tmp_path / "smoke"  # not made beforehand: the block makes it
    env = _harness_env(tmp_path) | {"EXPORT": str(export), "MODEL": f"local-dir:{model}", "PRETRAINED": "none",
                                    "SMOKE": str(smoke)}  # fmt: skip
    proc = subprocess.run(["bash", "-c", smoke_block], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    lang = next(iter(languages(Release.open(small_releases["3xcm"]))))  # the README's smoke language: the first
    assert sorted(p.name for p in smoke.iterdir()) == [f"classification_{lang}.json"]
    result = json.loads((smoke / f"classification_{lang}.json").read_text())
    with tarfile.open(export / cb.dataset(lang) / cb.SMOKE_SPLIT / "0.tar") as tar:
        images = sum(name.endswith(".cls") for name in tar.getnames())
    acc1 = result["metrics"]["acc1"]
    assert abs(acc1 * images - round(acc1 * images)) < 1e-4  # a share of the smoke split's images
    report = _check_lines(proc.stdout)
    assert list(report) == [lang] and float(report[lang]["acc1"]) == acc1


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
