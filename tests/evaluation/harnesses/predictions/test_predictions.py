"""`culturebench evaluate mixcube RELEASE --predictions FILE`: a harness's prediction file (VLMEvalKit's, with `index`
and `prediction`) scored by our scorer. Cross-checked against a model run: the demo VLM's own answers, written as a
VLMEvalKit prediction file, give exactly the per-image correctness and the accuracies of `--demo-model`.

The same cross-check through a real VLMEvalKit run (its inference loop writing the xlsx) is in
tests/evaluation/harnesses/exports/test_vlmevalkit.py."""

from __future__ import annotations

import csv
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from evaluation.harnesses.predictions import PredictionsError, release_rows
from evaluation.harnesses.predictions import vlmevalkit as reader
from flows.cli import app


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def error_line(output: str, needle: str) -> str:
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    assert needle in lines[0], output
    return lines[0]


def default_rows(release: Path) -> list[dict[str, Any]]:
    files = sorted((release / "default").glob("*.parquet"))
    return pq.read_table(files, columns=["sample_id", "category", "country"]).to_pylist()


@pytest.fixture(scope="module")
def demo_run(small_releases: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`evaluate mixcube --demo-model` on the small release: the model run the predictions are checked against."""
    root = tmp_path_factory.mktemp("demo-run")
    out = root / "demo"
    result = invoke(
        "evaluate", "mixcube", str(small_releases["mixcube"]), "--demo-model", "--out", str(out), "--results-root",
        str(root),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return out


def write_tsv(path: Path, header: list[str], rows: list[list[Any]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, delimiter="\t", quoting=csv.QUOTE_ALL)  # as VLMEvalKit's dump_tsv
        writer.writerow(header)
        writer.writerows(rows)
    return path


def demo_predictions(release: Path, demo: Path) -> list[list[Any]]:
    """The demo model's answers as VLMEvalKit rows: index (row position), sample_id, prediction."""
    answers = {r["sample_id"]: r["answer"] for r in pq.read_table(demo / "per_query.parquet").to_pylist()}
    return [[i, row["sample_id"], answers[row["sample_id"]] or ""] for i, row in enumerate(default_rows(release))]


@pytest.mark.slow
def test_predictions_of_the_demo_model_score_exactly_as_the_demo_model_run(
    small_releases: dict[str, Path], demo_run: Path, tmp_path: Path
) -> None:
    release = small_releases["mixcube"]
    file = write_tsv(
        tmp_path / "demo-vlm_MixCuBe.tsv", ["index", "sample_id", "prediction"], demo_predictions(release, demo_run)
    )
    out = tmp_path / "scored"
    result = invoke("evaluate", "mixcube", str(release), "--predictions", str(file), "--out", str(out))
    assert result.exit_code == 0, result.output

    ours = pq.read_table(out / "per_query.parquet").to_pylist()
    theirs = {r["sample_id"]: r for r in pq.read_table(demo_run / "per_query.parquet").to_pylist()}
    assert [r["sample_id"] for r in ours] == [r["sample_id"] for r in default_rows(release)]
    for row in ours:
        model = theirs[row["sample_id"]]
        for column in ("answer", "correct", "error", "prompt", "image_sha256", "country", "category", "ethnicity"):
            assert row[column] == model[column], (row["sample_id"], column)
    metrics = json.loads((out / "metrics.json").read_text())
    model_metrics = json.loads((demo_run / "metrics.json").read_text())
    for key in ("images", "answered", "correct", "accuracy", "accuracy_by_ethnicity", "accuracy_by_country",
                "accuracy_by_category", "accuracy_original", "accuracy_synthesized"):  # fmt: skip
        assert metrics[key] == model_metrics[key], key
    assert metrics["ci95"]["accuracy"] == model_metrics["ci95"]["accuracy"]
    # the same tables and figures as a model run
    for name in ("accuracy.parquet", "swap_drops.parquet", "figures/accuracy_bars.png", "figures/swap_difference.png"):
        assert (out / name).is_file(), name
    assert pq.read_table(out / "swap_drops.parquet").equals(pq.read_table(demo_run / "swap_drops.parquet"))
    # the card names the harness, the file and its sha256, and the model from the file's name
    card = (out / "README.md").read_text()
    assert "VLMEvalKit" in card and file.name in card
    assert hashlib.sha256(file.read_bytes()).hexdigest() in card
    assert metrics["model"]["name"] == "demo-vlm"
    assert metrics["settings"]["predictions"]["sha256"] == hashlib.sha256(file.read_bytes()).hexdigest()
    # an identical rerun is unchanged; --predictions-model names the model instead of the file
    again = invoke("evaluate", "mixcube", str(release), "--predictions", str(file), "--out", str(out))
    assert again.exit_code == 0 and '"status": "unchanged"' in again.output, again.output
    named = tmp_path / "named"
    result = invoke("evaluate", "mixcube", str(release), "--predictions", str(file), "--predictions-model", "m/x",
                    "--out", str(named))  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads((named / "metrics.json").read_text())["model"]["name"] == "m/x"


def test_a_wrong_answer_is_scored_wrong_and_a_right_one_right(small_releases: dict[str, Path], tmp_path: Path) -> None:
    release = small_releases["mixcube"]
    rows = default_rows(release)
    # the culture's own name is right (§3 rule); "I don't know" names no country
    predictions = [[i, r["country"] if i % 2 == 0 else "I don't know"] for i, r in enumerate(rows)]
    file = write_tsv(tmp_path / "m_MixCuBe.tsv", ["index", "prediction"], predictions)
    out = tmp_path / "out"
    result = invoke("evaluate", "mixcube", str(release), "--predictions", str(file), "--out", str(out))
    assert result.exit_code == 0, result.output
    correct = [r["correct"] for r in pq.read_table(out / "per_query.parquet").to_pylist()]
    assert correct == [i % 2 == 0 for i in range(len(rows))]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["accuracy"] == sum(correct) / len(correct)


@pytest.mark.parametrize(
    ("case", "needle"),
    [
        ("none", "no prediction for any of the release's"),
        ("extra", "no image row of the release"),
        ("twice", "appears twice"),
        ("other-sample", "in the file but"),
        ("no-column", "needs a 'prediction' column"),
        ("not-a-number", "is not a number"),
    ],
)
def test_bad_prediction_files_are_one_line_errors_naming_the_file(
    small_releases: dict[str, Path], tmp_path: Path, case: str, needle: str
) -> None:
    release = small_releases["mixcube"]
    rows = [[i, r["sample_id"], r["country"]] for i, r in enumerate(default_rows(release))]
    header = ["index", "sample_id", "prediction"]
    if case == "none":
        rows = []
    elif case == "extra":
        rows.append([len(rows), "x", "Korea"])
    elif case == "twice":
        rows.append(rows[0])
    elif case == "other-sample":
        rows[1][1] = rows[0][1]
    elif case == "no-column":
        header = ["index", "sample_id", "answer"]
    elif case == "not-a-number":
        rows[0][0] = "first"
    file = write_tsv(tmp_path / "m_MixCuBe.tsv", header, rows)
    out = tmp_path / "out"
    result = invoke("evaluate", "mixcube", str(release), "--predictions", str(file), "--out", str(out))
    assert result.exit_code == 2, result.output
    line = error_line(result.output, needle)
    assert str(file) in " ".join(result.output.split()) or file.name in line
    assert not out.exists()


def test_vlmevalkits_failed_rows_are_unanswered_not_wrong(small_releases: dict[str, Path], tmp_path: Path) -> None:
    """VLMEvalKit writes its FAIL_MSG for a row whose call failed: not a wrong answer, a row without one."""
    from evaluation.harnesses.predictions.vlmevalkit import FAILED_ROW

    release = small_releases["mixcube"]
    rows = default_rows(release)
    failed = {1, 4}
    predictions = [[i, f"{FAILED_ROW} via API." if i in failed else r["country"]] for i, r in enumerate(rows)]
    file = write_tsv(tmp_path / "m_MixCuBe.tsv", ["index", "prediction"], predictions)
    out = tmp_path / "out"
    result = invoke("evaluate", "mixcube", str(release), "--predictions", str(file), "--out", str(out))
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["coverage"]["answered_images"] == len(rows) - len(failed)
    assert metrics["images"] == len(rows) - len(failed) and metrics["accuracy"] == 1.0  # each names its culture
    scored = {r["sample_id"] for r in pq.read_table(out / "per_query.parquet").to_pylist()}
    assert scored == {r["sample_id"] for i, r in enumerate(rows) if i not in failed}


@pytest.mark.slow
def test_a_partial_run_is_scored_on_its_answered_images_and_says_its_coverage(
    small_releases: dict[str, Path], demo_run: Path, tmp_path: Path
) -> None:
    """lmms-eval's --limit answers the first rows only: scored on those, never silently (metrics.json and card)."""
    release = small_releases["mixcube"]
    predictions = demo_predictions(release, demo_run)
    kept = predictions[::3]  # every third row: not a prefix, so the filter is by id, not by position
    file = write_tsv(tmp_path / "demo-vlm_MixCuBe.tsv", ["index", "sample_id", "prediction"], kept)
    out = tmp_path / "out"
    result = invoke("evaluate", "mixcube", str(release), "--predictions", str(file), "--out", str(out))
    assert result.exit_code == 0, result.output
    ids = [r["sample_id"] for r in default_rows(release)]
    answered = [ids[int(index)] for index, _, _ in kept]
    ours = pq.read_table(out / "per_query.parquet").to_pylist()
    assert [r["sample_id"] for r in ours] == answered
    theirs = {r["sample_id"]: r for r in pq.read_table(demo_run / "per_query.parquet").to_pylist()}
    assert [r["correct"] for r in ours] == [theirs[i]["correct"] for i in answered]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["images"] == len(kept)
    assert metrics["coverage"] == {
        "answered_images": len(kept), "release_images": len(ids), "share": len(kept) / len(ids)
    }  # fmt: skip
    scored = [theirs[i]["correct"] for i in answered if theirs[i]["correct"] is not None]
    assert metrics["accuracy"] == (sum(scored) / len(scored) if scored else None)
    card = (out / "README.md").read_text()
    assert f"answers {len(kept)} of the release's {len(ids)} images" in card.replace("\n", " ")
    # a full file says nothing of coverage: its metrics are as before
    (tmp_path / "full").mkdir()
    full = write_tsv(tmp_path / "full" / "demo-vlm_MixCuBe.tsv", ["index", "sample_id", "prediction"], predictions)
    result = invoke("evaluate", "mixcube", str(release), "--predictions", str(full), "--out", str(tmp_path / "f"))
    assert result.exit_code == 0, result.output
    assert "coverage" not in json.loads((tmp_path / "f" / "metrics.json").read_text())


def test_predictions_refuse_a_model_too_and_other_formats(small_releases: dict[str, Path], tmp_path: Path) -> None:
    release = str(small_releases["mixcube"])
    file = write_tsv(tmp_path / "m_MixCuBe.tsv", ["index", "prediction"], [[0, "x"]])
    result = invoke("evaluate", "mixcube", release, "--predictions", str(file), "--demo-model")
    assert result.exit_code == 2
    error_line(result.output, "--predictions replaces the model")
    result = invoke("evaluate", "mixcube", release, "--predictions", str(file), "--predictions-format", "nope")
    assert result.exit_code == 2
    error_line(result.output, "not one of")
    odd = tmp_path / "m_MixCuBe.json"
    odd.write_text("{}")
    result = invoke("evaluate", "mixcube", release, "--predictions", str(odd), "--out", str(tmp_path / "o"))
    assert result.exit_code == 2
    error_line(result.output, ".xlsx, .tsv, .csv")
    full = [[i, "x"] for i in range(len(default_rows(small_releases["mixcube"])))]
    unnamed = write_tsv(tmp_path / "answers.tsv", ["index", "prediction"], full)
    result = invoke("evaluate", "mixcube", release, "--predictions", str(unnamed), "--out", str(tmp_path / "o"))
    assert result.exit_code == 2
    error_line(result.output, "--predictions-model")


def test_a_plain_sample_id_prediction_csv_scores_as_the_index_file(
    small_releases: dict[str, Path], tmp_path: Path
) -> None:
    """People's own scripts write `sample_id,prediction`, without VLMEvalKit's `index`: read by id, in any order."""
    release = small_releases["mixcube"]
    rows = default_rows(release)
    answers = [r["country"] if i % 3 else "no idea" for i, r in enumerate(rows)]
    by_index = write_tsv(tmp_path / "m_MixCuBe.tsv", ["index", "prediction"], [[i, a] for i, a in enumerate(answers)])
    plain = tmp_path / "plain.csv"
    with plain.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["sample_id", "prediction"])
        writer.writerows(reversed([[r["sample_id"], a] for r, a in zip(rows, answers, strict=True)]))
    runs = {}
    for name, file in (("index", by_index), ("plain", plain)):
        out = tmp_path / name
        result = invoke("evaluate", "mixcube", str(release), "--predictions", str(file), "--predictions-model", "m",
                        "--out", str(out))  # fmt: skip
        assert result.exit_code == 0, result.output
        runs[name] = pq.read_table(out / "per_query.parquet").select(["sample_id", "answer", "correct"])
    assert runs["plain"].equals(runs["index"])
    # an id the release does not have, and one given twice, are one line each, naming the file
    release_rows_ = release_rows(release / "default")
    for case, lines, needle in (
        ("unknown", [["nope", "x"]], "sample 'nope' is no row of the release"),
        ("twice", [[rows[0]["sample_id"], "x"], [rows[0]["sample_id"], "y"]], "appears twice"),
    ):
        bad = write_tsv(tmp_path / f"{case}.tsv", ["sample_id", "prediction"], lines)
        with pytest.raises(PredictionsError) as raised:
            reader.read_predictions(bad, release_rows_)
        assert needle in str(raised.value) and str(bad) in str(raised.value) and "\n" not in str(raised.value)
    neither = write_tsv(tmp_path / "neither.tsv", ["id", "prediction"], [["a", "x"]])
    with pytest.raises(PredictionsError, match="an 'index' or 'sample_id' column"):
        reader.read_predictions(neither, release_rows_)


def test_reader_maps_index_to_sample_id_and_reads_csv(small_releases: dict[str, Path], tmp_path: Path) -> None:
    release = small_releases["mixcube"]
    rows = release_rows(release / "default")
    ids = rows.column("sample_id").to_pylist()
    file = tmp_path / "m_MixCuBe.csv"
    with file.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["index", "question", "prediction"])
        for i in reversed(range(len(ids))):  # any order; a text with a comma, a quote and a newline survives
            writer.writerow([f"{i}.0" if i % 2 else i, "q", f'answer, "{i}"\nline'])
    answers = reader.read_predictions(file, rows)
    assert answers == {sample_id: f'answer, "{i}"\nline' for i, sample_id in enumerate(ids)}
    assert reader.model_name(file) == "m"
    assert reader.model_name(tmp_path / "x.tsv") is None
    with pytest.raises(PredictionsError, match=re.escape("m_MixCuBe.csv")):
        reader.read_predictions(file, rows.slice(1))  # one index more than this release has


def test_an_xlsx_that_unpacks_huge_is_refused_before_it_is_unpacked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import zipfile

    import evaluation.harnesses.predictions.vlmevalkit as module

    monkeypatch.setattr(module, "MAX_PREDICTION_BYTES", 1000)  # a small cap stands for the real one
    path = tmp_path / "bomb_MixCuBe.xlsx"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("xl/workbook.xml", b"<" + b" " * 5000 + b"/>")  # compresses to a few bytes
    with pytest.raises(PredictionsError) as caught:
        reader.read_table(path)
    assert str(caught.value).startswith(f"{path}: xl/workbook.xml unpacks to more than")


def test_a_prediction_file_larger_than_any_real_one_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import evaluation.harnesses.predictions as predictions

    monkeypatch.setattr(predictions, "MAX_PREDICTION_BYTES", 10)
    path = tmp_path / "big_MixCuBe.tsv"
    path.write_text("index\tprediction\n" + "0\tKorea\n" * 10)
    with pytest.raises(PredictionsError, match=r"larger than .* not a prediction file"):
        predictions.read_prediction_bytes(path)
