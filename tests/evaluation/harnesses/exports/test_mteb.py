"""`culturebench export --harness mteb`: the export's format and its smoke copy (always); and, in the mteb venv
(`make harnesses`), the export README's commands run as written with tiny local checkpoints (open_clip in its
local-dir layout, a Hugging Face CLIP folder): mteb's per-subset accuracies are our per-language and overall M_cr,
the vectors the run saved give our own backends' metrics, and the README's check finds a failed run; the smoke test
on the folder docs/researchers.md makes from the demo's model, whose results the full check never takes."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data.publish.reader import Release
from data.schemas import RQ2_SLOTS, RQ3_SLOTS
from evaluation.harnesses.exports import mteb as mteb_export
from evaluation.harnesses.exports.common import ExportError, run_export
from tests.support.demo_checkpoint import demo_clip
from tests.support.paths import REPO_ROOT
from tests.support.release_tamper import rehash_manifest

ROOT = REPO_ROOT
HARNESS_BIN = ROOT / ".venv-harness-embedding" / "bin"
PROJECT_BIN = ROOT / ".venv" / "bin"
RQ2, RQ3 = mteb_export.TASKS
#: What a shipped module may import besides the standard library: never culturebench.
SHIPPED_IMPORTS = {"mteb", "torch", "numpy", "PIL", "open_clip", "transformers", "pyarrow", "datasets"}

# Its tests are `slow` (tests/support/scheduling.py): an export of the small release, out of `make test-fast`.
SLOW_FIXTURES = {"export"}


@pytest.fixture(scope="module")
def export(small_releases: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("mteb-export") / "export"
    result = run_export(small_releases["3xcm"], "mteb", out)
    assert result.status == "created"
    return out


def _languages(rows: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["query_language"]] = counts.get(row["query_language"], 0) + 1
    return counts


def test_layout_and_counts(export: Path, small_releases: dict[str, Path]) -> None:
    release = Release.open(small_releases["3xcm"])
    images = release.table("image_metadata", ["image_id", "image"])
    corpus = pq.read_table(export / "data" / "corpus.parquet")
    assert corpus["id"].to_pylist() == images["image_id"].to_pylist()
    assert corpus["image"].to_pylist() == images["image"].to_pylist()  # the released bytes, unchanged
    assert json.loads(corpus.schema.metadata[b"huggingface"])["info"]["features"]["image"] == {"_type": "Image"}
    readme = (export / "README.md").read_text()
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
    # The README's table: `all`, then each query language, with each task's count of queries.
    rq2, rq3 = (_languages(release.table(c).to_pylist()) for c in ("benchmark", "benchmark_cd"))
    assert len(rq2) > 1
    assert f"| `all` | {sum(rq2.values())} | {sum(rq3.values())} |" in readme
    for lang in sorted(set(rq2) | set(rq3)):
        assert f"| `{lang}` | {rq2.get(lang, 0)} | {rq3.get(lang, 0)} |" in readme
    assert "--model-backend embeddings" in readme and "M_cr" in readme and "SP" in readme

    # Every text our scorer encodes: both tables' queries and Δsim's q_C (the query image's concept_in_native).
    metadata = release.table("image_metadata", ["image_id", "concept_in_native"]).to_pylist()
    native = {row["image_id"]: row["concept_in_native"] for row in metadata}
    cd = release.table("benchmark_cd").to_pylist()
    wanted = {r["query_text"] for r in release.table("benchmark").to_pylist() + cd} | {
        native[r["query_image_id"]] for r in cd
    }
    assert pq.read_table(export / "data" / "texts.parquet")["text"].to_pylist() == sorted(wanted)
    identity = json.loads((export / "data" / "release.json").read_text())
    assert identity == {"name": "3xcm", "version": release.version, "manifest_sha256": release.manifest_sha256}


def test_shipped_modules_are_the_templates_and_import_no_culturebench(export: Path) -> None:
    templates = Path(mteb_export.__file__).parent
    for shipped, template in mteb_export.MODULES.items():
        source = (export / shipped).read_text()
        assert source == (templates / template).read_text()
        imported = set()
        for node in ast.walk(ast.parse(source, shipped)):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
        assert imported - sys.stdlib_module_names - {"__future__"} <= SHIPPED_IMPORTS, (shipped, imported)
    # The tasks' names are the export's, and their descriptions give our slot order.
    tasks = {}
    for node in ast.parse((export / mteb_export.TASK_MODULE).read_text()).body:
        for statement in node.body if isinstance(node, ast.ClassDef) else []:
            if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Call):
                name, description = (ast.literal_eval(arg) for arg in statement.value.args)
                tasks[name] = description
    assert set(tasks) == set(mteb_export.TASKS)
    for task, (_, categories, _) in mteb_export.TASKS.items():
        assert f"slot order {', '.join(categories)})" in tasks[task]


def test_the_smoke_copy_is_the_export_on_a_few_queries_of_each_task(export: Path) -> None:
    smoke = export / mteb_export.SMOKE
    for shipped in mteb_export.MODULES:  # the same modules, reading their own data/
        assert (smoke / shipped).read_bytes() == (export / shipped).read_bytes()
    identity = json.loads((export / "data" / "release.json").read_text())
    assert json.loads((smoke / "data" / "release.json").read_text()) == identity | {
        "smoke_queries": mteb_export.SMOKE_QUERIES
    }
    corpus = pq.read_table(export / "data" / "corpus.parquet")
    candidates: set[str] = set()
    texts: set[str] = set()
    assert sorted(p.name for p in (smoke / "data").iterdir() if p.is_dir()) == sorted(
        f"{task}{mteb_export.SMOKE_SUFFIX}" for task in mteb_export.TASKS
    )  # named apart from the full tasks
    for task in mteb_export.TASKS:
        full = {name: pq.read_table(export / "data" / task / f"{name}.parquet").to_pylist()
                for name in ("queries", "qrels", "top_ranked")}  # fmt: skip
        cut = {name: pq.read_table(smoke / "data" / f"{task}Smoke" / f"{name}.parquet").to_pylist()
               for name in ("queries", "qrels", "top_ranked")}  # fmt: skip
        rows = [q["row"] for q in cut["queries"]]
        assert len(rows) == min(mteb_export.SMOKE_QUERIES, len(full["queries"])) and rows == sorted(rows)
        for name in full:  # the full task's rows, unchanged, aligned
            assert cut[name] == [full[name][row] for row in rows], (task, name)
        languages = {q["query_language"] for q in full["queries"]}
        assert len({q["query_language"] for q in cut["queries"]}) == min(len(rows), len(languages))
        candidates |= {image for top in cut["top_ranked"] for image in top["corpus-ids"]}
        texts |= {q["text"] for q in cut["queries"]}
    small = pq.read_table(smoke / "data" / "corpus.parquet")
    assert small["id"].to_pylist() == [i for i in corpus["id"].to_pylist() if i in candidates]  # in corpus order
    assert small.schema == corpus.schema
    position = {image_id: at for at, image_id in enumerate(corpus["id"].to_pylist())}
    images = corpus["image"].to_pylist()
    assert small["image"].to_pylist() == [images[position[i]] for i in small["id"].to_pylist()]
    assert pq.read_table(smoke / "data" / "texts.parquet")["text"].to_pylist() == sorted(texts)


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


def test_a_query_language_named_like_the_overall_subset_is_refused(
    small_releases: dict[str, Path], tmp_path: Path
) -> None:
    release = tmp_path / "release"
    shutil.copytree(small_releases["3xcm"], release)
    (part,) = sorted((release / "benchmark").glob("*.parquet"))
    table = pq.read_table(part)
    languages = table["query_language"].to_pylist()
    languages[3] = "all"
    at = table.schema.get_field_index("query_language")
    pq.write_table(table.set_column(at, table.schema.field(at), pa.array(languages, pa.string())), part)
    rehash_manifest(release)
    with pytest.raises(ExportError) as caught:
        run_export(release, "mteb", tmp_path / "out")
    message = str(caught.value)
    assert "\n" not in message and str(part) in message and "row 3" in message and "'query_language'" in message
    assert not (tmp_path / "out").exists()


def test_url_only_release_refused(small_releases: dict[str, Path], tmp_path: Path, monkeypatch: Any) -> None:
    from evaluation.harnesses.exports import common

    real_open = Release.open

    def url_only(path: str | Path) -> Release:
        release = real_open(path)
        manifest = release.manifest.model_copy(update={"mode": "urls"})
        return Release(release.path, release.name, release.version, release.manifest_sha256, manifest)

    monkeypatch.setattr(common.Release, "open", staticmethod(url_only))
    with pytest.raises(common.ExportError, match="URL-only"):
        run_export(small_releases["3xcm"], "mteb", tmp_path / "x")
    assert not (tmp_path / "x").exists()


# --- the README's commands, run as written ------------------------------------------------------------------------


def _needs_harness() -> None:
    if not (HARNESS_BIN / "python").is_file():
        pytest.skip("the mteb venv .venv-harness-embedding is missing: run `make harnesses`")


def _readme_blocks(export: Path) -> tuple[str, str, str]:
    """The README's three commands: the smoke test and the run (mteb's environment), then the evaluation of the
    run's vectors (ours)."""
    text = (export / "README.md").read_text(encoding="utf-8")
    smoke, run, evaluate = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    return smoke, run, evaluate


def _env(tmp_path: Path, bin_folder: Path, **variables: str) -> dict[str, str]:
    """Offline, with `python` / `culturebench` from `bin_folder` first on PATH, and the README's variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "MTEB_"))}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    env["PATH"] = f"{bin_folder}{os.pathsep}{env.get('PATH', '')}"
    return env | variables


def _bash(command: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", command], env=env, cwd=cwd, capture_output=True, text=True, timeout=600)


def _run_readme(export: Path, tmp_path: Path, model: str) -> tuple[Path, subprocess.CompletedProcess[str]]:
    out = tmp_path / "out"
    env = _env(tmp_path, HARNESS_BIN, EXPORT=str(export), MODEL=model, OUT=str(out))
    return out, _bash(_readme_blocks(export)[1], env, tmp_path)


def _results(out: Path, proc: subprocess.CompletedProcess[str]) -> tuple[Path, dict[str, dict[str, float]]]:
    """(the model's result folder, task -> subset -> accuracy), read from mteb's result files, not the exit code."""
    folders = sorted({p.parent for p in (out / "results").glob("*/*/*.json") if p.name != "model_meta.json"})
    assert len(folders) == 1, f"mteb left {folders} ({proc.returncode}):\n{proc.stderr[-4000:]}"
    scores = {}
    for task in mteb_export.TASKS:
        result = json.loads((folders[0] / f"{task}.json").read_text())
        scores[task] = {entry["hf_subset"]: entry["accuracy"] for entry in result["scores"]["test"]}
    return folders[0], scores


def _rounded_m_cr(group: dict[str, Any]) -> float:
    """M_cr of one of our groups as mteb writes its scores (5 decimals; the wins they imply are exact)."""
    return round(group["wins"]["correct"] / group["n"], 5)


def _assert_accuracies_are_our_m_cr(scores: dict[str, dict[str, float]], metrics: dict[str, Any]) -> None:
    for task, key in ((RQ2, "rq2"), (RQ3, "rq3")):
        ours = {"all": metrics[key]["overall"], **{g["group"]: g for g in metrics[key]["by_language"]}}
        assert set(scores[task]) == set(ours), (task, scores[task])
        for subset, group in ours.items():
            assert scores[task][subset] == _rounded_m_cr(group), (task, subset, scores[task][subset], group)
    assert scores[RQ2]["all"] == round(metrics["M_cr"], 5)


def _check(export: Path, out: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The README's failure check, in mteb's environment."""
    env = _env(tmp_path, HARNESS_BIN, EXPORT=str(export), OUT=str(out))
    return _bash('python "$EXPORT/run_mteb.py" --check "$OUT"', env, tmp_path)


@pytest.mark.harness
def test_mteb_accuracy_equals_our_m_cr_through_the_readme_commands(
    export: Path, small_releases: dict[str, Path], tmp_path: Path
) -> None:
    _needs_harness()
    from evaluation.models.encoders.open_clip import OpenClipEncoderConfig
    from evaluation.xcm.task import evaluate_3xcm
    from tests.support.mteb_models import local_open_clip

    model = local_open_clip(tmp_path / "model")
    out, proc = _run_readme(export, tmp_path, f"open_clip:local-dir:{model.folder}")
    folder, scores = _results(out, proc)

    # The README's second command: our scorer on the vectors the run saved.
    results = tmp_path / "results"
    env = _env(tmp_path, PROJECT_BIN, RELEASE=str(small_releases["3xcm"]), OUT=str(out), RESULTS=str(results))
    evaluated = _bash(_readme_blocks(export)[2], env, tmp_path)
    assert (results / "metrics.json").is_file(), evaluated.stderr[-4000:]
    fed = json.loads((results / "metrics.json").read_text())

    # Our open_clip backend on the same weights, with the bootstrap the command used.
    release = Release.open(small_releases["3xcm"])
    config = OpenClipEncoderConfig(
        model_name=model.name, pretrained=str(model.weights), model_config_dir=str(model.configs), device="cpu"
    )
    settings = fed["settings"]
    ours = evaluate_3xcm(release, config.build(), n_resamples=settings["bootstrap_resamples"], seed=settings["seed"])
    metrics = json.loads(json.dumps(ours.metrics))
    # Ties are broken differently (ours: the earlier slot; pytrec_eval: the larger image id): none may decide here.
    assert "ties" not in metrics and "ties" not in fed
    _assert_accuracies_are_our_m_cr(scores, metrics)
    # The saved vectors give every number of our open_clip run; Δsim's mean cosines up to float noise.
    assert set(metrics) <= set(fed) and metrics["skipped"] == []
    for key, value in metrics.items():
        if key != "delta_sim":
            assert fed[key] == value, key
    _assert_close(fed["delta_sim"], metrics["delta_sim"])

    # Query by query: mteb's top candidate is the correct image exactly where our winner is `correct`.
    for task, per_query in ((RQ2, ours.per_query), (RQ3, ours.tables["per_query_rq3"])):
        predictions = json.loads((out / "predictions" / folder.relative_to(out / "results") /
                                  f"{task}_predictions.json").read_text())  # fmt: skip
        ranked = predictions["all"]["test"]
        top = {qid: max(s.items(), key=lambda item: (item[1], item[0]))[0] for qid, s in ranked.items()}
        qrels = pq.read_table(export / "data" / task / "qrels.parquet").to_pylist()
        mteb_correct = [top[q["query-id"]] == q["corpus-id"] for q in qrels]
        assert mteb_correct == [w == "correct" for w in per_query["winner"].to_pylist()]

    # The README's check: passes on this run, and names what a failed one lacks.
    check = _check(export, out, tmp_path)
    assert check.returncode == 0 and check.stdout.count("accuracy=") == sum(map(len, scores.values())), check.stderr
    for tamper, needle in (
        (lambda d: (d / f"{RQ3}.json").unlink(), f"{RQ3}.json: missing"),
        (lambda d: _drop_subset(d / f"{RQ2}.json", "sw" if "sw" in scores[RQ2] else "all"), "no accuracy for subset"),
        (lambda d: _set_revision(d / f"{RQ2}.json", "0" * 64), "is not this export's"),
    ):
        broken = tmp_path / "broken"
        shutil.rmtree(broken, ignore_errors=True)
        shutil.copytree(out, broken)
        tamper(broken / "results" / folder.relative_to(out / "results"))
        failed = _check(export, broken, tmp_path)
        assert failed.returncode == 1 and needle in failed.stderr, failed.stderr


def _assert_close(got: Any, want: Any) -> None:
    """Equal structure and values, floats up to float32 noise (the run batches its inputs otherwise)."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), (got, want)
        for key in want:
            _assert_close(got[key], want[key])
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), (got, want)
        for g, w in zip(got, want, strict=True):
            _assert_close(g, w)
    elif isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-5, abs=1e-7)
    else:
        assert got == want


def _drop_subset(path: Path, subset: str) -> None:
    result = json.loads(path.read_text())
    result["scores"]["test"] = [e for e in result["scores"]["test"] if e["hf_subset"] != subset]
    path.write_text(json.dumps(result))


def _set_revision(path: Path, revision: str) -> None:
    result = json.loads(path.read_text())
    result["dataset_revision"] = revision
    path.write_text(json.dumps(result))


@pytest.mark.harness
def test_the_readme_command_with_a_local_hf_clip_saves_the_vectors_it_scored(
    export: Path, small_releases: dict[str, Path], tmp_path: Path
) -> None:
    _needs_harness()
    from evaluation.models.encoders.embeddings import EmbeddingsEncoderConfig
    from evaluation.models.encoders.transformers import TransformersEncoderConfig
    from evaluation.xcm.task import evaluate_3xcm
    from tests.support.tiny_text_image_models import build_tiny_hf_clip

    model = build_tiny_hf_clip(tmp_path / "hf-clip", seed=3)
    out, proc = _run_readme(export, tmp_path, f"hf-clip:{model}")
    _, scores = _results(out, proc)
    release = Release.open(small_releases["3xcm"])
    vectors = EmbeddingsEncoderConfig(
        image_embeddings=str(out / "vectors" / "IMG.parquet"), text_embeddings=str(out / "vectors" / "TXT.parquet")
    )
    fed = evaluate_3xcm(release, vectors.build(), n_resamples=10)
    ours = evaluate_3xcm(release, TransformersEncoderConfig(model=str(model), device="cpu").build(), n_resamples=10)
    assert "ties" not in fed.metrics and "ties" not in ours.metrics
    _assert_accuracies_are_our_m_cr(scores, json.loads(json.dumps(fed.metrics)))
    # Our transformers backend on the same folder picks the same winners.
    assert fed.per_query["winner"].to_pylist() == ours.per_query["winner"].to_pylist()
    assert fed.tables["per_query_rq3"]["winner"].to_pylist() == ours.tables["per_query_rq3"]["winner"].to_pylist()


@pytest.mark.harness
def test_a_failed_run_leaves_what_the_check_refuses(export: Path, tmp_path: Path) -> None:
    _needs_harness()
    empty = tmp_path / "no-model"
    empty.mkdir()
    out, proc = _run_readme(export, tmp_path, f"open_clip:local-dir:{empty}")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{empty}: no open_clip_config.json" in proc.stderr.strip().splitlines()[-1]
    check = _check(export, out, tmp_path)
    assert check.returncode == 1 and "no result of" in check.stderr, check.stderr


@pytest.mark.harness
def test_the_readme_smoke_test_runs_as_written_on_the_docs_demo_checkpoint(export: Path, tmp_path: Path) -> None:
    _needs_harness()
    model = demo_clip(tmp_path / "checkout")  # docs/researchers.md's commands, beside the demo's model
    smoke = tmp_path / "smoke"
    env = _env(tmp_path, HARNESS_BIN, EXPORT=str(export), MODEL=f"open_clip:local-dir:{model}", SMOKE=str(smoke))
    proc = _bash(_readme_blocks(export)[0], env, tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]  # the runner's own check passed
    folders = sorted({p.parent for p in (smoke / "results").glob("*/*/*.json") if p.name != "model_meta.json"})
    assert len(folders) == 1, folders
    for task in mteb_export.TASKS:
        queries = pq.read_table(export / "smoke" / "data" / f"{task}Smoke" / "queries.parquet").to_pylist()
        result = json.loads((folders[0] / f"{task}Smoke.json").read_text())
        scores = {entry["hf_subset"]: entry["accuracy"] for entry in result["scores"]["test"]}
        counts = {"all": len(queries), **_languages(queries)}
        assert set(scores) == set(counts), (task, scores)
        for subset, n in counts.items():  # each a share of its few queries
            assert abs(scores[subset] * n - round(scores[subset] * n)) < 1e-4, (task, subset, scores[subset])
        assert f"{task}Smoke\tall\taccuracy={scores['all']}" in proc.stdout
    # the full export's check does not take a smoke test's results for a run
    check = _check(export, smoke, tmp_path)
    assert check.returncode == 1 and "no result of" in check.stderr, check.stderr
