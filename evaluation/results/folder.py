"""An evaluation's result folder: `per_query.parquet`, further tables, `metrics.json`, figures and a results card,
written once and then immutable like a release (an identical rerun is `unchanged`, a different one is refused).

The card names what makes a number reproducible: the release's manifest sha256, the model and its weights' hash,
and the code version, and warns where the numbers are not what they seem (ties that decided most winners, questions
without a scored answer). `compare` reads several result folders back into one table and one figure; a
`metrics.json` it cannot read is named, field by field."""

from __future__ import annotations

import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from data.provenance import code_version, redact
from data.publish.card import CardConfig, card_configs, empty_configs_note, front_matter, markdown_table
from data.publish.folder import ImmutableFolder, ReleaseResult
from data.publish.format import MANIFEST, ReleaseReadError
from data.publish.integrity import read_manifest
from data.publish.json_file import read_json_object
from data.publish.manifest import ResultManifest
from data.publish.reader import Release
from data.text_safety import code_span, markdown_text
from evaluation import registry
from evaluation.results.figures import Point, compare_png
from evaluation.results.names import display_name, unique
from evaluation.results.parts import ResultPart

METRICS = "metrics.json"
PER_QUERY = "per_query.parquet"
CARD = "README.md"
DEMO_WARNING = (
    "> **These numbers are meaningless.** The model is a tiny network with random weights, built to exercise the "
    "evaluation end to end; it says nothing about any real model or about the benchmark."
)
# The demo VLM's answer cap (demo.models.DEMO_MAX_NEW_TOKENS), kept in the settings as `demo_answer_cap`: a key
# with "token" in it would be redacted as a secret.
DEMO_VLM_NOTE = (
    "Its answers stop at {tokens} new tokens, not the paper's 120 (App. C.2): they are random bytes either way."
)


@dataclass
class EvaluationResult:
    benchmark: str  # a registered benchmark's name (`evaluation.registry`)
    release: Release
    model: dict[str, Any]  # the backend's identity (ModelIdentity / VlmIdentity as JSON)
    per_query: pa.Table | None  # one row per benchmark row (3XCM) or per image (MixCuBe); None: the task not run
    tables: dict[str, pa.Table]
    metrics: dict[str, Any]
    figures: dict[str, bytes]
    settings: dict[str, Any]  # what else decided the numbers (bootstrap, seed, judge, prompts' version ...)
    skipped: list[str] = field(default_factory=list)
    demo: bool = False
    warnings: list[str] = field(default_factory=list)  # shown in the card (and by the CLI), not in metrics.json
    parts: dict[str, ResultPart] = field(default_factory=dict)  # further tasks' parts, by folder name

    @property
    def model_id(self) -> str:
        return str(self.model["model_id"])


def default_out(root: str | Path, benchmark: str, release: Release, model_id: str, task: str | None = None) -> str:
    """`<root>/<benchmark>/<release version>/<model id>/`; `<model id>--<task>/` for a task other than the paper's,
    so that each task's result has its own folder."""
    suffix = "" if task in (None, registry.get(benchmark).default_task) else f"--{task}"
    return str(Path(root) / benchmark / release.version / f"{model_id}{suffix}")


def with_parts(benchmark: str, task: str, metrics: dict[str, Any], parts: dict[str, ResultPart]) -> dict[str, Any]:
    """The metrics of a run of `task` (one of the benchmark's tasks, or "all"): the paper's task's own metrics, then
    each part's headline at the top level and its whole section under its name, their intervals in `ci95`, and the tasks
    run in `tasks` (absent when only the paper's task ran: its metrics.json is as before)."""
    if not parts:
        return metrics
    merged = dict(metrics)
    ci95 = dict(merged.get("ci95", {}))
    for name, part in parts.items():
        merged.update(part.headline)
        merged[name] = part.metrics
        ci95.update(part.ci95)
    merged["ci95"] = ci95
    tasks = registry.get(benchmark).task_names
    main = [tasks[0]] if metrics else []
    merged["tasks"] = main + [t for t in tasks[1:] if t in parts]
    return merged


def tasks_of(benchmark: str, metrics: dict[str, Any]) -> list[str]:
    tasks = metrics.get("tasks")
    return [str(t) for t in tasks] if isinstance(tasks, list) else [registry.get(benchmark).default_task]


def headline_names(benchmark: str, metrics: dict[str, Any]) -> list[str]:
    """The headline figures of a result's tasks, an object's keys flattened (`max_skew.communion`)."""
    names: list[str] = []
    spec = registry.get(benchmark)
    for task in tasks_of(benchmark, metrics):
        for name in spec.task(task).headline if task in spec.task_names else ():
            value = metrics.get(name)
            names += [f"{name}.{key}" for key in value] if isinstance(value, dict) else [name]
    return names


def headline_value(metrics: dict[str, Any], name: str) -> Any:
    """A headline figure by its flattened name."""
    if name in metrics:
        return metrics[name]
    head, _, key = name.partition(".")
    value = metrics.get(head)
    return value.get(key) if isinstance(value, dict) else None


def existing_result_conflict(
    out: str, benchmark: str, release: Release, model: dict[str, Any], settings: dict[str, Any]
) -> str | None:
    """Why the folder at `out` cannot take this evaluation's result, from what it says (its manifest and metrics),
    before anything is computed; None when there is no folder, or one that may be this same result (the writer
    then compares it file by file and finds it `unchanged`, or refuses it)."""
    if "://" in out and not out.startswith("file://"):
        return None  # an object store: the writer compares
    folder = Path(out.removeprefix("file://"))
    if not folder.exists():
        return None
    what = f"{out} exists and is not this evaluation's result"
    immutable = "result folders are immutable and never written into (remove it to redo it)"
    if not (folder / MANIFEST).is_file():
        return f"{what} (it has no {MANIFEST}); {immutable}"
    try:
        manifest = read_manifest(folder, ResultManifest)
        written = json.loads((folder / METRICS).read_text(encoding="utf-8"))
    except (ReleaseReadError, OSError, ValueError) as exc:
        return f"{what} (unreadable: {' '.join(str(exc).split())[:300]}); {immutable}"
    expected = json.loads(json.dumps(_finite(redact(settings)), ensure_ascii=False))
    differs = [
        label
        for label, same in (
            (f"not a {benchmark} evaluation ({manifest.name})", manifest.name == f"evaluation-{benchmark}"),
            ("another release", manifest.model.release_manifest_sha256 == release.manifest_sha256),
            ("another model", manifest.model.model == model),
            ("other settings", isinstance(written, dict) and written.get("settings") == expected),
        )
        if not same
    ]
    if differs:
        return f"{out} already holds an evaluation of {', '.join(differs)}; {immutable}"
    return None


def _finite(value: Any) -> Any:
    """JSON has no NaN: an undefined figure is null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def parquet_bytes(table: pa.Table) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    return buffer.getvalue()


def metrics_document(result: EvaluationResult) -> dict[str, Any]:
    document: dict[str, Any] = _finite(
        {
            **result.metrics,
            "benchmark": result.benchmark,
            "release": {
                "name": result.release.name,
                "version": result.release.version,
                "manifest_sha256": result.release.manifest_sha256,
            },
            "model": result.model,
            "settings": redact(result.settings),
            "meaningless_demo_model": result.demo,
        }
    )
    return document


def write_results(result: EvaluationResult, out: str) -> ReleaseResult:
    """Write the folder as an immutable folder (`data/publish/folder.py`): staged, published by one rename, never
    overwritten."""
    writer = ImmutableFolder.at(out, f"evaluation-{result.benchmark}", result.release.version, ResultManifest)
    writer.volatile = {CARD}  # it names the code version: the same numbers from a later commit are the same result
    try:
        if result.per_query is not None:
            writer.write_bytes(PER_QUERY, parquet_bytes(result.per_query))
        for name, table in sorted(result.tables.items()):
            writer.write_bytes(f"{name}.parquet", parquet_bytes(table))
        for part_name, part in sorted(result.parts.items()):
            writer.write_bytes(f"{part_name}/{PER_QUERY}", parquet_bytes(part.per_query))
            for name, table in sorted(part.tables.items()):
                writer.write_bytes(f"{part_name}/{name}.parquet", parquet_bytes(table))
            for name, png in sorted(part.figures.items()):
                writer.write_bytes(f"{part_name}/figures/{name}", png)
        document = metrics_document(result)
        writer.write_bytes(METRICS, (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode())
        for name, png in sorted(result.figures.items()):
            writer.write_bytes(f"figures/{name}", png)
        writer.write_bytes(CARD, render_card(result, document).encode())
        return writer.commit(
            {
                "name": f"evaluation-{result.benchmark}",
                "version": result.release.version,
                "release_manifest_sha256": result.release.manifest_sha256,
                "model": result.model,
                "code_version": code_version(),
            }
        )
    except BaseException:
        writer.abort()
        raise


def fmt(value: Any) -> str:
    """A card or comparison table's cell: a number to 3 places, anything else as literal text (`markdown_text`: a
    group name, a model's name or a label read from a release or a result folder may hold markup)."""
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.3f}"
    return markdown_text(value)


def headline_rows(benchmark: str, metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """The headline metrics of the tasks run, with their intervals where the metrics carry them (`ci95`)."""
    ci = metrics.get("ci95", {})
    rows = []
    for name in headline_names(benchmark, metrics):
        low, high = ci.get(name, [None, None])
        rows.append(
            {"metric": name, "value": fmt(headline_value(metrics, name)), "95% CI": f"[{fmt(low)}, {fmt(high)}]"}
        )
    return rows


def _identity_rows(model: dict[str, Any]) -> list[dict[str, str]]:
    """The card's rows for what only some results carry: the display name (`--name`) and, for vectors made elsewhere,
    the model their files name (`vectors_from`); none for a result without them, so its card is as before."""
    rows = []
    if isinstance(model.get("display_name"), str):
        rows.append({"": "display name", "value": fmt(model["display_name"])})
    carried = model.get("vectors_from")
    if isinstance(carried, dict):
        parts = [carried.get("name"), carried.get("revision") and f"revision {carried['revision']}"]
        parts.append(carried.get("harness") and f"by {carried['harness']}")
        rows.append({"": "vectors from", "value": fmt(", ".join(str(x) for x in parts if x))})
    return rows


def _card_tables(result: EvaluationResult) -> list[CardConfig]:
    """The card's dataset configs: the paper's task's tables, then each part's (`retrieval_per_query` ...); the
    first per-query table is the default."""
    configs = []
    if result.per_query is not None:
        configs.append(CardConfig("per_query", result.per_query.num_rows, default=True, path=PER_QUERY, split="test"))
    configs += [
        CardConfig(name, result.tables[name].num_rows, path=f"{name}.parquet", split="test")
        for name in sorted(result.tables)
    ]
    for part_name, part in sorted(result.parts.items()):
        first = not configs
        configs.append(
            CardConfig(
                f"{part_name}_per_query",
                part.per_query.num_rows,
                default=first,
                path=f"{part_name}/{PER_QUERY}",
                split="test",
            )
        )
        configs += [
            CardConfig(f"{part_name}_{name}", table.num_rows, path=f"{part_name}/{name}.parquet", split="test")
            for name, table in sorted(part.tables.items())
        ]
    return configs


def render_card(result: EvaluationResult, document: dict[str, Any]) -> str:
    configs = _card_tables(result)
    model = result.model
    version = code_version()
    title = f"{result.benchmark} evaluation of {result.model_id}"
    lines = [
        front_matter(card_configs(configs), title, ["evaluation", result.benchmark]),
        f"# {result.benchmark} {result.release.version}: {result.model_id}\n",
        empty_configs_note(configs),
    ]
    if result.demo:
        tokens = result.settings.get("demo_answer_cap")
        lines.append(DEMO_WARNING + (" " + DEMO_VLM_NOTE.format(tokens=tokens) if tokens else "") + "\n")
    for warning in result.warnings:
        lines.append(f"> **Warning.** {warning}\n")
    lines += [
        "## What was evaluated\n",
        markdown_table(
            [
                {"": "release", "value": markdown_text(f"{result.release.name} {result.release.version}")},
                {"": "release manifest sha256", "value": code_span(result.release.manifest_sha256)},
                # the model's name may come from a harness's results file (lmms-eval's `model_name`): text, escaped
                {"": "model backend", "value": fmt(model.get("backend"))},
                {"": "model", "value": fmt(model.get("name"))},
                *_identity_rows(model),
                {
                    "": "weights sha256",
                    "value": code_span(model["weights_sha256"]) if model.get("weights_sha256") else "–",
                },
                *_predictions_rows(result.settings),
                {"": "code version", "value": f"{version.get('version')} {version.get('git_commit') or ''}".strip()},
            ]
        ),
        "## Headline\n",
        markdown_table(headline_rows(result.benchmark, document)),
    ]
    if result.per_query is not None:
        lines += detail_sections(result)
    for _, part in sorted(result.parts.items()):
        lines += part.card
    if result.skipped:
        lines += ["## Not computed\n", "\n".join(f"* {s}" for s in result.skipped) + "\n"]
    figures = [(n, f"figures/{n}") for n in sorted(result.figures)] + [
        (figure, f"{name}/figures/{figure}")
        for name, part in sorted(result.parts.items())
        for figure in sorted(part.figures)
    ]
    if figures:
        lines += ["## Figures\n", "\n".join(f"![{alt}]({path})" for alt, path in figures) + "\n"]
    lines += ["## Files\n"]
    if result.per_query is not None:
        lines.append(
            f"* `{PER_QUERY}`: one row per {registry.get(result.benchmark).per_query_row}; "
            "`datasets.load_dataset(<this folder>)` loads it.\n"
        )
    lines += [f"* `{name}.parquet`\n" for name in sorted(result.tables)]
    for name, part in sorted(result.parts.items()):
        lines += [f"* `{name}/{PER_QUERY}`: one row per query of the {name} task.\n"]
        lines += [f"* `{name}/{table}.parquet`\n" for table in sorted(part.tables)]
    lines.append(f"* `{METRICS}`: every figure above, with the settings that produced them.\n")
    return "\n".join(lines)


def _predictions_rows(settings: dict[str, Any]) -> list[dict[str, Any]]:
    """The card's rows naming the prediction file a harness wrote, when the answers came from one (none otherwise)."""
    source = settings.get("predictions")
    if not isinstance(source, dict):
        return []
    return [
        {"": "answers from", "value": f"{fmt(source.get('harness'))} prediction file {code_span(source.get('file'))}"},
        {"": "prediction file sha256", "value": code_span(source.get("sha256"))},
    ]


def detail_sections(result: EvaluationResult) -> list[str]:
    """The benchmark's paper-shaped card sections after the headline (its registry entry's `card_sections`)."""
    sections = registry.get(result.benchmark).card_sections
    return [] if sections is None else list(sections.load()(result))


# --- compare ------------------------------------------------------------------------------------------------------


#: A metrics.json is a few kB (a few MB with per-country tables); a bigger one is not ours.
MAX_METRICS_BYTES = 64 << 20


class MetricsReadError(ValueError):
    """A metrics.json that `compare` cannot read: the message names the file and the field."""


def read_metrics(folder: str | Path) -> dict[str, Any]:
    """A result folder's metrics.json, with the fields `compare` reads checked (MetricsReadError names them)."""
    path = Path(folder) / METRICS
    if not path.is_file():
        raise FileNotFoundError(f"{folder}: no {METRICS}; not an evaluation result folder")
    document, _ = read_json_object(
        path, MAX_METRICS_BYTES, error=MetricsReadError, too_big=f"not an evaluation's {METRICS}"
    )
    _check_metrics(path, document)
    return document


def _check_metrics(path: Path, document: dict[str, Any]) -> None:
    def bad(field: str, wanted: str, value: Any) -> MetricsReadError:
        return MetricsReadError(f"{path}: field {field!r} must be {wanted}, not {repr(value)[:80]}")

    benchmark = document.get("benchmark")
    if not registry.is_registered(benchmark):
        raise bad("benchmark", f"one of {', '.join(registry.names())}", benchmark)
    spec = registry.get(str(benchmark))
    for section, keys in (("release", ("version", "manifest_sha256")), ("model", ("model_id",))):
        value = document.get(section)
        if not isinstance(value, dict) or not all(isinstance(value.get(k), str) for k in keys):
            raise bad(section, f"an object with {' and '.join(repr(k) for k in keys)} (text)", value)

    def number(v: object) -> bool:
        return v is None or (isinstance(v, int | float) and not isinstance(v, bool))

    ci = document.get("ci95", {})
    if not isinstance(ci, dict):
        raise bad("ci95", "an object of [low, high] pairs", ci)
    tasks = document.get("tasks", [spec.default_task])
    if not isinstance(tasks, list) or not tasks or not all(t in spec.task_names for t in tasks):
        raise bad("tasks", f"a list of {', '.join(spec.task_names)}", tasks)
    for task in tasks:
        for name in spec.task(task).headline:
            value = document.get(name)
            if isinstance(value, dict) and not all(number(v) for v in value.values()):
                raise bad(name, "an object of numbers or nulls", value)
    for name in headline_names(spec.name, document):
        if not number(headline_value(document, name)):
            raise bad(name, "a number or null", headline_value(document, name))
        pair = ci.get(name, [None, None])
        if not isinstance(pair, list) or len(pair) != 2 or not all(number(v) for v in pair):
            raise bad(f"ci95.{name}", "a [low, high] pair of numbers or nulls", pair)


COMPARISON = pa.schema(
    [
        pa.field("benchmark", pa.string(), nullable=False),
        pa.field("release_version", pa.string(), nullable=False),
        pa.field("release_manifest_sha256", pa.string(), nullable=False),
        pa.field("model_id", pa.string(), nullable=False),
        pa.field("metric", pa.string(), nullable=False),
        pa.field("value", pa.float64()),
        pa.field("ci_low", pa.float64()),
        pa.field("ci_high", pa.float64()),
    ]
)


def compare(folders: list[str | Path]) -> tuple[pa.Table, bytes, str]:
    """Several models' results on one benchmark: a long table, one grouped-bar figure, and a Markdown table.
    Results of different benchmarks cannot share a table; different releases are allowed but named."""
    documents = [read_metrics(f) for f in folders]
    benchmarks = {d["benchmark"] for d in documents}
    if len(benchmarks) != 1:
        raise ValueError(f"results of different benchmarks cannot be compared in one table: {sorted(benchmarks)}")
    benchmark = benchmarks.pop()
    # Every metric any of them has, in task order: a model evaluated on one task only shows a dash for the other's.
    names = list(dict.fromkeys(n for d in documents for n in headline_names(benchmark, d)))
    rows = []
    for d in documents:
        ci = d.get("ci95", {})
        for name in names:
            low, high = ci.get(name, [None, None])
            rows.append(
                {
                    "benchmark": benchmark,
                    "release_version": d["release"]["version"],
                    "release_manifest_sha256": d["release"]["manifest_sha256"],
                    "model_id": d["model"]["model_id"],
                    "metric": name,
                    "value": headline_value(d, name),
                    "ci_low": low,
                    "ci_high": high,
                }
            )
    table = pa.Table.from_pylist(rows, schema=COMPARISON)
    labels = [f"{d['model']['model_id']} @ {d['release']['version']}" for d in documents]
    releases = {d["release"]["version"] for d in documents}
    shown = unique(
        [display_name(d["model"]) + (f" @ {d['release']['version']}" if len(releases) > 1 else "") for d in documents]
    )
    figure = compare_png(shown, comparison_points(documents, names), f"{benchmark}: models compared (95% intervals)")
    markdown = markdown_table(
        [
            {"model": markdown_text(label), **{n: fmt(headline_value(d, n)) for n in names}}
            for label, d in zip(labels, documents, strict=True)
        ]
    )
    return table, figure, markdown


def comparison_points(documents: Sequence[dict[str, Any]], names: Sequence[str]) -> dict[str, list[Point]]:
    """Each headline figure's (value, low, high) per result, for the comparison figure."""

    def point(document: dict[str, Any], name: str) -> Point:
        value = headline_value(document, name)
        low, high = document.get("ci95", {}).get(name, [None, None])
        number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        return (number, low, high)

    return {name: [point(d, name) for d in documents] for name in names}
