"""`culturebench export RELEASE --harness vlmevalkit`: MixCuBe as VLMEvalKit's custom VQA TSV. Format-level checks
(deterministic bytes, the released images and App. B.2 prompts round-trip, URL-only releases refused, the release
untouched, the README's blocks are the module's commands), then the README's blocks run as written with bash, with
the real VLMEvalKit (`make harnesses` builds .venv-harness-vlmevalkit) offline against a local OpenAI-compatible
fake server that answers each image as the demo VLM did: VLMEvalKit's own prediction file covers every row, the
server saw the paper's settings, and `evaluate mixcube --predictions` scores it exactly as `--demo-model` did; and
the README's check catches the runs that fail while VLMEvalKit exits 0."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from data.publish.reader import Release
from data.reference import default_pack
from evaluation.harnesses.exports import vlmevalkit as vx
from flows.cli import app
from tests.support.fake_openai import FakeOpenAI
from tests.support.vlmevalkit_run import HARNESS_BIN, ReleaseReplay, block_env, readme_blocks, run_block

COUNTRY_PROMPTS = default_pack().mixcube().evaluation_prompts
MODEL = "fake-vlm"  # the model's name on the fake server, as `$MODEL`
API_KEY = "sk-vlmevalkit-test"

# Its tests are `slow` (tests/support/scheduling.py): an export and a demo evaluation of the small release.
SLOW_FIXTURES = {"exported", "demo_run"}


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


def _needs_harness() -> None:
    if not (HARNESS_BIN / "python").is_file():
        pytest.skip("VLMEvalKit's venv .venv-harness-vlmevalkit is missing: run `make harnesses`")


@pytest.fixture(scope="module")
def exported(small_releases: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    release = small_releases["mixcube"]
    before = tree_digest(release)
    out = tmp_path_factory.mktemp("export") / "vlmevalkit"
    result = invoke("export", str(release), "--harness", "vlmevalkit", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert f"EXPORT={out}  # and BASE_URL, MODEL, WORK" in result.output
    assert result.output.rstrip().endswith(vx.run_command())
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


def test_the_readme_blocks_are_the_commands_and_set_out_their_variables(
    exported: Path, small_releases: dict[str, Path]
) -> None:
    readme = (exported / "README.md").read_text(encoding="utf-8")
    images = sum(1 for line in read_tsv(exported / "MixCuBe.tsv") if line["image"])
    smoke = vx.smoke_images(Release.open(small_releases["mixcube"]), images)
    blocks = [vx.smoke_command(smoke), vx.run_command(), vx.check_command(), vx.score_command()]
    assert readme_blocks(exported) == [f"{block}\n" for block in blocks]  # the smoke test first
    for name, _ in vx.VARIABLES:  # each variable the blocks use is set out, and only those
        assert f"- `{name}`: " in readme and f"${name}" in "".join(blocks)
    assert f"--limit {smoke}" in blocks[0] and "--limit" not in blocks[1]
    for block in blocks[:2]:
        assert "--mode infer" in block and "--max-tokens 120 --temperature 0" in block
    assert "JPEG at quality 75" in readme and "144 of 150" in readme
    images = sum(1 for line in read_tsv(exported / "MixCuBe.tsv") if line["image"])
    assert f"({images} here, matched by `index`)" in readme


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


# -- the README's blocks, run by bash with the real VLMEvalKit --------------------------------------------------------
@pytest.fixture(scope="module")
def demo_run(small_releases: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`evaluate mixcube --demo-model` on the small release: the answers the fake server gives, scored directly."""
    root = tmp_path_factory.mktemp("demo-run")
    out = root / "demo"
    result = invoke("evaluate", "mixcube", str(small_releases["mixcube"]), "--demo-model", "--out", str(out),
                    "--results-root", str(root))  # fmt: skip
    assert result.exit_code == 0, result.output
    return out


def _release_images(release: Path) -> dict[str, bytes]:
    rows = pq.read_table(sorted((release / "default").glob("*.parquet")), columns=["sample_id", "image"]).to_pylist()
    return {row["sample_id"]: row["image"]["bytes"] for row in rows if row["image"] is not None}


def _variables(exported: Path, release: Path, tmp_path: Path, base_url: str, model: str = MODEL) -> dict[str, str]:
    """The README's variables (`vx.VARIABLES`), and the key VLMEvalKit sends."""
    return {"EXPORT": str(exported), "BASE_URL": base_url, "MODEL": model, "WORK": str(tmp_path / "work"),
            "SMOKE": str(tmp_path / "smoke"), "RELEASE": str(release), "OUT": str(tmp_path / "scored"),
            "LMDEPLOY_API_KEY": API_KEY}  # fmt: skip


def _predictions(tmp_path: Path, model: str = MODEL) -> Path:
    """VLMEvalKit's prediction file, where the README says it is."""
    return tmp_path / "work" / model / f"{model}_MixCuBe.tsv"


@pytest.mark.harness
def test_the_readme_runs_as_written_and_scores_as_the_same_answers_asked_directly(
    small_releases: dict[str, Path], exported: Path, demo_run: Path, tmp_path: Path
) -> None:
    _needs_harness()
    release = small_releases["mixcube"]
    model_rows = pq.read_table(demo_run / "per_query.parquet").to_pylist()
    answers = {row["sample_id"]: row["answer"] or "" for row in model_rows}
    images = _release_images(release)
    smoke_block, run, check, score = readme_blocks(exported)

    # First the smoke test, in its own folder: the TSV's first rows asked, once each, and its own check passes.
    tsv = read_tsv(exported / "MixCuBe.tsv")
    limit = vx.smoke_images(Release.open(release), len(tsv))
    first = [line["sample_id"] for line in tsv[:limit]]
    replay = ReleaseReplay(images, answers)
    with FakeOpenAI(replay) as fake:
        variables = _variables(exported, release, tmp_path, fake.base_url)
        smoked = run_block(smoke_block, block_env(tmp_path, variables, harness=True), tmp_path)
    assert smoked.returncode == 0, smoked.stderr[-4000:]
    assert smoked.stdout.strip().splitlines()[-1] == f"VLMEvalKit answered all {limit} images (--limit {limit})"
    assert replay.asked == dict.fromkeys(first, 1) and not replay.unmatched, (replay.asked, replay.unmatched)
    written = read_tsv(tmp_path / "smoke" / MODEL / f"{MODEL}_MixCuBe.tsv")
    assert [row["sample_id"] for row in written] == first
    assert [row["prediction"] for row in written] == [answers[sample_id] for sample_id in first]
    assert not (tmp_path / "work").exists()  # the full run's folder untouched

    replay = ReleaseReplay(images, answers)
    with FakeOpenAI(replay) as fake:
        variables = _variables(exported, release, tmp_path, fake.base_url)
        ran = run_block(run, block_env(tmp_path, variables, harness=True), tmp_path)
    output = f"exit {ran.returncode}\n{ran.stderr[-4000:]}"

    # VLMEvalKit's own prediction file, not its exit code: a row for every TSV row that has an image, each with the
    # answer the server gave for that row's image
    predictions = _predictions(tmp_path)
    assert predictions.is_file(), output
    written = read_tsv(predictions)
    assert [row["index"] for row in written] == [line["index"] for line in tsv if line["image"]], output
    assert [row["sample_id"] for row in written] == [line["sample_id"] for line in tsv if line["image"]]
    assert [row["prediction"] for row in written] == [answers[row["sample_id"]] for row in written]

    # what the server saw: each image once, as JPEG re-encoded (never the released bytes), with the paper's settings
    assert not replay.unmatched and replay.asked == dict.fromkeys(images, 1), (replay.unmatched, replay.asked)
    assert replay.byte_identical == 0
    assert {(r.path, r.model, r.api_key) for r in fake.requests} == {("/v1/chat/completions", MODEL, API_KEY)}
    assert {(r.body["max_tokens"], r.body["temperature"]) for r in fake.requests} == {(120, 0)}
    assert {r.images[0][0] for r in fake.requests} == {"image/jpeg"}
    assert {r.prompt for r in fake.requests} == {COUNTRY_PROMPTS[line["split"]] for line in tsv}

    checked = run_block(check, block_env(tmp_path, variables, harness=True), tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.strip() == f"VLMEvalKit answered all {len(images)} images"

    scored = run_block(score, block_env(tmp_path, variables, harness=False), tmp_path)
    assert scored.returncode == 0, scored.stderr[-3000:]
    out = tmp_path / "scored"
    ours = {row["sample_id"]: row for row in pq.read_table(out / "per_query.parquet").to_pylist()}
    assert [(r["answer"] or "", r["correct"]) for r in model_rows] == [
        (ours[r["sample_id"]]["answer"] or "", ours[r["sample_id"]]["correct"]) for r in model_rows
    ]
    metrics = json.loads((out / "metrics.json").read_text())
    expected = json.loads((demo_run / "metrics.json").read_text())
    for key in ("accuracy", "accuracy_by_ethnicity", "accuracy_by_country", "accuracy_by_category", "answered"):
        assert metrics[key] == expected[key], key
    assert metrics["model"]["name"] == MODEL
    card = (out / "README.md").read_text()
    assert "VLMEvalKit" in card and hashlib.sha256(predictions.read_bytes()).hexdigest() in card


@pytest.mark.harness
def test_the_readme_check_catches_the_runs_that_fail_while_vlmevalkit_exits_0(
    small_releases: dict[str, Path], exported: Path, tmp_path: Path
) -> None:
    _needs_harness()
    release = small_releases["mixcube"]
    images = _release_images(release)
    answers = dict.fromkeys(images, "South Korea")
    _, run, check, _ = readme_blocks(exported)
    tsv = read_tsv(exported / "MixCuBe.tsv")
    index = {line["sample_id"]: line["index"] for line in tsv}

    # a model name with a `/`: VLMEvalKit asks nothing, writes no prediction file, and exits 0
    with FakeOpenAI(ReleaseReplay(images, answers)) as fake:
        slashed = block_env(tmp_path, _variables(exported, release, tmp_path, fake.base_url, "org/vlm"), harness=True)
        assert run_block(run, slashed, tmp_path).returncode == 0
        assert not fake.requests and not _predictions(tmp_path, "org/vlm").exists()
    checked = run_block(check, slashed, tmp_path)
    assert checked.returncode == 1 and "VLMEvalKit failed: it wrote no " in checked.stderr, checked.stderr

    # the server fails one image every time: VLMEvalKit writes its failure string for that row, and exits 0
    broken = sorted(images)[0]
    replay = ReleaseReplay(images, answers, failing={broken})
    with FakeOpenAI(replay) as fake:
        env = block_env(tmp_path, _variables(exported, release, tmp_path, fake.base_url), harness=True)
        ran = run_block(run, env, tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert replay.asked[broken] == 6  # `--retry 6`, as the README says
    written = {row["sample_id"]: row["prediction"] for row in read_tsv(_predictions(tmp_path))}
    assert set(written) == set(images) and written[broken] == "Failed to obtain answer via API."
    checked = run_block(check, env, tmp_path)
    assert checked.returncode == 1, checked.stdout
    assert f"of {len(images)} images, 0 have no answer and 1 'Failed to obtain answer ...'" in checked.stderr
    assert f"(index {index[broken]}...)" in checked.stderr

    # run again into the same WORK with the server healthy: only that row is asked, and the check passes
    replay = ReleaseReplay(images, answers)
    with FakeOpenAI(replay) as fake:
        env = block_env(tmp_path, _variables(exported, release, tmp_path, fake.base_url), harness=True)
        ran = run_block(run, env, tmp_path)
        assert replay.asked == {broken: 1}, (replay.asked, ran.stderr[-3000:])
    checked = run_block(check, env, tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert {row["sample_id"]: row["prediction"] for row in read_tsv(_predictions(tmp_path))} == answers


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
