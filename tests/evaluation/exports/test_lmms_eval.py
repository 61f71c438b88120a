"""`culturebench export RELEASE --harness lmms-eval` (issue 29): the MixCuBe task folder, its format (layout, same
bytes, the YAML, a self-contained utils.py whose scoring and aggregations agree with `evaluation.mixcube`), and a
real lmms-eval 0.7.3 run of it, offline, in .venv-harness-lmms-eval (`make harnesses`), whose per-image verdicts
and accuracies equal ours on the same answers."""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import itertools
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow as pa
import pytest
import yaml

from data.publish.reader import Release
from data.reference import default_pack
from data.workspace import sha256_bytes
from evaluation import mixcube as mx
from evaluation.exports import lmms_eval as lx
from evaluation.exports.common import ExportError, run_export
from evaluation.vlm import Answer, VlmIdentity
from tests.evaluation.test_answer_match import CASES, CONTAINED
from tests.support.lmms_eval_run import HARNESS_PYTHON, SKIP_REASON, run_lmms_eval

STDLIB_IMPORTS = {"__future__", "bisect", "re", "unicodedata", "collections.abc", "functools", "typing"}


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
    # the answer rule's table (tests/evaluation/test_answer_match.py): whole names, other countries' names, negation
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
    assert f"--include_path {out}/{lx.TASK}" in result.command
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
    assert lx.command(".") in readme
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


# -- a real lmms-eval run ------------------------------------------------------------------------------------------
@pytest.mark.harness
@pytest.mark.skipif(not HARNESS_PYTHON.exists(), reason=SKIP_REASON)
def test_lmms_eval_runs_the_export_offline(release: Path, exported: Path, tmp_path: Path) -> None:
    rows = _release_rows(release)
    answers = _answers_for(rows)
    (tmp_path / "answers.json").write_text(json.dumps(answers), encoding="utf-8")
    results_dir = tmp_path / "results"
    seen = tmp_path / "seen.jsonl"
    done = run_lmms_eval(exported, tmp_path / "answers.json", results_dir, tmp_path, model_args=f"seen={seen}")
    log = (done.stdout + done.stderr)[-6000:]
    # lmms-eval 0.7.3 exits 0 even when the evaluation failed: its files are the evidence
    assert done.returncode == 0, log
    samples_files = sorted(results_dir.rglob(f"*_samples_{lx.TASK}.jsonl"))
    results_files = sorted(results_dir.rglob("*_results.json"))
    assert len(samples_files) == 1 and len(results_files) == 1, log

    # the model was asked each row's App. B.2 question about its one image
    asked = [json.loads(line) for line in seen.read_text(encoding="utf-8").splitlines()]
    categories = dict(zip(rows["sample_id"].to_pylist(), rows["category"].to_pylist(), strict=True))
    assert sorted(a["sample_id"] for a in asked) == sorted(categories)
    for a in asked:
        assert a["prompt"] == MIX.evaluation_prompts[categories[a["sample_id"]]]
        assert len(a["images"]) == 1 and a["images"][0][1] == "RGB"

    # per image: lmms-eval's verdict is ours on the same answer
    samples = [json.loads(line) for line in samples_files[0].read_text(encoding="utf-8").splitlines()]
    records = {s["mixcube_accuracy"]["sample_id"]: s["mixcube_accuracy"] for s in samples}
    assert {k: r["answer"] for k, r in records.items()} == answers
    per_image = _ours(rows, answers)
    ours = dict(zip(per_image["sample_id"].to_pylist(), per_image["correct"].to_pylist(), strict=True))
    assert {k: r["correct"] for k, r in records.items()} == ours
    assert len(set(ours.values())) == 2
    for column in ("correct_with_our_aliases", "negated"):
        expected = dict(zip(per_image["sample_id"].to_pylist(), per_image[column].to_pylist(), strict=True))
        assert {k: r[column] for k, r in records.items()} == expected, column

    # the aggregates: accuracy overall, per ethnicity, country, category; the drops
    reported = json.loads(results_files[0].read_text(encoding="utf-8"))["results"][lx.TASK]
    theirs = {name: reported[f"{name},none"] for name in _our_metrics(per_image)}
    _assert_metrics_equal(theirs, _our_metrics(per_image))
