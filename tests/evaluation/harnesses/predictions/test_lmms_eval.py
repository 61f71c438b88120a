"""`culturebench evaluate mixcube RELEASE --predictions SAMPLES --predictions-format lmms-eval`: lmms-eval's
`--log_samples` file (or its output folder) scored by our scorer. A real lmms-eval 0.7.3 run of the export
(tests/support/lmms_eval_run.py) answering from a fixed map scores exactly as the same answers written as a VLMEvalKit
prediction file; the reader's checks run on small synthetic samples logs without the harness."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evaluation.harnesses.exports import lmms_eval as lx
from evaluation.harnesses.exports.common import run_export
from evaluation.harnesses.predictions import FORMATS, PredictionsError
from evaluation.harnesses.predictions import lmms_eval as reader
from tests.evaluation.harnesses.predictions.test_predictions import default_rows, error_line, invoke, write_tsv
from tests.support.lmms_eval_run import HARNESS_PYTHON, SKIP_REASON, run_lmms_eval

SAMPLES = f"20260101_000000_samples_{lx.TASK}.jsonl"


# -- synthetic samples logs ----------------------------------------------------------------------------------------
def synthetic_rows() -> pa.Table:
    """Three release rows; the last has no image bytes (no prediction expected for it)."""
    return pa.table(
        {
            "sample_id": ["s-0", "s-1", "s-2"],
            "category": ["Food", "Clothes", "Food"],
            "image_sha256": ["a" * 64, "b" * 64, None],
        }
    )


def sample_line(doc_id: int, sample_id: str, answer: Any) -> str:
    """One line as lmms-eval 0.7.3 writes it for the exported task (the doc dropped, the metric records kept)."""
    record = {"sample_id": sample_id, "country": "Korean", "category": "Food", "ethnicity": "original",
              "answer": answer, "correct": False}  # fmt: skip
    records = {metric: record for metric in reader.RECORD_KEYS}
    sample = {"doc_id": doc_id, "target": "Korean", "filtered_resps": answer, "token_counts": [None],
              "doc_hash": "0" * 64, **records, "input": "Which country?"}  # fmt: skip
    return json.dumps(sample, ensure_ascii=False)


def write_samples(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def one_line_error(path: Path, rows: pa.Table, needle: str) -> str:
    with pytest.raises(PredictionsError) as raised:
        reader.read_predictions(path, rows)
    message = str(raised.value)
    assert "\n" not in message and needle in message, message
    return message


def test_registered() -> None:
    assert FORMATS["lmms-eval"] == "evaluation.harnesses.predictions.lmms_eval"
    assert reader.HARNESS == "lmms-eval" and reader.TASK == lx.TASK


def test_reader_maps_doc_id_to_sample_id(tmp_path: Path) -> None:
    rows = synthetic_rows()
    # any order; a list-wrapped response (resps kept beside filtered_resps), text with a newline and a quote survives
    lines = [sample_line(1, "s-1", ['Korea, "maybe"\nor Japan']), sample_line(0, "s-0", "UK")]
    file = write_samples(tmp_path / "out" / "org__model" / SAMPLES, lines)
    assert reader.read_predictions(file, rows) == {"s-0": "UK", "s-1": 'Korea, "maybe"\nor Japan'}
    # a partial log (lmms-eval's --limit) reads as the rows it answers; the run says its coverage (test_predictions)
    partial = write_samples(tmp_path / "partial" / SAMPLES, lines[1:])
    assert reader.read_predictions(partial, rows) == {"s-0": "UK"}
    # the output folder is as good as the file: its one samples file is found wherever lmms-eval nested it
    assert reader.prediction_file(tmp_path / "out") == file
    assert reader.read_predictions(tmp_path / "out", rows) == reader.read_predictions(file, rows)
    # the model's name is the run's results.json `model_name`; None without one
    assert reader.model_name(file) is None
    results = file.with_name(SAMPLES.replace(f"_samples_{lx.TASK}.jsonl", "_results.json"))
    results.write_text(json.dumps({"model_name": "org/model", "results": {}}), encoding="utf-8")
    assert reader.model_name(file) == "org/model" and reader.model_name(tmp_path / "out") == "org/model"
    results.write_text(json.dumps({"model_name": ""}), encoding="utf-8")
    assert reader.model_name(file) is None


@pytest.mark.parametrize(
    ("case", "needle"),
    [
        ("extra", "no image row of the release"),
        ("no-image-row", "no image row of the release"),
        ("twice", "doc_id 0 appears twice"),
        ("bad-json", "line 2 is not JSON"),
        ("not-an-object", "line 1 is not a JSON object"),
        ("no-doc-id", "is not a row position"),
        ("other-sample", "in the file but"),
        ("no-answer", "no filtered_resps"),
        ("empty", "no samples"),
    ],
)
def test_bad_samples_logs_are_one_line_errors_naming_the_file(tmp_path: Path, case: str, needle: str) -> None:
    lines = [sample_line(0, "s-0", "UK"), sample_line(1, "s-1", "Korea")]
    if case == "extra":
        lines.append(sample_line(7, "s-7", "UK"))
    elif case == "no-image-row":
        lines.append(sample_line(2, "s-2", "UK"))
    elif case == "twice":
        lines.append(lines[0])
    elif case == "bad-json":
        lines[1] = lines[1][:-5]
    elif case == "not-an-object":
        lines[0] = "[1, 2]"
    elif case == "no-doc-id":
        lines[0] = json.dumps({"filtered_resps": "UK"})
    elif case == "other-sample":
        lines[1] = sample_line(1, "s-0", "Korea")
    elif case == "no-answer":
        lines[0] = json.dumps({"doc_id": 0})
    elif case == "empty":
        lines = []
    file = write_samples(tmp_path / SAMPLES, lines)
    assert str(file) in one_line_error(file, synthetic_rows(), needle)


def test_a_folder_needs_exactly_one_samples_file(tmp_path: Path) -> None:
    rows = synthetic_rows()
    with pytest.raises(PredictionsError, match="no lmms-eval samples file"):
        reader.read_predictions(tmp_path, rows)
    lines = [sample_line(0, "s-0", "UK"), sample_line(1, "s-1", "Korea")]
    write_samples(tmp_path / "a" / SAMPLES, lines)
    write_samples(tmp_path / "b" / SAMPLES.replace("000000", "000001"), lines)
    message = one_line_error(tmp_path, rows, "2 lmms-eval samples files")
    assert f"a/{SAMPLES}" in message and "b/" in message and str(tmp_path) in message


def test_cli_errors_on_a_folder_with_two_samples_files(small_releases: dict[str, Path], tmp_path: Path) -> None:
    release = small_releases["mixcube"]
    rows = default_rows(release)
    lines = [sample_line(i, r["sample_id"], r["country"]) for i, r in enumerate(rows)]
    write_samples(tmp_path / "res" / "m1" / SAMPLES, lines)
    write_samples(tmp_path / "res" / "m2" / SAMPLES, lines)
    out = tmp_path / "out"
    result = invoke("evaluate", "mixcube", str(release), "--predictions", str(tmp_path / "res"),
                    "--predictions-format", "lmms-eval", "--predictions-model", "m", "--out", str(out))  # fmt: skip
    assert result.exit_code == 2, result.output
    error_line(result.output, "2 lmms-eval samples files")
    assert not out.exists()


# -- a real lmms-eval run ------------------------------------------------------------------------------------------
def fixed_answers(rows: list[dict[str, Any]]) -> dict[str, str]:
    """Right (the row's own culture), wrong (another culture) and no answer, in turn."""
    countries = sorted({r["country"] for r in rows})
    out = {}
    for i, row in enumerate(rows):
        other = next(c for c in countries if c != row["country"])
        out[row["sample_id"]] = (f"It is {row['country']}.", f"Surely {other}", "I cannot tell.")[i % 3]
    return out


@pytest.mark.harness
@pytest.mark.skipif(not HARNESS_PYTHON.exists(), reason=SKIP_REASON)
def test_a_real_lmms_eval_run_scores_as_our_scorer(
    small_releases: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    release = small_releases["mixcube"]
    work = tmp_path_factory.mktemp("lmms-predictions")
    exported = work / "export"
    run_export(release, "lmms-eval", exported)
    rows = default_rows(release)
    answers = fixed_answers(rows)
    (work / "answers.json").write_text(json.dumps(answers), encoding="utf-8")
    results_dir = work / "results"
    done = run_lmms_eval(exported, work / "answers.json", results_dir, work, model_args="pretrained=org/answer-map")
    log = (done.stdout + done.stderr)[-6000:]
    assert done.returncode == 0, log
    samples_files = sorted(results_dir.rglob(f"*_samples_{lx.TASK}.jsonl"))
    assert len(samples_files) == 1, log
    assert samples_files[0].parent.name == "org__answer-map"  # lmms-eval nests it by the model's name

    # the output folder, the model named by the run: the same answers as lmms-eval logged them
    scored = work / "scored"
    result = invoke("evaluate", "mixcube", str(release), "--predictions", str(results_dir),
                    "--predictions-format", "lmms-eval", "--out", str(scored))  # fmt: skip
    assert result.exit_code == 0, result.output
    # the samples file itself, the model named on the command line
    named = work / "named"
    result = invoke("evaluate", "mixcube", str(release), "--predictions", str(samples_files[0]), "--predictions-format",
                    "lmms-eval", "--predictions-model", "answer map", "--out", str(named))  # fmt: skip
    assert result.exit_code == 0, result.output
    # the same answers as a VLMEvalKit prediction file: our scorer's reference
    tsv = write_tsv(work / "answer-map_MixCuBe.tsv", ["index", "sample_id", "prediction"],
                    [[i, r["sample_id"], answers[r["sample_id"]]] for i, r in enumerate(rows)])  # fmt: skip
    reference = work / "reference"
    result = invoke("evaluate", "mixcube", str(release), "--predictions", str(tsv), "--out", str(reference))
    assert result.exit_code == 0, result.output

    ours = pq.read_table(reference / "per_query.parquet").to_pylist()
    assert len({r["correct"] for r in ours}) == 2, "the answers should score both ways"
    ours_metrics = json.loads((reference / "metrics.json").read_text())
    for folder, model in ((scored, "org/answer-map"), (named, "answer map")):
        theirs = pq.read_table(folder / "per_query.parquet").to_pylist()
        assert [r["sample_id"] for r in theirs] == [r["sample_id"] for r in ours]
        for mine, ref in zip(theirs, ours, strict=True):
            for column in ("answer", "correct", "error", "prompt", "image_sha256", "ethnicity"):
                assert mine[column] == ref[column], (mine["sample_id"], column)
        metrics = json.loads((folder / "metrics.json").read_text())
        for key in ("images", "correct", "accuracy", "accuracy_by_ethnicity", "accuracy_by_country",
                    "accuracy_by_category"):  # fmt: skip
            assert metrics[key] == ours_metrics[key], key
        assert metrics["model"]["name"] == model
        assert metrics["settings"]["predictions"]["format"] == "lmms-eval"
        assert "lmms-eval" in (folder / "README.md").read_text()
    # and lmms-eval's own per-image verdicts are ours
    logged = [json.loads(line) for line in samples_files[0].read_text(encoding="utf-8").splitlines()]
    verdicts = {s["mixcube_accuracy"]["sample_id"]: s["mixcube_accuracy"]["correct"] for s in logged}
    assert verdicts == {r["sample_id"]: r["correct"] for r in ours}


def test_a_log_without_a_model_name_asks_for_predictions_model_naming_pretrained(
    small_releases: dict[str, Path], tmp_path: Path
) -> None:
    release = small_releases["mixcube"]
    rows = default_rows(release)
    samples = write_samples(
        tmp_path / "res" / SAMPLES, [sample_line(i, r["sample_id"], "x") for i, r in enumerate(rows)]
    )
    # `--model_args` without `pretrained=`: lmms-eval writes no model_name into the run's results.json
    samples.with_name(SAMPLES.replace(f"_samples_{lx.TASK}.jsonl", "_results.json")).write_text('{"results": {}}')
    out = tmp_path / "out"
    result = invoke("evaluate", "mixcube", str(release), "--predictions", str(samples),
                    "--predictions-format", "lmms-eval", "--out", str(out))  # fmt: skip
    assert result.exit_code == 2, result.output
    line = error_line(result.output, "--predictions-model")
    assert "pretrained=" in line and SAMPLES in line, line
    assert not out.exists()
