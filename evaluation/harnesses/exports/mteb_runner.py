"""Runs this export's two 3XCM tasks (`culturebench_3xcm_mteb.py`) in mteb 2.x with a local CLIP checkpoint
(`local_clip_mteb.py`), saves the vectors the run computed, and checks that mteb left every result.

Written by culturebench (`culturebench export RELEASE --harness mteb`) as `run_mteb.py`, unchanged; it imports no
culturebench.

    python run_mteb.py --model MODEL --out OUT [--save-vectors DIR] [--device auto|cpu|cuda] [--batch-size N]
    python run_mteb.py --check OUT

MODEL is `open_clip:local-dir:/path/to/folder` (open_clip's own layout: open_clip_config.json and the weights),
`open_clip:ARCH:WEIGHTS` (a built-in open_clip architecture and a weights file or pretrained tag) or
`hf-clip:/path/to/folder` (a transformers dual encoder written by save_pretrained: CLIP, Chinese-CLIP).

mteb writes, as `mteb.ResultCache(OUT)` lays it out, OUT/results/<model>/<revision>/<task>.json (the scores of
each subset: `all`, then each query language) and model_meta.json; the runner has mteb write each query's
candidate scores to OUT/predictions/<model>/<revision>/<task>_predictions.json. `--save-vectors DIR` writes
DIR/IMG.parquet (image_id, embedding: every image of data/corpus.parquet) and DIR/TXT.parquet (text, embedding:
every text of data/texts.parquet), what `culturebench evaluate 3xcm --model-backend embeddings` reads; both carry
the model that made them in their Parquet metadata, `culturebench.model`: {"name": mteb's model name, "revision":
its revision, "harness": "mteb"} (never a path of this machine), so the evaluation names that model.

`--check OUT` (also the run's last step) passes only when every model folder under OUT/results that holds a 3XCM
result holds both tasks' results for this release, each with an `accuracy` for every subset; else it names what is
missing and exits 1. mteb's exit status alone does not tell (with `raise_error=False` a failed task is logged and
the run goes on).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
TASKS_MODULE = "culturebench_3xcm_mteb"
ADAPTER_MODULE = "local_clip_mteb"
ALL = "all"
IMAGES_FILE, TEXTS_FILE = "IMG.parquet", "TXT.parquet"
#: The vector files' Parquet metadata key naming the model that made them (culturebench's embeddings backend reads
#: it: evaluation/models/encoders/embeddings.py MODEL_METADATA_KEY).
MODEL_METADATA_KEY = "culturebench.model"


class ModelSpecError(ValueError):
    """A --model value this runner cannot load: the message says which part and why."""


def parse_model(spec: str) -> tuple[str, str, str | None]:
    """(`open_clip` | `hf-clip`, model, pretrained) from a --model value; the paths it names must exist, so a typo
    fails here, before mteb and torch are imported."""
    kind, _, rest = spec.partition(":")
    if kind == "open_clip" and rest.startswith("local-dir:"):
        folder = Path(rest.removeprefix("local-dir:")).expanduser()
        if not (folder / "open_clip_config.json").is_file():
            raise ModelSpecError(f"{folder}: no open_clip_config.json (open_clip's local-dir layout)")
        return kind, f"local-dir:{folder}", None
    if kind == "open_clip":
        arch, _, pretrained = rest.partition(":")
        if not arch or not pretrained:
            raise ModelSpecError("open_clip needs open_clip:local-dir:FOLDER or open_clip:ARCH:WEIGHTS_FILE_OR_TAG")
        if _looks_like_path(pretrained) and not Path(pretrained).expanduser().is_file():
            raise ModelSpecError(f"{pretrained}: no such weights file")
        return kind, arch, str(Path(pretrained).expanduser()) if _looks_like_path(pretrained) else pretrained
    if kind == "hf-clip" and rest:
        if _looks_like_path(rest) and not (Path(rest).expanduser() / "config.json").is_file():
            raise ModelSpecError(f"{rest}: no config.json (a folder written by save_pretrained)")
        return kind, str(Path(rest).expanduser()) if _looks_like_path(rest) else rest, None
    raise ModelSpecError("not open_clip:local-dir:FOLDER, open_clip:ARCH:WEIGHTS or hf-clip:FOLDER")


def _looks_like_path(value: str) -> bool:
    """A path, not an open_clip tag or a hub id: it says so (`/`, `.`, `~`, a weights suffix) or exists."""
    suffixes = (".pt", ".pth", ".bin", ".safetensors")
    return value.startswith(("/", ".", "~")) or Path(value).suffix in suffixes or Path(value).exists()


def expected_subsets() -> dict[str, list[str]]:
    """Task name -> its subsets (`all`, then the query languages, sorted), from the export's data."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    out = {}
    for folder in sorted(p for p in DATA.iterdir() if (p / "queries.parquet").is_file()):
        languages = pc.unique(pq.read_table(folder / "queries.parquet", columns=["query_language"])["query_language"])
        out[folder.name] = [ALL, *sorted(str(code) for code in languages.to_pylist())]
    return out


def _result_problems(path: Path, subsets: Sequence[str], revision: str) -> tuple[list[str], dict[str, float]]:
    """(problems, accuracy by subset) of one mteb result file."""
    if not path.is_file():
        return [f"{path}: missing"], {}
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
        entries = result["scores"]["test"]
        accuracy = {str(e["hf_subset"]): float(e["accuracy"]) for e in entries if "accuracy" in e}
    except (ValueError, KeyError, TypeError) as exc:
        return [f"{path}: not an mteb result with scores.test ({type(exc).__name__}: {exc})"], {}
    problems = []
    if result.get("dataset_revision") != revision:
        problems.append(f"{path}: dataset_revision {result.get('dataset_revision')!r} is not this export's {revision}")
    missing = [subset for subset in subsets if subset not in accuracy]
    if missing:
        problems.append(f"{path}: no accuracy for subset(s) {', '.join(missing)}")
    return problems, accuracy


def check(out: Path, model_folders: Sequence[Path] | None = None) -> tuple[list[str], list[str]]:
    """(problems, report lines) of the results under OUT/results: of `model_folders` (OUT/results/<model>/<revision>),
    or of every one that holds a result of these tasks."""
    tasks = expected_subsets()
    revision = json.loads((DATA / "release.json").read_text(encoding="utf-8"))["manifest_sha256"]
    results = out / "results"
    if model_folders is None:
        found = {p.parent for task in tasks for p in results.glob(f"*/*/{task}.json")}
        model_folders = sorted(found)
    if not model_folders:
        return [f"{results}: no result of {', '.join(tasks)}"], []
    problems: list[str] = []
    lines: list[str] = []
    for folder in model_folders:
        for task, subsets in tasks.items():
            found_problems, accuracy = _result_problems(folder / f"{task}.json", subsets, revision)
            problems += found_problems
            where = folder.relative_to(results) if folder.is_relative_to(results) else folder
            lines += [f"{where}\t{task}\t{s}\taccuracy={accuracy[s]}" for s in subsets if s in accuracy]
    return problems, lines


def _report(problems: list[str], lines: list[str]) -> int:
    for line in lines:
        print(line)
    for problem in problems:
        print(f"run_mteb.py: FAILED: {problem}", file=sys.stderr)
    return 1 if problems else 0


def model_record(model: Any) -> dict[str, str | None]:
    """What the vector files say of the model that made them: its mteb name and revision (the weights' digest, or
    `tag` / `hub`), as mteb's results name it; a name and a digest, never a path of this machine."""
    meta = model.mteb_model_meta
    return {
        "name": str(meta.name),
        "revision": None if meta.revision is None else str(meta.revision),
        "harness": "mteb",
    }


def save_vectors(model: Any, folder: Path, batch_size: int) -> None:
    """IMG.parquet (every corpus image, in corpus order) and TXT.parquet (every text of data/texts.parquet, sorted),
    from the run's own vectors: the model encodes only what the run did not. Both name the model in their metadata
    (`MODEL_METADATA_KEY`: `model_record`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from datasets import load_dataset

    corpus = load_dataset("parquet", data_files=str(DATA / "corpus.parquet"), split="train")
    ids: list[str] = []
    images: list[Any] = []
    for start in range(0, len(corpus), batch_size):
        rows = corpus[start : start + batch_size]  # decoded as mteb's data loader decodes them
        ids += rows["id"]
        images += model.image_vectors(rows["image"])
    texts = pq.read_table(DATA / "texts.parquet", columns=["text"])["text"].to_pylist()
    vectors: list[Any] = []
    for start in range(0, len(texts), batch_size):
        vectors += model.text_vectors(texts[start : start + batch_size])
    folder.mkdir(parents=True, exist_ok=True)
    embedding = pa.list_(pa.float32())
    metadata = {MODEL_METADATA_KEY: json.dumps(model_record(model), ensure_ascii=False, sort_keys=True)}
    for name, key, keys, rows in (
        (IMAGES_FILE, "image_id", ids, images),
        (TEXTS_FILE, "text", texts, vectors),
    ):
        columns = {key: pa.array(keys, pa.string()), "embedding": pa.array(rows, embedding)}
        table = pa.table(columns, metadata=metadata)
        partial = folder / f".{name}.partial"
        pq.write_table(table, partial)
        partial.replace(folder / name)


def run(args: argparse.Namespace) -> int:
    try:
        kind, model_name, pretrained = parse_model(args.model)
    except ModelSpecError as exc:
        print(f"run_mteb.py: --model {args.model!r}: {exc}", file=sys.stderr)
        return 2
    sys.path.insert(0, str(HERE))
    mteb = importlib.import_module("mteb")
    adapter = importlib.import_module(ADAPTER_MODULE)
    tasks_module = importlib.import_module(TASKS_MODULE)
    try:
        if kind == "open_clip":
            model = adapter.open_clip_model(model_name, pretrained, device=args.device, name=args.name)
        else:
            model = adapter.hf_clip_model(model_name, device=args.device, name=args.name)
    except (OSError, ValueError, RuntimeError, TypeError) as exc:
        print(f"run_mteb.py: --model {args.model!r}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    out = Path(args.out)
    cache = mteb.ResultCache(out)
    tasks = [task() for task in tasks_module.TASKS]
    meta = model.mteb_model_meta
    model_folder = cache.get_task_result_path(tasks[0].metadata.name, meta).parent
    try:
        mteb.evaluate(
            model,
            tasks,
            cache=cache,
            overwrite_strategy="always",
            prediction_folder=out / "predictions" / model_folder.relative_to(out / "results"),
            encode_kwargs={"batch_size": args.batch_size, "show_progress_bar": False},
            show_progress_bar=False,
        )
        if args.save_vectors:
            save_vectors(model, Path(args.save_vectors), args.batch_size)
    except Exception as exc:  # any failure of the run: said in one line, then what the check finds
        print(f"run_mteb.py: the run failed: {type(exc).__name__}: {' '.join(str(exc).split())}", file=sys.stderr)
        _report(*check(out, [model_folder]))
        return 1
    return _report(*check(out, [model_folder]))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="run_mteb.py", description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--model", help="open_clip:local-dir:FOLDER, open_clip:ARCH:WEIGHTS or hf-clip:FOLDER")
    parser.add_argument("--out", help="folder for mteb's results (created)")
    parser.add_argument("--save-vectors", metavar="DIR", help=f"write DIR/{IMAGES_FILE} and DIR/{TEXTS_FILE}")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--name", help="the model's name in mteb's results, ORG/NAME (default: local/<folder>)")
    parser.add_argument("--check", metavar="OUT", help="only check the results under OUT; exit 1 if any is missing")
    args = parser.parse_args(argv)
    if args.check:
        if args.model or args.out:
            parser.error("--check takes no --model or --out")
        return _report(*check(Path(args.check)))
    if not args.model or not args.out:
        parser.error("--model and --out are required (or --check OUT)")
    if args.batch_size < 1:
        parser.error("--batch-size must be at least 1")
    if args.name is not None and "/" not in args.name:
        parser.error(f"--name {args.name!r}: mteb names a model ORG/NAME")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
