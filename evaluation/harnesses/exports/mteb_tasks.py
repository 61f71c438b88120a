"""3XCM as MTEB 2.x text-to-image multiple-choice tasks, shaped like MIEB's ImageCoDe/BLINK multi-choice tasks:
each query ranks only its own candidate images (`top_ranked`), and `accuracy` (recall@1) is the share of queries
whose correct image scores highest: the paper's M_cr (3XCM §3.2.2, Eq. 3).

Written by culturebench (`culturebench export RELEASE --harness mteb`) as `culturebench_3xcm_mteb.py`, unchanged:
it imports mteb, datasets and pyarrow, never culturebench, and reads `./data` next to it (nothing is downloaded).

Subsets (`hf_subsets`): `all` holds every query (its accuracy is M_cr), and each query language L of the release
(`query_language`) one subset of L's queries (M_cr of L). Each subset's corpus is the images its queries rank.

In the export's `smoke/` copy, whose `data/release.json` gives `smoke_queries`, the tasks are named with `Smoke` at
the end (`CultureBench3XCMRQ2T2IMultiChoiceSmoke`, its data in `data/<that name>/`): a smoke test's results are
never taken for the full tasks'.

    import mteb, culturebench_3xcm_mteb as x
    results = mteb.evaluate(model, [T() for T in x.TASKS], cache=mteb.ResultCache("OUT"))
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypedDict

import pyarrow.compute as pc
import pyarrow.parquet as pq
from datasets import Dataset, load_dataset
from mteb.abstasks.retrieval import AbsTaskRetrieval  # type: ignore[import-not-found, unused-ignore]
from mteb.abstasks.task_metadata import TaskMetadata  # type: ignore[import-not-found, unused-ignore]

DATA = Path(__file__).resolve().parent / "data"
#: The release this export came from (name, version, manifest_sha256); mteb records its hash as the revision.
RELEASE: dict[str, Any] = json.loads((DATA / "release.json").read_text(encoding="utf-8"))
#: The subset of every query, named as culturebench names its overall group.
ALL = "all"
#: mteb's code for what it cannot name: several languages, script undetermined.
UNNAMED = "mul-Zyyy"
#: The smoke copy's queries per task (None in the full export), and the end of its tasks' names.
SMOKE_QUERIES: int | None = RELEASE.get("smoke_queries")
SUFFIX = "Smoke" if SMOKE_QUERIES else ""


def mteb_language(code: str) -> str:
    """The release's ISO 639-1 code in mteb's `<ISO 639-3>-<script>` form (`es` -> `spa-Latn`), from mteb's own
    table; `mul-Zyyy` where mteb has none (a subset is named by the release's code either way)."""
    try:
        from mteb.languages.iso_mappings import (  # type: ignore[import-not-found, unused-ignore]
            _hf_lang_to_iso_lang_script,
        )
    except ImportError:  # a later mteb without it: the subsets keep their names, only the label is lost
        return UNNAMED
    name = _hf_lang_to_iso_lang_script(code)
    return name if isinstance(name, str) else UNNAMED


def subsets(task: str) -> dict[str, list[str]]:
    """`eval_langs`: `all`, then each query language of the task's queries (sorted), with its mteb code."""
    table = pq.read_table(DATA / task / "queries.parquet", columns=["query_language"])
    languages = sorted(str(code) for code in pc.unique(table["query_language"]).to_pylist())
    named = {code: [mteb_language(code)] for code in languages}
    return {ALL: sorted({name for names in named.values() for name in names}) or [UNNAMED], **named}


def _metadata(name: str, description: str) -> TaskMetadata:
    name += SUFFIX
    if SMOKE_QUERIES:
        description += f" A smoke test: {SMOKE_QUERIES} queries of the task, no result."
    return TaskMetadata(
        name=name,
        description=description,
        reference=None,
        dataset={"path": str(DATA / name), "revision": RELEASE["manifest_sha256"]},
        type="VisionCentricQA",
        category="t2i",
        modalities=["text", "image"],
        eval_splits=["test"],
        eval_langs=subsets(name),
        main_score="accuracy",
        domains=["Web"],
        license="not specified",
        annotations_creators="derived",
        sample_creation="found",
        bibtex_citation="",
    )


class _Split(TypedDict):
    """One subset's `test` split, as mteb's retrieval tasks read it."""

    corpus: Dataset  # the images its queries rank
    queries: Dataset  # id, text
    relevant_docs: dict[str, dict[str, int]]  # query id -> its correct image's id -> 1
    top_ranked: dict[str, list[str]]  # query id -> its candidate images' ids


class _XCMMultiChoice(AbsTaskRetrieval):  # type: ignore[misc, unused-ignore]
    """Reads ./data/corpus.parquet and ./data/<task name>/{queries,qrels,top_ranked}.parquet."""

    data_loaded: bool  # (set by mteb's AbsTask)
    dataset: dict[str, dict[str, _Split]]  # subset -> split -> its data

    def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
        if self.data_loaded:
            return
        folder = DATA / self.metadata.name
        corpus = load_dataset("parquet", data_files=str(DATA / "corpus.parquet"), split="train")
        position = {image_id: row for row, image_id in enumerate(corpus["id"])}
        queries = pq.read_table(folder / "queries.parquet", columns=["id", "text", "query_language"])
        qrels = {
            row["query-id"]: {row["corpus-id"]: row["score"]}
            for row in pq.read_table(folder / "qrels.parquet").to_pylist()
        }
        ranked = pq.read_table(folder / "top_ranked.parquet", columns=["query-id", "corpus-ids"]).to_pylist()
        top_ranked = {row["query-id"]: row["corpus-ids"] for row in ranked}
        self.dataset = {}
        for subset in self.metadata.eval_langs:
            rows = queries if subset == ALL else queries.filter(pc.equal(queries["query_language"], subset))
            ids = rows["id"].to_pylist()
            images = sorted({position[image_id] for query in ids for image_id in top_ranked[query]})
            self.dataset[subset] = {
                "test": {
                    "corpus": corpus.select(images),
                    "queries": Dataset(rows.select(["id", "text"])),
                    "relevant_docs": {query: qrels[query] for query in ids},
                    "top_ranked": {query: top_ranked[query] for query in ids},
                }
            }
        self.data_loaded = True


class CultureBench3XCMRQ2T2IMultiChoice(_XCMMultiChoice):
    metadata = _metadata(
        "CultureBench3XCMRQ2T2IMultiChoice",
        "3XCM RQ2 (3 candidates per query, slot order correct, language_biased, irrelevant): pick the image that "
        "matches the query text. accuracy = recall@1 = the paper's M_cr (3XCM §3.2.2); subset `all` holds every "
        "query, each other subset one query language.",
    )


class CultureBench3XCMRQ3T2IMultiChoice(_XCMMultiChoice):
    metadata = _metadata(
        "CultureBench3XCMRQ3T2IMultiChoice",
        "3XCM RQ3 (6 candidates per query, slot order correct, object_relevant_language_biased, object_relevant, "
        "cultural_descriptor_relevant, language_biased, irrelevant): pick the image that matches the query text "
        "with its cultural descriptor. accuracy = recall@1 = the paper's M_cr (3XCM §3.2.3); subset `all` holds "
        "every query, each other subset one query language.",
    )


TASKS = (CultureBench3XCMRQ2T2IMultiChoice, CultureBench3XCMRQ3T2IMultiChoice)
