"""What a `--predictions` result says its answers came from (`settings.predictions.harness`, the card's "answers
from" row): the file's actual format. VLMEvalKit's own file (an xlsx or tsv keyed by `index`: VLMEvalKit never
writes CSV) is VLMEvalKit's; a plain table of `sample_id` and `prediction` (people's own scripts), or any CSV, is a
CSV or TSV; an lmms-eval samples log is lmms-eval's. The label never changes the model id."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from tests.evaluation.harnesses.predictions.test_lmms_eval import SAMPLES, sample_line, write_samples
from tests.evaluation.harnesses.predictions.test_predictions import default_rows, invoke, write_tsv


def write_csv(path: Path, header: list[str], rows: list[list[Any]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def scored(release: Path, file: Path, out: Path, *extra: str) -> dict[str, Any]:
    result = invoke("evaluate", "mixcube", str(release), "--predictions", str(file), "--predictions-model", "m",
                    "--out", str(out), *extra)  # fmt: skip
    assert result.exit_code == 0, result.output
    metrics: dict[str, Any] = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    return {"metrics": metrics, "card": (out / "README.md").read_text(encoding="utf-8")}


@pytest.mark.parametrize(
    ("name", "header", "label"),
    [
        ("plain.csv", ["sample_id", "prediction"], "CSV"),
        ("m_MixCuBe.csv", ["index", "sample_id", "prediction"], "CSV"),  # an index, but VLMEvalKit writes no CSV
        ("plain.tsv", ["sample_id", "prediction"], "TSV"),
        ("m_MixCuBe.tsv", ["index", "sample_id", "prediction"], "VLMEvalKit"),
    ],
)
def test_the_label_follows_the_files_format(
    small_releases: dict[str, Path], tmp_path: Path, name: str, header: list[str], label: str
) -> None:
    release = small_releases["mixcube"]
    rows = [{"index": i, "sample_id": r["sample_id"], "prediction": r["country"]} for i, r in
            enumerate(default_rows(release))]  # fmt: skip
    cells = [[row[column] for column in header] for row in rows]
    write = write_tsv if name.endswith(".tsv") else write_csv
    file = write(tmp_path / name, header, cells)
    result = scored(release, file, tmp_path / "out")
    source = result["metrics"]["settings"]["predictions"]
    assert source["harness"] == label and source["format"] == "vlmevalkit" and source["file"] == name
    assert f"{label} prediction file" in result["card"]
    if label != "VLMEvalKit":
        assert "VLMEvalKit" not in result["card"]
    # the label is the source's, not the model's: the model id is the reader's format and the model's name
    assert result["metrics"]["model"]["model_id"] == "vlmevalkit--m"


def test_an_lmms_eval_log_is_lmms_evals(small_releases: dict[str, Path], tmp_path: Path) -> None:
    release = small_releases["mixcube"]
    lines = [sample_line(i, r["sample_id"], r["country"]) for i, r in enumerate(default_rows(release))]
    file = write_samples(tmp_path / "log" / SAMPLES, lines)
    result = scored(release, file, tmp_path / "out", "--predictions-format", "lmms-eval")
    assert result["metrics"]["settings"]["predictions"]["harness"] == "lmms-eval"
    assert "lmms-eval prediction file" in result["card"]


def test_a_file_of_another_kind_is_refused_naming_what_is_read(small_releases: dict[str, Path], tmp_path: Path) -> None:
    odd = tmp_path / "m_MixCuBe.json"
    odd.write_text("{}", encoding="utf-8")
    result = invoke("evaluate", "mixcube", str(small_releases["mixcube"]), "--predictions", str(odd), "--out",
                    str(tmp_path / "o"))  # fmt: skip
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "plain table of sample_id and prediction" in result.output and ".xlsx, .tsv, .csv" in result.output
