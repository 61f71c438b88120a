"""`culturebench export RELEASE --harness lmms-eval` (issues 29, 42): the MixCuBe task folder, its format (layout,
same bytes, the YAML, a self-contained utils.py whose scoring and aggregations agree with `evaluation.mixcube.task`),
and real lmms-eval 0.7.3 runs of the export README's own command, as written, offline, in .venv-harness-lmms-eval
(`make harnesses`): with a tiny random llava_hf checkpoint in a folder, and with a model answering from a map, whose
logged verdicts and accuracies equal ours on the same answers; the README's check catching a run that failed (exit
0); and two releases in folders of one name each loading its own rows through the task (the datasets cache trap)."""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import itertools
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml

from data.publish.reader import Release
from data.reference import default_pack
from data.workspace import sha256_bytes
from evaluation.harnesses.exports import lmms_eval as lx
from evaluation.harnesses.exports.common import ExportError, run_export
from evaluation.mixcube import task as mx
from evaluation.models.vlm import Answer, VlmIdentity
from tests.evaluation.mixcube.test_answer_match import CASES, CONTAINED
from tests.support.lmms_eval_run import (
    HARNESS_PYTHON,
    SKIP_REASON,
    TASK_ROWS,
    harness_env,
    readme_blocks,
    readme_env,
    run_block,
)
from tests.support.release_tamper import rehash_manifest
from tests.support.tiny_vlm import build_tiny_vlm

STDLIB_IMPORTS = {"__future__", "bisect", "re", "unicodedata", "collections.abc", "functools", "typing"}
# Its format tests are `slow` (tests/support/scheduling.py): an export of the small release, out of `make test-fast`.
SLOW_FIXTURES = {"exported"}


# -- helpers -------------------------------------------------------------------------------------------------------
class _TaskLoader(yaml.SafeLoader):
    """Reads lmms-eval's `!function module.name` tag as the string it names."""


_TaskLoader.add_constructor("!function", lambda loader, node: ("!function", loader.construct_scalar(node)))


def _load_yaml(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.load(path.read_text(encoding="utf-8"), Loader=_TaskLoader)
    return loaded


MIX = default_pack().mixcube()


def _import_utils(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"exported_lmms_utils_{sha256_bytes(path.read_bytes())[:12]}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tree(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _release_rows(release: Path) -> pa.Table:
    return Release.open(release).table("default")


#: Answers a model might give: right and wrong names, acronyms in and out of place, other scripts and spacing.
ANSWER_TEMPLATES = (
    "This is {term}.",
    "{lower}",
    "{upper}!",
    "Probably {term}ish or {term}'s food",
    "x{term}",
    "({term})",
    "_{term}_",
    "1{term}2",
    "It is from {spaced}.",
)
FIXED_ANSWERS = (
    "",
    "I cannot tell.",
    "us",
    "Let us see: USB cable",
    "AUS or NZ",
    "the U.S.",
    "US",
    "USA",
    "The UK or the US",
    "uk",
    "Great Britain",
    "Scottish kilt",
    "South\nKorea",
    "한국 음식",
    "Bu\u0301rma",
    "Azərbaycan",
    "KOREAN bbq",
    "Hawaiian shirt",
    "Americana",
    "Myanmar123",
    "Japanese and Korean fusion",
    "England, maybe Wales",
    "Irishman",
    # the answer rule's table (tests/evaluation/mixcube/test_answer_match.py): whole names, other countries' names,
    # negation
    *(answer for answer, *_ in CASES),
    *(answer for answer, *_ in CONTAINED),
)


def _candidate_answers() -> list[str]:
    terms = sorted({t for c in MIX.cultures for t in mx.ground_truth_terms(c.adjective, MIX, ours=True)})
    answers = list(FIXED_ANSWERS)
    for term, template in itertools.product(terms, ANSWER_TEMPLATES):
        answers.append(
            template.format(term=term, lower=term.lower(), upper=term.upper(), spaced="  ".join(term.split()))
        )
    return answers


def _candidate_countries() -> list[str]:
    countries = ["Atlantis", "", "  ", "GB", "gb", "US", "us", "U.K.", "Korea", "Guinea", "North Korea"]
    for culture in MIX.cultures:
        for value in (culture.adjective, culture.name, culture.iso2):
            countries += [value, value.lower(), value.upper(), f"  {value} ", "  ".join(value.split())]
    return list(dict.fromkeys(countries))


class _MapVlm:
    """Answers each image (by its bytes) from a map, as the lmms-eval model answers it by sample id."""

    identity = VlmIdentity(backend="test", model_id="test--answer-map", name="answer map")
    runs_locally = True

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers

    def ask(self, prompt: str, image: bytes | None = None) -> Answer:
        assert image is not None
        return Answer(self.answers[sha256_bytes(image)], None, None, 1, False)


def _answers_for(rows: pa.Table) -> dict[str, str]:
    """A varied answer per sample: the right culture's names (the paper's, then ours), negated, other cultures',
    tricky near-misses."""
    candidates = _candidate_answers()
    out = {}
    for index, (sample_id, country) in enumerate(
        zip(rows.column("sample_id").to_pylist(), rows.column("country").to_pylist(), strict=True)
    ):
        paper = mx.ground_truth_terms(country, MIX)
        ours = [t for t in mx.ground_truth_terms(country, MIX, ours=True) if t not in paper] or list(paper)
        out[sample_id] = (
            f"I think {paper[index % len(paper)]}, maybe.",
            f"Definitely not {paper[index % len(paper)]}.",
            f"Maybe {ours[index % len(ours)]}?",
            candidates[(index * 7) % len(candidates)],
        )[index % 4]
    return out


def _ours(rows: pa.Table, answers: dict[str, str]) -> pa.Table:
    images = mx._image_bytes(rows).to_pylist()
    by_bytes: dict[str, str] = {}
    for image, sample_id in zip(images, rows.column("sample_id").to_pylist(), strict=True):
        key = sha256_bytes(image)
        assert by_bytes.get(key, answers[sample_id]) == answers[sample_id], "two rows with the same bytes"
        by_bytes[key] = answers[sample_id]
    return mx.evaluate_images(rows, _MapVlm(by_bytes), None, mix=MIX)


def _our_metrics(per_image: pa.Table) -> dict[str, Any]:
    summary = mx.summary(per_image, MIX)
    by_ethnicity = summary["accuracy_by_ethnicity"]
    return {
        "mixcube_accuracy": summary["accuracy"],
        "mixcube_accuracy_with_our_aliases": summary["accuracy_with_our_aliases"],
        "mixcube_negated_answers": summary["negated_answers"],
        "mixcube_accuracy_by_ethnicity": by_ethnicity,
        "mixcube_accuracy_by_country": summary["accuracy_by_country"],
        "mixcube_accuracy_with_our_aliases_by_country": summary["accuracy_with_our_aliases_by_country"],
        "mixcube_accuracy_by_category": summary["accuracy_by_category"],
        "mixcube_drop_by_ethnicity": {
            e: by_ethnicity[MIX.original_label] - v for e, v in by_ethnicity.items() if e != MIX.original_label
        },
        "mixcube_swap_drops": {
            f"{r['country']}/{r['category']}/{r['ethnicity']}": r["drop"]
            for r in mx.swap_drops(per_image, MIX).to_pylist()
            if r["drop"] is not None
        },
    }


def _assert_metrics_equal(theirs: dict[str, Any], ours: dict[str, Any]) -> None:
    assert set(theirs) == set(ours)
    for name, value in ours.items():
        if isinstance(value, dict):
            assert set(theirs[name]) == set(value), name
            for key, number in value.items():
                assert theirs[name][key] == pytest.approx(number), (name, key)
        else:
            assert theirs[name] == pytest.approx(value), name


# -- fixtures ------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def release(small_releases: dict[str, Path]) -> Path:
    return small_releases["mixcube"]


@pytest.fixture(scope="module")
def exported(release: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("lmms-export") / "export"
    before = _tree(release)
    result = run_export(release, "lmms-eval", out)
    assert result.status == "created"
    assert result.command.startswith(f"EXPORT={out} ") and result.command.endswith(lx.run_command())
    assert _tree(release) == before, "the export wrote into the release"
    return out


@pytest.fixture(scope="module")
def utils(exported: Path) -> ModuleType:
    return _import_utils(exported / lx.TASK_UTILS)


# -- format --------------------------------------------------------------------------------------------------------
def test_layout_and_same_bytes(release: Path, exported: Path, tmp_path: Path) -> None:
    assert set(_tree(exported)) == {"README.md", "manifest.json", lx.TASK_YAML, lx.TASK_UTILS}
    again = tmp_path / "again"
    run_export(release, "lmms-eval", again)
    assert _tree(again) == _tree(exported)
    assert run_export(release, "lmms-eval", exported).status == "unchanged"
    readme = (exported / "README.md").read_text(encoding="utf-8")
    images = _release_rows(release).num_rows
    smoke = lx.smoke_images(MIX, images)
    blocks = [lx.smoke_command(smoke), lx.run_command(), lx.check_command(images)]
    assert readme_blocks(exported) == [f"{block}\n" for block in blocks]  # the smoke test first
    assert f"--limit {smoke}" in blocks[0] and "--limit" not in blocks[1]
    for name, _ in lx.VARIABLES:  # each variable the blocks use is set out, and only those
        assert f"- `{name}`: " in readme and f"${name}" in "".join(blocks)
    assert "Cultural Marker" in readme and str(release.resolve()) in readme


def test_only_mixcube(small_releases: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="3xcm"):
        run_export(small_releases["3xcm"], "lmms-eval", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_yaml_names_the_release_and_the_hooks(release: Path, exported: Path, utils: ModuleType) -> None:
    config = _load_yaml(exported / lx.TASK_YAML)
    assert config["task"] == lx.TASK
    assert config["dataset_path"] == str(release.resolve())
    assert config["dataset_name"] == "default" and config["test_split"] == "train"
    opened = Release.open(release)
    assert config["dataset_kwargs"] == {"description": lx.cache_key(opened)}  # datasets' cache, keyed by the manifest
    assert opened.manifest_sha256 in lx.cache_key(opened)
    assert config["output_type"] == "generate_until"
    card = (release / "README.md").read_text(encoding="utf-8")
    assert "config_name: default" in card and any((release / "default").glob("train-*.parquet"))
    hooks = [config[k] for k in ("doc_to_visual", "doc_to_text", "process_results")]
    hooks += [m["aggregation"] for m in config["metric_list"]]
    for tag, target in hooks:
        assert tag == "!function" and target.startswith("utils.")
        assert callable(getattr(utils, target.removeprefix("utils.")))
    assert [m["metric"] for m in config["metric_list"]] == list(utils.METRICS)
    assert config["metadata"]["version"] == "0.0.1"


def test_utils_is_self_contained(exported: Path, utils: ModuleType, release: Path) -> None:
    tree = ast.parse((exported / lx.TASK_UTILS).read_text(encoding="utf-8"))
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
    assert imported <= STDLIB_IMPORTS
    # it runs where neither culturebench nor lmms_eval can be imported
    probe = "import importlib.util as u, sys; s = u.spec_from_file_location('utils', sys.argv[1]); m = u.module_from_spec(s); s.loader.exec_module(m); print(m.is_correct('Seoul, South Korea', 'Korean'))"  # noqa: E501
    blocked = "import sys; sys.modules['data'] = sys.modules['evaluation'] = sys.modules['lmms_eval'] = None; "
    done = subprocess.run(
        [sys.executable, "-I", "-c", blocked + probe, str(exported / lx.TASK_UTILS)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=exported,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
    assert MIX.evaluation_prompts == utils.COUNTRY_PROMPTS
    assert utils.RELEASE["path"] == str(release.resolve())


def test_is_correct_agrees_with_ours(utils: ModuleType) -> None:
    answers, countries = _candidate_answers(), _candidate_countries()
    for country in countries:
        assert utils.ground_truth_terms(country) == mx.ground_truth_terms(country, MIX), country
        assert utils.ground_truth_terms(country, True) == mx.ground_truth_terms(country, MIX, ours=True), country
        assert utils.other_country_names(country) == mx.other_country_names(country, MIX), country
    verdicts: Counter[tuple[bool, str]] = Counter()
    scorer = mx._Scorer(MIX)  # mx.verdict, its names computed once per culture
    for answer, country in itertools.product(answers, countries):
        for with_ours in (False, True):
            ours = scorer.verdict(answer, country, ours=with_ours)
            assert utils.verdict(answer, country, with_ours) == ours, (answer, country, with_ours)
            verdicts[(with_ours, ours)] += 1
    for answer, country in itertools.product(answers[::7], countries[::3]):
        for with_ours in (False, True):
            assert utils.is_correct(answer, country, with_ours) is mx.is_correct(answer, country, MIX, ours=with_ours)
    for with_ours in (False, True):  # every verdict occurs, often, by both rules
        assert min(verdicts[(with_ours, v)] for v in ("correct", "negated", "absent")) > 30, verdicts
    assert verdicts[(True, "correct")] > verdicts[(False, "correct")]  # our aliases credit more


def test_the_rules_table_scores_the_same_in_the_export(utils: ModuleType) -> None:
    for answer, country, paper, ours in CASES:
        assert (utils.verdict(answer, country), utils.verdict(answer, country, True)) == (paper, ours), answer
    for answer, country, expected in CONTAINED:
        assert utils.verdict(answer, country) == expected, answer


def test_hooks_and_aggregations_agree_with_ours(release: Path, utils: ModuleType) -> None:
    """Without lmms-eval: the exported hooks on the release's rows, fed the answers our scorer gets."""
    rows = _release_rows(release)
    answers = _answers_for(rows)
    docs = rows.drop(["image"]).to_pylist()
    records: dict[str, list[dict[str, Any]]] = {m: [] for m in utils.METRICS}
    for doc in docs:
        assert utils.doc_to_text(doc) == MIX.evaluation_prompts[doc["category"]]
        assert utils.doc_to_text(doc, {"pre_prompt": "<", "post_prompt": ">"}) == f"<{utils.doc_to_text(doc)}>"
        for metric, record in utils.process_results(doc, [answers[doc["sample_id"]]]).items():
            records[metric].append(record)
    per_image = _ours(rows, answers)
    ours = dict(zip(per_image["sample_id"].to_pylist(), per_image["correct"].to_pylist(), strict=True))
    assert {r["sample_id"]: r["correct"] for r in records["mixcube_accuracy"]} == ours
    assert len(set(ours.values())) == 2, "the answers should score both ways"
    for column in ("correct_with_our_aliases", "negated"):
        expected = dict(zip(per_image["sample_id"].to_pylist(), per_image[column].to_pylist(), strict=True))
        assert {r["sample_id"]: r[column] for r in records["mixcube_accuracy"]} == expected, column
    changed = per_image["correct"].to_pylist() != per_image["correct_with_our_aliases"].to_pylist()
    assert changed, "our aliases should change some verdicts"
    assert any(per_image["negated"].to_pylist()), "some answers should be negated"
    config = _load_yaml(Path(utils.__file__).with_name(f"{lx.TASK}.yaml"))
    theirs = {
        m["metric"]: getattr(utils, m["aggregation"][1].removeprefix("utils."))(records[m["metric"]])
        for m in config["metric_list"]
    }
    _assert_metrics_equal(theirs, _our_metrics(per_image))


# -- a real lmms-eval run: the README's command, as written -------------------------------------------------
def _run_readme(
    exported: Path, tmp_path: Path, *, plugin: bool = False, **variables: str
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """The README's command, its variables set as the README says (DEVICE=cpu); returns OUT and the run."""
    out = tmp_path / "out"
    out.mkdir()
    _, command, _ = readme_blocks(exported)
    env = readme_env(tmp_path / "home", plugin=plugin, EXPORT=str(exported), DEVICE="cpu", OUT=str(out), **variables)
    return out, run_block(command, env, tmp_path)


def _check(exported: Path, out: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The README's check of a run's files, as written."""
    _, _, check = readme_blocks(exported)
    return run_block(check, readme_env(tmp_path / "home", OUT=str(out)), tmp_path)


def _logged(out: Path, log: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The run's results file and its samples log: lmms-eval's own evidence (its exit code is 0 either way)."""
    results = sorted(out.rglob("*_results.json"))
    samples = sorted(out.rglob(f"*_samples_{lx.TASK}.jsonl"))
    assert len(results) == 1 and len(samples) == 1, log
    lines = samples[0].read_text(encoding="utf-8").splitlines()
    return json.loads(results[0].read_text(encoding="utf-8")), [json.loads(line) for line in lines]


def _assert_scored_as_ours(rows: pa.Table, results: dict[str, Any], samples: list[dict[str, Any]]) -> dict[str, str]:
    """Every image of the release logged once, with its row's groups; each verdict and every aggregate lmms-eval
    reported equal to our scorer's on the answers it logged. Returns those answers."""
    records = [sample["mixcube_accuracy"] for sample in samples]
    for sample in samples:  # one record per image, the same under every metric
        assert all(sample[metric] == sample["mixcube_accuracy"] for metric, _, _ in lx.METRICS)
    assert sorted(r["sample_id"] for r in records) == sorted(rows["sample_id"].to_pylist())
    groups = {row["sample_id"]: row for row in rows.select(["sample_id", *lx._READ[1:]]).to_pylist()}
    assert all({k: r[k] for k in groups[r["sample_id"]]} == groups[r["sample_id"]] for r in records)
    answers = {r["sample_id"]: r["answer"] for r in records}
    per_image = _ours(rows, answers)
    for column in ("correct", "correct_with_our_aliases", "negated"):
        expected = dict(zip(per_image["sample_id"].to_pylist(), per_image[column].to_pylist(), strict=True))
        assert {r["sample_id"]: r[column] for r in records} == expected, column
    reported = results["results"][lx.TASK]
    ours = _our_metrics(per_image)
    _assert_metrics_equal({name: reported[f"{name},none"] for name in ours}, ours)
    return answers


@pytest.mark.harness
@pytest.mark.skipif(not HARNESS_PYTHON.exists(), reason=SKIP_REASON)
def test_the_readme_command_runs_as_written_with_a_llava_hf_checkpoint_in_a_folder(
    release: Path, exported: Path, tmp_path: Path
) -> None:
    """As the README says: MODEL=llava_hf, PRETRAINED a local folder (a tiny random LLaVA, `save_pretrained`'s
    layout), DEVICE=cpu. Its answers are gibberish; what counts is that every image was asked and scored as ours."""
    model = build_tiny_vlm(tmp_path / "tiny-llava")
    out, done = _run_readme(exported, tmp_path, MODEL="llava_hf", PRETRAINED=str(model))
    log = (done.stdout + done.stderr)[-6000:]
    checked = _check(exported, out, tmp_path)
    assert checked.returncode == 0 and checked.stdout.startswith("mixcube_accuracy "), checked.stderr + log
    results, samples = _logged(out, log)
    assert results["config"]["model_backend"] == "lmms_eval.models.simple.llava_hf.LlavaHf (simple)"  # --force_simple
    answers = _assert_scored_as_ours(_release_rows(release), results, samples)
    # the checkpoint answered each image, greedy, at most 120 new tokens (App. C.2), no stop string
    assert all(answers.values())
    generation = results["configs"][lx.TASK]["generation_kwargs"]
    assert generation == {"max_new_tokens": lx.MAX_NEW_TOKENS, "temperature": 0, "do_sample": False, "until": []}


@pytest.mark.harness
@pytest.mark.skipif(not HARNESS_PYTHON.exists(), reason=SKIP_REASON)
def test_the_readme_smoke_test_runs_as_written_on_an_original_and_its_swaps(
    release: Path, exported: Path, tmp_path: Path
) -> None:
    """The smoke block as written, with the same llava_hf folder (the demo's model): lmms-eval's `--limit` asks the
    release's first images, one original and a swap per ethnicity (MixCuBe §3), and the block's check passes."""
    model = build_tiny_vlm(tmp_path / "tiny-llava")
    smoke_block, _, _ = readme_blocks(exported)
    smoke = tmp_path / "smoke"
    smoke.mkdir()
    env = readme_env(tmp_path / "home", EXPORT=str(exported), MODEL="llava_hf", PRETRAINED=str(model), DEVICE="cpu",
                     SMOKE=str(smoke))  # fmt: skip
    done = run_block(smoke_block, env, tmp_path)
    log = (done.stdout + done.stderr)[-6000:]
    rows = _release_rows(release)
    images = lx.smoke_images(MIX, rows.num_rows)
    assert done.returncode == 0, log
    assert done.stdout.strip().splitlines()[-1].startswith("mixcube_accuracy ") and f"on {images} images" in done.stdout
    results, samples = _logged(smoke, log)
    records = [sample["mixcube_accuracy"] for sample in samples]
    assert [sample["doc_id"] for sample in samples] == list(range(images))
    first = rows.slice(0, images).to_pylist()
    assert [r["sample_id"] for r in records] == [row["sample_id"] for row in first]
    ethnicities = [MIX.original_label, *(e.label for e in MIX.ethnicities)]
    assert sorted(row["ethnicity"] for row in first) == sorted(ethnicities)
    assert len({(row["country"], row["category"]) for row in first}) == 1  # one original's swaps
    assert isinstance(results["results"][lx.TASK]["mixcube_accuracy,none"], float)


@pytest.mark.harness
@pytest.mark.skipif(not HARNESS_PYTHON.exists(), reason=SKIP_REASON)
def test_the_readme_command_scores_a_model_as_ours(release: Path, exported: Path, tmp_path: Path) -> None:
    """The same command with a plugin model (`culturebench_answers`, PRETRAINED its answer map) whose answers score
    every way: right, negated, our aliases only, tricky near-misses."""
    rows = _release_rows(release)
    answers = _answers_for(rows)
    (tmp_path / "answers.json").write_text(json.dumps(answers), encoding="utf-8")
    seen = tmp_path / "seen.jsonl"
    out, done = _run_readme(exported, tmp_path, plugin=True, MODEL="culturebench_answers",
                            PRETRAINED=str(tmp_path / "answers.json"), CULTUREBENCH_LMMS_SEEN=str(seen))  # fmt: skip
    log = (done.stdout + done.stderr)[-6000:]
    checked = _check(exported, out, tmp_path)
    assert checked.returncode == 0, checked.stderr + log
    results, samples = _logged(out, log)

    # the model was asked each row's App. B.2 question about its one image
    asked = [json.loads(line) for line in seen.read_text(encoding="utf-8").splitlines()]
    categories = dict(zip(rows["sample_id"].to_pylist(), rows["category"].to_pylist(), strict=True))
    assert sorted(a["sample_id"] for a in asked) == sorted(categories)
    for a in asked:
        assert a["prompt"] == MIX.evaluation_prompts[categories[a["sample_id"]]]
        assert len(a["images"]) == 1 and a["images"][0][1] == "RGB"

    # per image and in aggregate: lmms-eval's scores are ours, on answers that score every way
    assert _assert_scored_as_ours(rows, results, samples) == answers
    per_image = _ours(rows, answers)
    assert len(set(per_image["correct"].to_pylist())) == 2 and any(per_image["negated"].to_pylist())
    assert per_image["correct"].to_pylist() != per_image["correct_with_our_aliases"].to_pylist()


@pytest.mark.harness
@pytest.mark.skipif(not HARNESS_PYTHON.exists(), reason=SKIP_REASON)
def test_the_readme_check_catches_a_run_that_failed(exported: Path, tmp_path: Path) -> None:
    """A checkpoint folder with nothing in it: lmms-eval logs the error and exits 0; the README's check exits 1."""
    empty = tmp_path / "no-checkpoint"
    empty.mkdir()
    out, done = _run_readme(exported, tmp_path, MODEL="llava_hf", PRETRAINED=str(empty))
    log = (done.stdout + done.stderr)[-6000:]
    assert done.returncode == 0 and "Error during evaluation" in log, log  # what the README warns of
    assert not any(out.rglob("*_results.json"))
    checked = _check(exported, out, tmp_path)
    assert checked.returncode == 1 and checked.stderr.startswith("lmms-eval failed: 0 results"), checked.stderr


def test_the_readme_check_wants_one_run_with_every_image(release: Path, exported: Path, tmp_path: Path) -> None:
    """The check alone (plain Python), on files laid out as lmms-eval writes them: a whole run passes; an image
    short, no accuracy, every answer empty, or a second run in the same folder fail."""
    images = _release_rows(release).num_rows
    _, _, check = readme_blocks(exported)
    env = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}

    def run(name: str, answers: list[str], metrics: dict[str, Any], runs: int = 1) -> subprocess.CompletedProcess[str]:
        out = tmp_path / name
        lines = "".join(json.dumps({m: {"answer": a} for m, _, _ in lx.METRICS}) + "\n" for a in answers)
        for i in range(runs):
            folder = out / "org__model"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"2026010{i}_results.json").write_text(json.dumps({"results": {lx.TASK: metrics}}))
            (folder / f"2026010{i}_samples_{lx.TASK}.jsonl").write_text(lines)
        return run_block(check, env | {"OUT": str(out)}, tmp_path)

    accuracy = {"mixcube_accuracy,none": 0.25}
    answers = ["Korea", *[""] * (images - 1)]
    whole = run("whole", answers, accuracy)
    assert whole.returncode == 0, whole.stderr
    assert whole.stdout == f"mixcube_accuracy 0.25 on {images} images, {images - 1} answers empty\n"
    for failed in (
        run("short", answers[:-1], accuracy),
        run("no-accuracy", answers, {}),
        run("all-empty", [""] * images, accuracy),
        run("two-runs", answers, accuracy, runs=2),
    ):
        assert failed.returncode == 1 and failed.stderr.startswith("lmms-eval failed: "), failed.stderr


# -- the datasets cache trap ---------------------------------------------------------------------------------------
def _another_build_in_a_folder_of_the_same_name(release: Path, folder: Path) -> Path:
    """A copy of the release with one culture's images only, its manifest made anew: another build of the same
    version, as a second `0.1.0-demo` somewhere else would be."""
    shutil.copytree(release, folder)
    parts = sorted((folder / "default").glob("*.parquet"))
    table = pa.concat_tables([pq.read_table(part) for part in parts])
    kept = table.filter(pc.equal(table["country"], table["country"][0]))
    for part in parts:
        part.unlink()
    pq.write_table(kept, parts[0])
    rehash_manifest(folder)
    return folder


@pytest.mark.harness
@pytest.mark.skipif(not HARNESS_PYTHON.exists(), reason=SKIP_REASON)
def test_two_releases_in_folders_of_one_name_each_load_their_own_rows(release: Path, tmp_path: Path) -> None:
    """datasets 5.2 caches a local folder under `<folder name>/default/0.0.0/<hash of its card's YAML>`: a second
    release in a folder of the same name loads the first one's rows from that cache (reproduced here with the
    harness's datasets, as `load_dataset(FOLDER, name="default", split="train")`). The exported task keys the cache
    by the release's manifest (`dataset_kwargs`), so through lmms-eval each loads its own, in the same cache."""
    first = tmp_path / "a" / release.name
    shutil.copytree(release, first)
    second = _another_build_in_a_folder_of_the_same_name(release, tmp_path / "b" / release.name)
    own = {f: _release_rows(f)["sample_id"].to_pylist() for f in (first, second)}
    assert set(own[second]) < set(own[first])
    assert Release.open(first).manifest_sha256 != Release.open(second).manifest_sha256
    tasks = {}
    for folder in (first, second):
        assert run_export(folder, "lmms-eval", folder.parent / "export").status == "created"
        tasks[folder] = folder.parent / "export" / lx.TASK_YAML
    sources = [f"raw:{first}", f"raw:{second}", f"task:{tasks[second]}", f"task:{tasks[first]}"]
    done = subprocess.run(
        [str(HARNESS_PYTHON), "-m", TASK_ROWS, *sources],
        env=harness_env(tmp_path / "home"),  # one HF_HOME: one datasets cache for all four
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-6000:]
    loaded = {r["source"]: r for r in map(json.loads, (x for x in done.stdout.splitlines() if x.startswith("{")))}
    assert set(loaded) == set(sources), done.stdout[-3000:]

    # the trap: without a key, the second folder is read from the first one's cache
    raw_first, raw_second = loaded[f"raw:{first}"], loaded[f"raw:{second}"]
    assert raw_first["sample_ids"] == own[first]
    assert raw_second["cache"] == raw_first["cache"], "datasets now caches these apart: see lx.cache_key"
    assert raw_second["sample_ids"] == own[first] != own[second]
    # the export: each release its own rows, from a cache of its own
    for folder in (first, second):
        assert loaded[f"task:{tasks[folder]}"]["sample_ids"] == own[folder], folder
    assert len({raw_first["cache"], *(loaded[f"task:{tasks[f]}"]["cache"] for f in (first, second))}) == 3
