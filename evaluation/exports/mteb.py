"""`culturebench export RELEASE --harness mteb`: 3XCM's RQ2 and RQ3 as MTEB 2.x (MIEB) text-to-image
multiple-choice tasks, shaped like MIEB's ImageCoDe / BLINK multi-choice tasks (`AbsTaskRetrieval`, type
`VisionCentricQA`, main score `accuracy` = recall@1 over each query's own candidates, `top_ranked`).

The export holds a task module (`culturebench_3xcm_mteb.py`, which imports only mteb, datasets and pyarrow) and the
data its `load_data` reads, next to it:

- `data/corpus.parquet`: every image of the release (`id` = image_id, `image` = an HF Image column, the released
  bytes unchanged), so a run's image vectors cover the release, as `--model-backend embeddings` needs.
- `data/<task>/queries.parquet`: one row per benchmark row (`id` = `q` + row position, `text` = query_text, and the
  query's language, country, concept and image for grouping).
- `data/<task>/qrels.parquet`: the correct candidate of each query (`query-id`, `corpus-id`, `score` = 1).
- `data/<task>/top_ranked.parquet`: each query's candidates in slot order (`query-id`, `corpus-ids`, `categories`).

Ties: our scorer gives an exact tie to the earlier slot (correct first); mteb ranks by score, and pytrec_eval (its
recall@1) breaks a tie by corpus id, descending. The two agree whenever the correct candidate's score differs from
every other candidate's, which is what the tests check (and our evaluation counts tied winners).
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from data.publish.folder import ImmutableFolder
from data.publish.reader import Release
from data.schemas import RQ2_SLOTS, RQ3_SLOTS
from evaluation.exports.common import README, ExportError, require_columns

BENCHMARKS = ("3xcm",)
TASK_MODULE = "culturebench_3xcm_mteb.py"
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
#: datasets' feature metadata, so that `load_dataset("parquet")` reads `image` as an HF Image column.
_HF_CORPUS_FEATURES = {"info": {"features": {"id": {"dtype": "string", "_type": "Value"}, "image": {"_type": "Image"}}}}


def _parquet(table: pa.Table) -> bytes:
    """Deterministic Parquet bytes (one row group, no statistics that depend on the writer's chunking)."""
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd", row_group_size=max(table.num_rows, 1), write_statistics=False)
    return sink.getvalue()


def corpus_table(release: Release) -> pa.Table:
    require_columns(release, "image_metadata", ["image_id", "image"])
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
    rows = release.table(config).to_pylist()
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


def export(release: Release, folder: ImmutableFolder) -> str:
    release.verify(["image_metadata", *(config for config, _, _ in TASKS.values())])
    corpus = corpus_table(release)
    folder.write_bytes(f"{DATA}/corpus.parquet", _parquet(corpus))
    counts: dict[str, int] = {}
    for task, (config, categories, prefixes) in TASKS.items():
        if not release.has(config):
            raise ExportError(f"{release.path}: no {config!r} table, which task {task} needs")
        queries, qrels, top_ranked = task_tables(release, config, categories, prefixes)
        unknown = set(pc.list_flatten(top_ranked["corpus-ids"]).to_pylist()) - set(corpus["id"].to_pylist())
        if unknown:
            raise ExportError(f"{release.path}: {config} names images image_metadata lacks, e.g. {sorted(unknown)[:3]}")
        for name, table in (("queries", queries), ("qrels", qrels), ("top_ranked", top_ranked)):
            folder.write_bytes(f"{DATA}/{task}/{name}.parquet", _parquet(table))
        counts[task] = queries.num_rows
    identity = {"name": release.name, "version": release.version, "manifest_sha256": release.manifest_sha256}
    folder.write_bytes(TASK_MODULE, task_module(identity).encode())
    command = (
        'python -c "import mteb, culturebench_3xcm_mteb as x; '
        'print(mteb.evaluate(MODEL, [T() for T in x.TASKS], cache=None))"'
    )
    folder.write_bytes(README, readme(identity, counts, corpus.num_rows, command).encode())
    return command


def task_module(identity: dict[str, str]) -> str:
    tasks = "\n\n".join(
        f'''class {task}(_XCMMultiChoice):
    metadata = _metadata(
        "{task}",
        "3XCM {"RQ2" if config == "benchmark" else "RQ3"} ({len(categories)} candidates per query, slot order "
        "{", ".join(categories)}): pick the image that matches the query text. accuracy = recall@1 = the "
        "paper's M_cr (3XCM §3.2.{"2" if config == "benchmark" else "3"}).",
    )'''
        for task, (config, categories, _) in TASKS.items()
    )
    return f'''"""3XCM (culturebench export of {identity["name"]} {identity["version"]}) as MTEB 2.x text-to-image
multiple-choice tasks, shaped like MIEB's ImageCoDe/BLINK multi-choice tasks: each query ranks only its own
candidate images (`top_ranked`), and `accuracy` (recall@1) is the share of queries whose correct image scores
highest: the paper's M_cr. The data lies in ./{DATA}, next to this file; nothing is downloaded.

    import mteb, culturebench_3xcm_mteb as x
    results = mteb.evaluate(model, [T() for T in x.TASKS], cache=None)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from datasets import Dataset, load_dataset
from mteb.abstasks.retrieval import AbsTaskRetrieval
from mteb.abstasks.task_metadata import TaskMetadata

DATA = Path(__file__).resolve().parent / "{DATA}"
RELEASE = {json.dumps(identity)}


def _metadata(name: str, description: str) -> TaskMetadata:
    return TaskMetadata(
        name=name,
        description=description,
        reference=None,
        dataset={{"path": str(DATA / name), "revision": RELEASE["manifest_sha256"]}},
        type="VisionCentricQA",
        category="t2i",
        modalities=["text", "image"],
        eval_splits=["test"],
        eval_langs=["mul-Zyyy"],
        main_score="accuracy",
        domains=["Web"],
        license="not specified",
        annotations_creators="derived",
        sample_creation="found",
        bibtex_citation="",
    )


class _XCMMultiChoice(AbsTaskRetrieval):
    """Loads ./{DATA}/corpus.parquet and ./{DATA}/<task name>/{{queries,qrels,top_ranked}}.parquet."""

    def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
        if self.data_loaded:
            return
        folder = DATA / self.metadata.name
        corpus = load_dataset("parquet", data_files=str(DATA / "corpus.parquet"), split="train")
        queries = pq.read_table(folder / "queries.parquet", columns=["id", "text"])
        qrels = pq.read_table(folder / "qrels.parquet").to_pylist()
        top_ranked = pq.read_table(folder / "top_ranked.parquet", columns=["query-id", "corpus-ids"]).to_pylist()
        self.dataset = {{
            "default": {{
                "test": {{
                    "corpus": corpus,
                    "queries": Dataset(queries),
                    "relevant_docs": {{row["query-id"]: {{row["corpus-id"]: row["score"]}} for row in qrels}},
                    "top_ranked": {{row["query-id"]: row["corpus-ids"] for row in top_ranked}},
                }}
            }}
        }}
        self.data_loaded = True


{tasks}


TASKS = ({", ".join(TASKS)},)
'''


def readme(identity: dict[str, str], counts: dict[str, int], images: int, command: str) -> str:
    rq2, rq3 = (counts[task] for task in TASKS)
    return f"""# {identity["name"]} {identity["version"]} for MTEB 2.x (MIEB)

Two text-to-image multiple-choice tasks, shaped like MIEB's `ImageCoDe` / `BLINK` multi-choice tasks, in
`{TASK_MODULE}`, reading `{DATA}/` next to it (nothing is downloaded; runs offline):

- `CultureBench3XCMRQ2T2IMultiChoice`: {rq2} RQ2 queries, each with its 3 candidate images (correct,
  language-biased, irrelevant; 3XCM §3.2.2).
- `CultureBench3XCMRQ3T2IMultiChoice`: {rq3} RQ3 queries (a cultural descriptor in the query), each with its 6
  candidates (§3.2.3).

The corpus is the release's {images} images (`{DATA}/corpus.parquet`); each query ranks only its own candidates.

## Run

```bash
cd <this folder>
{command}
```

where `MODEL` is any mteb model that encodes text and images (e.g. `mteb.get_model("openai/clip-vit-base-patch32")`,
or your own `mteb.models.abs_encoder.AbsEncoder`). Release: manifest sha256 `{identity["manifest_sha256"]}`.

## What it measures

`accuracy` (= `recall_at_1`, the main score) is the share of queries whose correct image scores highest among its
candidates: the paper's **M_cr**, micro-averaged over all queries. An exact tie goes, in mteb, to the larger image
id (pytrec_eval's order); our scorer gives it to the earlier slot (the correct one): the two differ only on exactly
tied scores.

A harness reports only whether the correct image won. **M_lb, M_ti (RQ2), the six RQ3 rates, SP = M_lb / M_cr,
the per-language and per-country groups and the drift** come from our scorer, fed the vectors your run computed:
save the query and image vectors the model produced (two Parquet files: `image_id` string + `embedding` list of
float, one row per image of `{DATA}/corpus.parquet`; `text` string + `embedding`, one row per distinct query text
of `{DATA}/*/queries.parquet`), then

```bash
culturebench evaluate 3xcm RELEASE --model-backend embeddings \\
  --image-embeddings IMAGES.parquet --text-embeddings TEXTS.parquet
```

Its M_cr equals the mteb accuracy on the same vectors.
"""
