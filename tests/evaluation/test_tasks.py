"""The evaluation's further tasks as a user meets them: `evaluate 3xcm --task retrieval|all` and `evaluate mixcube
--task audit` through the CLI on the small releases with the demo models, their part folders, `compare` across tasks,
and the task-dependent model config. The metrics themselves are tested in test_retrieval.py and test_bias_audit.py."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from datasets import load_dataset
from pydantic import ValidationError
from typer.testing import CliRunner

from evaluation import registry
from evaluation.mixcube.evaluate import EvaluateMixCubeConfig
from evaluation.results.folder import compare, headline_names
from flows.cli import app

JUDGE = ["--judge-base-url", "http://127.0.0.1:9/v1", "--judge-model", "j"]
RETRIEVAL_KEYS = {"precision@5", "diversity@5_country", "diversity@5_region", "mrr", "ndcg@5", "precision@5_en"}


def invoke(*args: object) -> tuple[int, str]:
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def evaluated(small_releases: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each task once, on the small releases, with the demo models (built once, shared through the module)."""
    root = tmp_path_factory.mktemp("tasks")
    common = ["--demo-model", "--bootstrap-resamples", "50", "--results-root", root / "results"]
    common += ["--embedding-cache", root / "cache"]
    runs = {
        "triplet": ("3xcm", []),
        "all": ("3xcm", ["--task", "all"]),
        "retrieval": ("3xcm", ["--task", "retrieval"]),
        "audit": ("mixcube", ["--task", "audit"]),
    }
    out = {}
    for name, (benchmark, extra) in runs.items():
        code, output = invoke("evaluate", benchmark, small_releases[benchmark], *extra, *common)
        assert code == 0, output
        out[name] = Path(json.loads(output.strip().splitlines()[-1])["out"])
    out["root"] = root
    return out


@pytest.mark.slow
def test_each_task_has_its_own_default_folder_and_the_papers_task_keeps_its_metrics_as_before(
    evaluated: dict[str, Path],
) -> None:
    assert evaluated["all"].name == evaluated["triplet"].name + "--all"
    assert evaluated["retrieval"].name == evaluated["triplet"].name + "--retrieval"
    assert evaluated["audit"].name.endswith("--audit")
    triplet = json.loads((evaluated["triplet"] / "metrics.json").read_text())
    assert "tasks" not in triplet and "retrieval" not in triplet and "task" not in triplet["settings"]
    both = json.loads((evaluated["all"] / "metrics.json").read_text())
    assert both["tasks"] == ["triplet", "retrieval"] and both["settings"]["task"] == "all"
    # The triplet figures are the same numbers whichever way they were asked for.
    headline = registry.get("3xcm").task("triplet").headline
    assert {k: both[k] for k in headline} == {k: triplet[k] for k in headline}
    assert set(both) >= RETRIEVAL_KEYS and set(both["ci95"]) >= RETRIEVAL_KEYS


@pytest.mark.slow  # `evaluated`: four tiny-model evaluations
def test_a_retrieval_result_is_a_part_folder_that_datasets_loads(evaluated: dict[str, Path]) -> None:
    folder = evaluated["retrieval"]
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics["tasks"] == ["retrieval"] and not (folder / "per_query.parquet").exists()
    assert set(metrics) >= RETRIEVAL_KEYS and isinstance(metrics["retrieval"], dict)
    per_query = pq.read_table(folder / "retrieval" / "per_query.parquet")
    assert per_query.num_rows > 0
    loaded = load_dataset(str(folder), split="test")  # the part's per-query table is the default config
    assert len(loaded) == per_query.num_rows
    assert (folder / "retrieval" / "figures" / "precision_diversity.png").read_bytes().startswith(b"\x89PNG")
    card = (folder / "README.md").read_text()
    assert "GlobalRG" in card and "retrieval/figures/precision_diversity.png" in card
    manifest = json.loads((folder / "manifest.json").read_text())
    assert any(f.startswith("retrieval/") for f in manifest["files"]), manifest["files"]


@pytest.mark.slow  # `evaluated`: four tiny-model evaluations
def test_the_audit_runs_on_an_encoder_and_says_first_that_placeholder_syntheses_make_it_meaningless(
    evaluated: dict[str, Path],
) -> None:
    folder = evaluated["audit"]
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics["tasks"] == ["audit"] and metrics["benchmark"] == "mixcube"
    assert metrics["model"]["backend"] == "open_clip"  # an encoder, not a VLM
    assert isinstance(metrics["max_skew"], dict) and metrics["max_skew"]
    assert all(f"max_skew.{name}" in metrics["ci95"] for name in metrics["max_skew"])
    card = (folder / "README.md").read_text()
    body = card.split("\n# ", 1)[1]
    first_warning = body.index("> **Warning.**")
    assert "placeholder" in body[first_warning : body.index("\n", first_warning)].lower()
    assert first_warning < body.index("## What was evaluated")
    assert (folder / "audit" / "figures" / "skew_heatmap.png").is_file()


@pytest.mark.slow  # `evaluated`: four tiny-model evaluations
def test_compare_shows_every_tasks_metrics_side_by_side(evaluated: dict[str, Path], tmp_path: Path) -> None:
    table, figure, markdown = compare([evaluated["triplet"], evaluated["retrieval"], evaluated["all"]])
    metrics = set(table["metric"].to_pylist())
    assert set(registry.get("3xcm").task("triplet").headline) | RETRIEVAL_KEYS <= metrics
    assert {f"ravenea.{m}@{k}" for m in ("precision", "ndcg") for k in (1, 3, 5)} | {"ravenea.mrr"} <= metrics
    mrr = [r["value"] for r in table.to_pylist() if r["metric"] == "mrr"]
    assert len(mrr) == 3 and mrr[0] is None and None not in mrr[1:]  # the triplet-only result has none
    assert "mrr" in markdown.splitlines()[0] and figure.startswith(b"\x89PNG")
    audit = json.loads((evaluated["audit"] / "metrics.json").read_text())
    skews = [f"max_skew.{name}" for name in audit["max_skew"]]
    pairs = [f"max_skew_max_pair.{name}" for name in audit["max_skew_max_pair"]]
    assert headline_names("mixcube", audit) == skews + pairs + list(registry.get("mixcube").task("audit").headline[2:])
    code, output = invoke("evaluate", "compare", evaluated["audit"], evaluated["audit"], "--out", tmp_path / "cmp")
    assert code == 0 and "max_skew." in output, output


@pytest.mark.slow  # `evaluated`: four tiny-model evaluations
def test_a_rerun_of_a_task_is_unchanged_and_another_task_at_the_same_path_is_refused(
    small_releases: dict[str, Path], evaluated: dict[str, Path]
) -> None:
    root = evaluated["root"]
    common = ["--demo-model", "--bootstrap-resamples", "50", "--embedding-cache", root / "cache"]
    common += ["--results-root", root / "results"]
    code, output = invoke("evaluate", "3xcm", small_releases["3xcm"], "--task", "retrieval", *common)
    assert code == 0 and '"status": "unchanged"' in output, output
    code, output = invoke("evaluate", "3xcm", small_releases["3xcm"], *common, "--out", evaluated["retrieval"])
    assert code == 1 and "other settings" in output, output


def test_the_model_section_is_read_as_the_tasks_kind_of_model(small_releases: dict[str, Path]) -> None:
    release = str(small_releases["mixcube"])
    audit = EvaluateMixCubeConfig.model_validate(
        {"release": release, "task": "audit", "model": {"backend": "transformers", "model": "/m"}}
    )
    questions = EvaluateMixCubeConfig.model_validate(
        {"release": release, "model": {"backend": "transformers", "model": "/m"}}
    )
    assert type(audit.model).__module__ == "evaluation.models.encoders.transformers"
    assert type(questions.model).__module__ == "evaluation.models.vlm.transformers"
    with pytest.raises(ValidationError, match="model"):
        EvaluateMixCubeConfig.model_validate({"release": release, "task": "audit", "model": {"backend": "openai"}})


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--task", "audit", "--model-backend", "openai", "--base-url", "http://127.0.0.1:9/v1"], "model"),
        (["--task", "audit", "--demo-model", "--judge-backend", "openai", *JUDGE], "no judge"),
        (["--task", "questions", "--model-backend", "open_clip", "--model-name", "x"], "model"),
    ],
)
def test_a_model_of_the_wrong_kind_for_the_task_is_one_line(
    small_releases: dict[str, Path], tmp_path: Path, args: list[str], says: str
) -> None:
    code, output = invoke("evaluate", "mixcube", small_releases["mixcube"], *args, "--out", tmp_path / "r")
    lines = [line for line in output.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and says in lines[0], output
    assert not (tmp_path / "r").exists()
