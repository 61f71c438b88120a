"""`culturebench export RELEASE --harness mteb`: 3XCM's RQ2 and RQ3 as MTEB 2.x (MIEB) text-to-image
multiple-choice tasks, shaped like MIEB's ImageCoDe / BLINK multi-choice tasks (`AbsTaskRetrieval`, type
`VisionCentricQA`, main score `accuracy` = recall@1 over each query's own candidates, `top_ranked`), with a runner
for local CLIP checkpoints that also saves the vectors our scorer reads.

The export holds three modules, copied unchanged from their templates here (none imports culturebench):

- `culturebench_3xcm_mteb.py` (`mteb_tasks.py`): the two tasks, each with the subset `all` (every query: M_cr)
  and one subset per query language (M_cr of that language);
- `local_clip_mteb.py` (`mteb_adapter.py`): mteb encoders for a local open_clip or Hugging Face CLIP checkpoint,
  computing vectors as our open_clip and transformers backends do;
- `run_mteb.py` (`mteb_runner.py`): runs both tasks with such a checkpoint (`--model`), writes mteb's results,
  saves the vectors (`--save-vectors`) and checks that every result is there (`--check`);

and the data they read, in `data/`:

- `release.json`: the release's name, version and manifest sha256 (mteb's dataset revision);
- `corpus.parquet`: every image of the release (`id` = image_id, `image` = an HF Image column, the released
  bytes unchanged), so saved image vectors cover the release, as `--model-backend embeddings` needs;
- `texts.parquet`: every text our scorer encodes (the RQ2 and RQ3 query texts, and Δsim's plain queries q_C),
  so saved text vectors cover them;
- `<task>/queries.parquet`: one row per benchmark row (`id` = `q` + row position, `text` = query_text, and the
  query's language, country, concept and image for grouping);
- `<task>/qrels.parquet`: the correct candidate of each query (`query-id`, `corpus-id`, `score` = 1);
- `<task>/top_ranked.parquet`: each query's candidates in slot order (`query-id`, `corpus-ids`, `categories`);

and `smoke/`, the same three modules and data for `SMOKE_QUERIES` queries of each task (a query language at a
time), their candidates and texts only: the README's smoke test runs `smoke/run_mteb.py` as the full run runs
`run_mteb.py`. Its `release.json` adds `smoke_queries`, and its tasks are named with `Smoke` at the end (their
data in `smoke/data/<task>Smoke/`), so that a smoke test's results never pass for the full tasks'. mteb has no
option that limits a task's queries (`hf_subsets` picks whole languages), and the runner none either.

Ties: our scorer gives an exact tie to the earlier slot (correct first); mteb ranks by score, and pytrec_eval (its
recall@1) breaks a tie by corpus id, descending. The two agree whenever the correct candidate's score differs from
every other candidate's, which is what the tests check (and our evaluation counts tied winners).
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from data.publish.folder import ImmutableFolder
from data.publish.reader import Release
from data.schemas import RQ2_SLOTS, RQ3_SLOTS
from evaluation.harnesses.exports.common import (
    README,
    Allowed,
    ExportError,
    check_values,
    plain_text,
    released_images,
    require_columns,
    spread,
)
from evaluation.xcm.metrics import plain_query_texts

BENCHMARKS = ("3xcm",)
#: shipped name -> its template, next to this module
MODULES = {
    "culturebench_3xcm_mteb.py": "mteb_tasks.py",
    "local_clip_mteb.py": "mteb_adapter.py",
    "run_mteb.py": "mteb_runner.py",
}
TASK_MODULE = "culturebench_3xcm_mteb.py"
RUNNER = "run_mteb.py"
#: task name -> (release config, slot categories, the candidate-column prefix of each slot)
TASKS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "CultureBench3XCMRQ2T2IMultiChoice": (
        "benchmark",
        tuple(name for name, _ in RQ2_SLOTS),
        tuple(prefix for _, prefix in RQ2_SLOTS),
    ),
    "CultureBench3XCMRQ3T2IMultiChoice": (
        "benchmark_cd",
        RQ3_SLOTS,
        tuple(f"{name}_candidate_" for name in RQ3_SLOTS),
    ),
}
DATA = "data"
QUERY_GROUPS = ("query_language", "query_country", "query_concept", "query_image_id")
#: The subset of every query (the task module's `ALL`), named as our scorer names its overall group.
ALL = "all"
#: The smoke test's folder (a copy of the export on a few queries), and how many queries of each task it holds: a
#: handful, ours (no paper sets it).
SMOKE = "smoke"
SMOKE_QUERIES = 5
#: The end of the smoke copy's task names (`mteb_tasks.SUFFIX`, when its release.json gives `smoke_queries`).
SMOKE_SUFFIX = "Smoke"
#: datasets' feature metadata, so that `load_dataset("parquet")` reads `image` as an HF Image column.
_HF_CORPUS_FEATURES = {"info": {"features": {"id": {"dtype": "string", "_type": "Value"}, "image": {"_type": "Image"}}}}


def _parquet(table: pa.Table) -> bytes:
    """Deterministic Parquet bytes (one row group, no statistics that depend on the writer's chunking)."""
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd", row_group_size=max(table.num_rows, 1), write_statistics=False)
    return sink.getvalue()


def corpus_table(release: Release) -> pa.Table:
    released_images(release, "image_metadata", "image_id")  # every image bytes PIL reads, as every export asks
    images = release.table("image_metadata", ["image_id", "image"])
    ids = images["image_id"].to_pylist()
    if len(set(ids)) != len(ids):
        raise ExportError(f"{release.path}: image_metadata repeats an image_id; the corpus needs one row per image")
    schema = pa.schema(
        [pa.field("id", pa.string(), nullable=False), pa.field("image", images.schema.field("image").type)],
        metadata={"huggingface": json.dumps(_HF_CORPUS_FEATURES)},
    )
    return pa.Table.from_arrays([images["image_id"], images["image"]], schema=schema)


def task_tables(
    release: Release, config: str, categories: Sequence[str], prefixes: Sequence[str]
) -> tuple[pa.Table, pa.Table, pa.Table]:
    """(queries, qrels, top_ranked) of one task, in the release's row order."""
    require_columns(release, config, ["query_text", *QUERY_GROUPS, *(f"{prefix}image_id" for prefix in prefixes)])
    table = release.table(config)
    check_values(release, config, table, _query_rules())
    rows = table.to_pylist()
    ids = [f"q{position:06d}" for position in range(len(rows))]
    queries = pa.table(
        {
            "id": pa.array(ids, pa.string()),
            "text": pa.array([row["query_text"] for row in rows], pa.string()),
            **{name: pa.array([row[name] for row in rows], pa.string()) for name in QUERY_GROUPS},
            "row": pa.array(range(len(rows)), pa.int32()),
        }
    )
    correct = f"{prefixes[0]}image_id"
    qrels = pa.table(
        {
            "query-id": pa.array(ids, pa.string()),
            "corpus-id": pa.array([row[correct] for row in rows], pa.string()),
            "score": pa.array([1] * len(rows), pa.int32()),
        }
    )
    candidates = [[row[f"{prefix}image_id"] for prefix in prefixes] for row in rows]
    top_ranked = pa.table(
        {
            "query-id": pa.array(ids, pa.string()),
            "corpus-ids": pa.array(candidates, pa.list_(pa.string())),
            "categories": pa.array([list(categories)] * len(rows), pa.list_(pa.string())),
        }
    )
    return queries, qrels, top_ranked


def _query_rules() -> dict[str, Allowed]:
    """A query is a text (mteb encodes it); its language names an mteb subset, shown in the README's table."""
    return {
        "query_text": Allowed(lambda value: isinstance(value, str) and bool(value), "a query text (a string)"),
        "query_language": Allowed(
            lambda value: plain_text("").test(value) and value != ALL,
            f"a language code on one line, without control or format characters, other than {ALL!r} (the subset "
            "of every query)",
        ),
    }


def texts_table(release: Release) -> pa.Table:
    """Every text our scorer encodes, once, sorted: the RQ2 and RQ3 query texts and Δsim's plain queries q_C (the
    query image's concept_in_native, `evaluation.xcm.metrics.plain_query_texts`; 3XCM §3.2.3)."""
    texts = set(release.table("benchmark", ["query_text"])["query_text"].to_pylist())
    if release.has("benchmark_cd"):
        benchmark_cd = release.table("benchmark_cd")
        texts |= set(benchmark_cd["query_text"].to_pylist())
        names = release.columns("image_metadata")
        if "concept_in_native" in names:  # as the evaluation reads them (evaluation/xcm/task.py, `_drift`)
            optional = ["language_code", "country", "concept_id"]
            wanted = ["image_id", "concept_in_native", *(n for n in optional if n in names)]
            metadata = release.table("image_metadata", wanted)
            try:
                texts |= set(plain_query_texts(benchmark_cd, metadata).to_pylist())
            except (KeyError, ValueError) as exc:
                raise ExportError(f"{release.path}: Δsim's plain queries: {exc}") from None
    return pa.table({"text": pa.array(sorted(texts), pa.string())})


def smoke_tables(queries: pa.Table, qrels: pa.Table, top_ranked: pa.Table) -> tuple[pa.Table, pa.Table, pa.Table]:
    """A task's tables cut to the smoke test's `SMOKE_QUERIES` queries, a query language at a time (`spread`), in
    release order; the three tables are row-aligned (`task_tables`)."""
    rows = pa.array(spread(queries["query_language"].to_pylist(), SMOKE_QUERIES), pa.int64())
    return queries.take(rows), qrels.take(rows), top_ranked.take(rows)


def _write_task(folder: ImmutableFolder, root: str, task: str, tables: tuple[pa.Table, pa.Table, pa.Table]) -> None:
    for name, table in zip(("queries", "qrels", "top_ranked"), tables, strict=True):
        folder.write_bytes(f"{root}/{task}/{name}.parquet", _parquet(table))


def export(release: Release, folder: ImmutableFolder) -> str:
    release.verify(["image_metadata", *(config for config, _, _ in TASKS.values())])
    corpus = corpus_table(release)
    folder.write_bytes(f"{DATA}/corpus.parquet", _parquet(corpus))
    counts: dict[str, dict[str, int]] = {}
    smoke: dict[str, tuple[pa.Table, pa.Table, pa.Table]] = {}
    for task, (config, categories, prefixes) in TASKS.items():
        if not release.has(config):
            raise ExportError(f"{release.path}: no {config!r} table, which task {task} needs")
        queries, qrels, top_ranked = task_tables(release, config, categories, prefixes)
        unknown = set(pc.list_flatten(top_ranked["corpus-ids"]).to_pylist()) - set(corpus["id"].to_pylist())
        if unknown:
            raise ExportError(f"{release.path}: {config} names images image_metadata lacks, e.g. {sorted(unknown)[:3]}")
        _write_task(folder, DATA, task, (queries, qrels, top_ranked))
        smoke[task] = smoke_tables(queries, qrels, top_ranked)
        languages = queries["query_language"].to_pylist()
        counts[task] = {ALL: len(languages), **{lang: languages.count(lang) for lang in sorted(set(languages))}}
    folder.write_bytes(f"{DATA}/texts.parquet", _parquet(texts_table(release)))
    identity = {"name": release.name, "version": release.version, "manifest_sha256": release.manifest_sha256}
    _write_smoke(folder, corpus, smoke)
    for root, about in (("", identity), (f"{SMOKE}/", {**identity, "smoke_queries": SMOKE_QUERIES})):
        folder.write_bytes(f"{root}{DATA}/release.json", (json.dumps(about, indent=1, sort_keys=True) + "\n").encode())
        for shipped, template in MODULES.items():
            folder.write_bytes(f"{root}{shipped}", (Path(__file__).parent / template).read_bytes())
    folder.write_bytes(README, readme(identity, counts, corpus.num_rows).encode())
    return RUN_COMMAND


def _write_smoke(
    folder: ImmutableFolder, corpus: pa.Table, tasks: dict[str, tuple[pa.Table, pa.Table, pa.Table]]
) -> None:
    """`smoke/data/`: each task's smoke queries (`smoke_tables`), the corpus images they rank (in corpus order) and
    their texts: the layout of `data/`, which the copied modules read as they read the full one."""
    root = f"{SMOKE}/{DATA}"
    candidates = {image for _, _, ranked in tasks.values() for ids in ranked["corpus-ids"].to_pylist() for image in ids}
    folder.write_bytes(
        f"{root}/corpus.parquet", _parquet(corpus.filter(pc.is_in(corpus["id"], pa.array(sorted(candidates)))))
    )
    texts = sorted({text for queries, _, _ in tasks.values() for text in queries["text"].to_pylist()})
    folder.write_bytes(f"{root}/texts.parquet", _parquet(pa.table({"text": pa.array(texts, pa.string())})))
    for task, tables in tasks.items():
        _write_task(folder, root, f"{task}{SMOKE_SUFFIX}", tables)


#: The README's run block: set EXPORT, MODEL and OUT, then run it as it is.
RUN_COMMAND = f'python "$EXPORT/{RUNNER}" --model "$MODEL" --out "$OUT" --save-vectors "$OUT/vectors"'
#: The README's smoke test: the copy of the export on a few queries (`smoke/`), with the same runner and check.
SMOKE_COMMAND = f'python "$EXPORT/{SMOKE}/{RUNNER}" --model "$MODEL" --out "$SMOKE"'
#: The README's block that brings the vectors back to our scorer (culturebench's environment).
EVALUATE_COMMAND = (
    'culturebench evaluate 3xcm "$RELEASE" --model-backend embeddings \\\n'
    '  --image-embeddings "$OUT/vectors/IMG.parquet" --text-embeddings "$OUT/vectors/TXT.parquet" --out "$RESULTS"'
)


def readme(identity: dict[str, str], counts: dict[str, dict[str, int]], images: int) -> str:
    rq2, rq3 = (counts[task] for task in TASKS)
    subsets = [ALL, *sorted((set(rq2) | set(rq3)) - {ALL})]
    table = "\n".join(f"| `{s}` | {rq2.get(s, 0)} | {rq3.get(s, 0)} |" for s in subsets)
    return f"""# {identity["name"]} {identity["version"]} for MTEB 2.x (MIEB)

Two text-to-image multiple-choice tasks, shaped like MIEB's `ImageCoDe` / `BLINK` multi-choice tasks, in
`{TASK_MODULE}`, reading `{DATA}/` next to it (nothing is downloaded; runs offline):

- `CultureBench3XCMRQ2T2IMultiChoice`: RQ2 queries, each with its 3 candidate images (correct, language-biased,
  irrelevant; 3XCM §3.2.2).
- `CultureBench3XCMRQ3T2IMultiChoice`: RQ3 queries (a cultural descriptor in the query), each with its 6
  candidates (§3.2.3).

Each task has the subset `all` (every query) and one subset per query language; each query ranks only its own
candidates, among the release's {images} images (`{DATA}/corpus.parquet`).

| subset | RQ2 queries | RQ3 queries |
|---|---|---|
{table}

## Run

In a Python environment with mteb 2.x (2.26 or later) and open_clip_torch or transformers (culturebench's
`harnesses/embedding.in` is one), set four variables, then run the lines as they are:

- `EXPORT`: this folder;
- `MODEL`: the checkpoint, read from disk (no network), one of
  - `open_clip:local-dir:/path/to/folder`: open_clip's own layout, a folder with `open_clip_config.json`
    (`{{"model_cfg": ..., "preprocess_cfg": {{}}}}`) and `open_clip_pytorch_model.bin` or
    `open_clip_model.safetensors` (open_clip reads no `.pt` file there: the run stops, weights that do not load
    are an error); culturebench's docs (`docs/researchers.md`, "A local checkpoint, offline") make such a folder
    from its demo's model;
  - `open_clip:ARCH:WEIGHTS`: a built-in open_clip architecture and a weights file,
    `open_clip:ViT-B-32:/path/to/weights.pt` (a pretrained tag instead of the file, `open_clip:ViT-B-32:openai`, is
    read from the Hugging Face cache, and downloaded unless `HF_HUB_OFFLINE=1`);
  - `hf-clip:/path/to/folder`: a Hugging Face dual encoder with `get_image_features` / `get_text_features` (CLIP,
    Chinese-CLIP), a folder written by `save_pretrained`;
- `OUT`: a folder for the results (created if missing), outside this one;
- `SMOKE`: a folder for the smoke test's results (created if missing), apart from `OUT`.

**First, a smoke test**: `{SMOKE}/` is this export cut to {SMOKE_QUERIES} queries of each task (a query language at
a time) and the images they rank, with the same modules; its `{RUNNER}` loads the model and runs both tasks as the
full run does, in a fraction of its time, and ends with the same check (exit 1 naming what is missing). Its numbers
are no result: its tasks are named with `{SMOKE_SUFFIX}` at the end (`CultureBench3XCMRQ2T2IMultiChoice{SMOKE_SUFFIX}`),
so that `--check` never takes them for the full tasks'. (mteb itself can only pick whole subsets, `hf_subsets`: a
language's queries.)

```bash
{SMOKE_COMMAND}
```

Then every query:

```bash
{RUN_COMMAND}
```

`{RUNNER}` (with `local_clip_mteb.py`, its mteb encoders) computes the vectors as culturebench's `open_clip` and
`transformers` backends do. Options: `--device auto|cpu|cuda`, `--batch-size N` (32), `--name ORG/NAME` (the
model's name in mteb's results; default `local/<folder>`). It writes, in mteb's own layout (`mteb.ResultCache`):

- `$OUT/results/<model>/<revision>/<task>.json`: mteb's scores, one entry per subset (`<model>`: `local__<kind>-`
  and the folder's name; `<revision>`: the weight files' sha256, 12 hex digits);
- `$OUT/predictions/<model>/<revision>/<task>_predictions.json`: every query's candidate scores, per subset;
- `$OUT/vectors/IMG.parquet` and `$OUT/vectors/TXT.parquet`: the vectors (below).

Another mteb model: from this folder, `import mteb, culturebench_3xcm_mteb as x;
mteb.evaluate(model, [T() for T in x.TASKS], cache=mteb.ResultCache("OUT"))`.

**How to tell that it failed.** mteb's exit status does not tell: with `raise_error=False` it logs a failed task and
goes on. The run succeeded only when, for your model, both `$OUT/results/<model>/<revision>/<task>.json` exist
(`CultureBench3XCMRQ2T2IMultiChoice.json` and `CultureBench3XCMRQ3T2IMultiChoice.json`), each with the
release's manifest sha256 (at the end of this file) as `dataset_revision` and, in `scores.test`, an entry with
`accuracy` for every subset of the table above. `python "$EXPORT/{RUNNER}" --check "$OUT"` checks exactly that,
for every model under `$OUT/results`: it prints each accuracy, or names what is missing and exits 1. `{RUNNER}`
ends with the same check.

## What it measures

`accuracy` (= `recall_at_1`, the main score) is the share of queries whose correct image scores highest among its
candidates: in the subset `all`, the paper's **M_cr**, micro-averaged over all queries; in subset L, M_cr of the
queries in language L (our scorer's per-language group). mteb's task-level score (`TaskResult.get_score()`, what
its tables show) is the mean over the subsets, `all` included: not a number of the paper. An exact tie goes, in
mteb, to the larger image id (pytrec_eval's order); our scorer gives it to the earlier slot (the correct one): the
two differ only on exactly tied scores.

A harness reports only whether the correct image won. **M_lb, M_ti (RQ2), the six RQ3 rates, SP = M_lb / M_cr,
the per-country groups, the App. P tests and Δsim** come from our scorer, fed the vectors the run computed:
`$OUT/vectors/IMG.parquet` (`image_id` string + `embedding` list of float, one row per image of
`{DATA}/corpus.parquet`) and `$OUT/vectors/TXT.parquet` (`text` string + `embedding`, one row per text of
`{DATA}/texts.parquet`: every query, and Δsim's plain queries). In culturebench's environment, with `RELEASE` the
release folder this export came from and `RESULTS` a new folder, run:

```bash
{EVALUATE_COMMAND}
```

Its M_cr equals the accuracy of the subset `all` of `CultureBench3XCMRQ2T2IMultiChoice`, and its per-language M_cr
that of each language's subset.

Release manifest sha256: `{identity["manifest_sha256"]}`.
"""
