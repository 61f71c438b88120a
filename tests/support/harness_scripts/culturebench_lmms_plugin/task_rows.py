"""Run by .venv-harness-lmms-eval's python: which rows each source loads, in the order given, all in one datasets
cache (HF_HOME's). `raw:FOLDER` is `datasets.load_dataset(path=FOLDER, name="default", split="train")`, as a
researcher would write it; `task:YAML` is lmms-eval's own `ConfigurableTask` built from an exported task YAML, which
loads its dataset as an lmms-eval run does (`ConfigurableTask.download`, the YAML's `dataset_kwargs` included).
Prints one JSON line per source: its sample ids, in order, and the cache folder they were read from."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _rows(source: str) -> tuple[list[str], str]:
    kind, _, path = source.partition(":")
    if kind == "raw":
        import datasets

        docs: Any = datasets.load_dataset(path=path, name="default", split="train")
    elif kind == "task":
        from lmms_eval import utils
        from lmms_eval.api.task import ConfigurableTask

        docs = ConfigurableTask(config=utils.load_yaml_config(path)).test_docs()
    else:
        raise SystemExit(f"{source}: not raw:FOLDER or task:YAML")
    return list(docs["sample_id"]), str(Path(docs.cache_files[0]["filename"]).parent)


def main(sources: list[str]) -> None:
    for source in sources:
        sample_ids, cache = _rows(source)
        print(json.dumps({"source": source, "sample_ids": sample_ids, "cache": cache}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
