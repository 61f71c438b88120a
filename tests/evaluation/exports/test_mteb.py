"""`culturebench export --harness mteb`: the export's format (always), and MTEB 2.x itself running the exported
tasks offline in its own venv (`make harnesses`), cross-checked against our scorer on the same random open_clip."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from data.publish.reader import Release
from data.schemas import RQ2_SLOTS, RQ3_SLOTS
from evaluation.exports import mteb as mteb_export
from evaluation.exports.common import run_export
from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT
HARNESS_PYTHON = ROOT / ".venv-harness-embedding" / "bin" / "python"
RUN_SCRIPT = ROOT / "tests" / "support" / "harness_scripts" / "mteb_run.py"
RQ2, RQ3 = mteb_export.TASKS


@pytest.fixture(scope="module")
def export(small_releases: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("mteb-export") / "export"
    result = run_export(small_releases["3xcm"], "mteb", out)
    assert result.status == "created"
    return out


def test_layout_and_counts(export: Path, small_releases: dict[str, Path]) -> None:
    release = Release.open(small_releases["3xcm"])
    images = release.table("image_metadata", ["image_id", "image"])
    corpus = pq.read_table(export / "data" / "corpus.parquet")
    assert corpus["id"].to_pylist() == images["image_id"].to_pylist()
    assert corpus["image"].to_pylist() == images["image"].to_pylist()  # the released bytes, unchanged
    assert json.loads(corpus.schema.metadata[b"huggingface"])["info"]["features"]["image"] == {"_type": "Image"}
    for task, config, prefixes in (
        (RQ2, "benchmark", [p for _, p in RQ2_SLOTS]),
        (RQ3, "benchmark_cd", [f"{s}_candidate_" for s in RQ3_SLOTS]),
    ):
        rows = release.table(config).to_pylist()
        folder = export / "data" / task
        queries = pq.read_table(folder / "queries.parquet").to_pylist()
        qrels = pq.read_table(folder / "qrels.parquet").to_pylist()
        ranked = pq.read_table(folder / "top_ranked.parquet").to_pylist()
        assert len(queries) == len(qrels) == len(ranked) == len(rows) > 0
        for row, query, qrel, top in zip(rows, queries, qrels, ranked, strict=True):
            assert query["text"] == row["query_text"] and query["query_language"] == row["query_language"]
            assert qrel == {"query-id": query["id"], "corpus-id": row[f"{prefixes[0]}image_id"], "score": 1}
            assert top["corpus-ids"] == [row[f"{p}image_id"] for p in prefixes]
    readme = (export / "README.md").read_text()
    assert "--model-backend embeddings" in readme and "M_cr" in readme and "SP" in readme
    module = (export / mteb_export.TASK_MODULE).read_text()
    compile(module, mteb_export.TASK_MODULE, "exec")
    assert RQ2 in module and RQ3 in module and "VisionCentricQA" in module


def test_deterministic_and_refusals(export: Path, small_releases: dict[str, Path], tmp_path: Path) -> None:
    again = run_export(small_releases["3xcm"], "mteb", tmp_path / "again")
    files = sorted(p.relative_to(export) for p in export.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(tmp_path / "again") for p in (tmp_path / "again").rglob("*") if p.is_file())
    for rel in files:
        assert (export / rel).read_bytes() == (tmp_path / "again" / rel).read_bytes(), rel
    assert again.status == "created"
    assert run_export(small_releases["3xcm"], "mteb", export).status == "unchanged"
    with pytest.raises(Exception, match="mixcube release"):
        run_export(small_releases["mixcube"], "mteb", tmp_path / "mix")


def test_url_only_release_refused(small_releases: dict[str, Path], tmp_path: Path, monkeypatch: Any) -> None:
    from evaluation.exports import common

    real_open = Release.open

    def url_only(path: str | Path) -> Release:
        release = real_open(path)
        manifest = release.manifest.model_copy(update={"mode": "urls"})
        return Release(release.path, release.name, release.version, release.manifest_sha256, manifest)

    monkeypatch.setattr(common.Release, "open", staticmethod(url_only))
    with pytest.raises(common.ExportError, match="URL-only"):
        run_export(small_releases["3xcm"], "mteb", tmp_path / "x")
    assert not (tmp_path / "x").exists()


def _harness_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "MTEB_"))}
    env.update(
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_HOME=str(home / "hf"),
        MTEB_CACHE=str(home / "mteb"),
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
    )
    return env


def _top(predictions: dict[str, Any]) -> dict[str, str]:
    """mteb's top candidate per query, as pytrec_eval ranks (score, then doc id, descending)."""
    ranked = predictions["default"]["test"]
    return {qid: max(scores.items(), key=lambda item: (item[1], item[0]))[0] for qid, scores in ranked.items()}


@pytest.mark.harness
def test_mteb_accuracy_equals_our_m_cr(export: Path, small_releases: dict[str, Path], tmp_path: Path) -> None:
    if not HARNESS_PYTHON.is_file():
        pytest.skip("the mteb venv .venv-harness-embedding is missing: run `make harnesses`")
    from demo.models import random_open_clip
    from evaluation.encoders.embeddings import EmbeddingsEncoderConfig
    from evaluation.encoders.open_clip import OpenClipEncoderConfig
    from evaluation.xcm import evaluate_3xcm

    configs, weights = random_open_clip(tmp_path / "model")
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            str(HARNESS_PYTHON),
            str(RUN_SCRIPT),
            str(export),
            "--model-config-dir",
            str(configs),
            "--model-name",
            "tiny-clip-test",
            "--pretrained",
            str(weights),
            "--out",
            str(out),
        ],
        env=_harness_env(tmp_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    scores = json.loads((out / "scores.json").read_text())

    release = Release.open(small_releases["3xcm"])
    ours = evaluate_3xcm(
        release,
        OpenClipEncoderConfig(
            model_name="tiny-clip-test", pretrained=str(weights), model_config_dir=str(configs), device="cpu"
        ).build(),
        n_resamples=10,
    )
    fed = evaluate_3xcm(
        release,
        EmbeddingsEncoderConfig(
            image_embeddings=str(out / "images.parquet"), text_embeddings=str(out / "texts.parquet")
        ).build(),
        n_resamples=10,
    )
    # Ties are broken differently (ours: the earlier slot; pytrec_eval: the larger doc id): none may decide here.
    assert "ties" not in ours.metrics and "ties" not in fed.metrics
    for task, key, per_query in ((RQ2, "rq2", ours.per_query), (RQ3, "rq3", ours.tables["per_query_rq3"])):
        overall = ours.metrics[key]["overall"]
        wins, n = overall["wins"]["correct"], overall["n"]
        accuracy = scores[task]["accuracy"]
        # mteb rounds its scores to 5 decimals; the wins they imply are exact.
        assert round(accuracy * n) == wins, (task, accuracy, wins, n)
        assert accuracy == round(wins / n, 5) == scores[task]["recall_at_1"]
        assert accuracy == round(overall["rates"]["correct"]["value"], 5)
        # Query by query: mteb's top candidate is the correct image exactly where our winner is `correct`.
        top = _top(json.loads((out / "predictions" / f"{task}_predictions.json").read_text()))
        qrels = pq.read_table(export / "data" / task / "qrels.parquet").to_pylist()
        mteb_correct = [top[q["query-id"]] == q["corpus-id"] for q in qrels]
        assert mteb_correct == [w == "correct" for w in per_query["winner"].to_pylist()]
        # The vectors the mteb run computed, scored by us (M_lb, M_ti, SP...): our own open_clip run's wins.
        assert fed.metrics[key]["overall"]["wins"] == overall["wins"]
