"""The benchmark registry: what each benchmark's evaluation is, in one place, so that the generic code (the runner,
the result folder and its card, `compare`, the leaderboard, the CLI) asks it and never names a benchmark.

A benchmark registers one `Benchmark`: its tasks (the paper's first) and each task's headline keys, the release
tables its evaluation reads, and lazy references (`Ref`, "module:attribute") to its config model, its evaluator, its
card sections, its leaderboard tables and breakdowns, its papers' published rows and its command-line front. The
references are resolved only when used, so listing the benchmarks (`culturebench evaluate --help`) imports nothing
heavy. 3XCM registers in `evaluation/xcm/benchmark.py`, MixCuBe in `evaluation/mixcube/benchmark.py`; another
benchmark calls `register` (a test registers a toy one that way)."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

#: The packages whose `BENCHMARK` is registered on first use, in the order the CLI lists them.
BUILT_IN = ("evaluation.xcm.benchmark", "evaluation.mixcube.benchmark")


@dataclass(frozen=True)
class Ref:
    """A lazy reference, "package.module:attribute", imported when first loaded."""

    path: str

    def load(self) -> Any:
        module, _, attribute = self.path.partition(":")
        return getattr(importlib.import_module(module), attribute)


@dataclass(frozen=True)
class Task:
    name: str
    #: The headline metrics the task puts at the top level of `metrics.json`, in the card's column order. A value
    #: that is an object (MaxSkew per prompt set) is shown and compared per key, as `max_skew.communion`.
    headline: tuple[str, ...]
    #: A task other than the paper's writes a part folder of its own, named after it.
    part: bool = False


@dataclass(frozen=True)
class Benchmark:
    name: str  # as releases and result folders name it ("3xcm")
    title: str  # as pages show it ("3XCM")
    tasks: tuple[Task, ...]  # the paper's first: the default, whose result folder carries no `tasks` key
    reads: tuple[str, ...]  # the release tables (config folders) the evaluation reads, hashed before any model runs
    per_query_row: str  # what one row of per_query.parquet is ("benchmark row", "image")
    #: The config model (a pydantic model with `benchmark: Literal[name]`, on `evaluation.config.EvaluateCommon`).
    config: Ref
    #: `prepare(config, release) -> evaluation.config.Prepared`: the models built and the settings known, not run.
    prepare: Ref
    #: `(EvaluationResult) -> list[str]`: the card's paper-shaped sections after the headline (none: no such).
    card_sections: Ref | None = None
    #: `evaluation.leaderboard.spec.LeaderboardSpec`: the page's tables and how a result's breakdowns are read.
    leaderboard: Ref | None = None
    #: `() -> list[PublishedRow]`: the papers' own rows, shown beside ours where asked (none: no paper rows).
    published: Ref | None = None
    #: A text: whose numbers the published rows are and on what data (shown on the page with them).
    published_notice: Ref | None = None
    #: The command-line front (`culturebench evaluate NAME`), a Typer command function in `flows/cli/` (none: the
    #: generic command: release, --config, --task, --demo-model, --out, --results-root).
    cli: Ref | None = None
    #: The pydantic model its metrics.json reads through (`evaluation.results.metrics`; none: the envelope alone).
    metrics_model: Ref | None = None
    exports: tuple[str, ...] = field(default_factory=tuple)  # the harnesses a release exports to

    def task(self, name: str) -> Task:
        for task in self.tasks:
            if task.name == name:
                return task
        raise KeyError(f"{self.name} has no task {name!r}: one of {', '.join(self.task_names)}")

    @property
    def task_names(self) -> tuple[str, ...]:
        return tuple(task.name for task in self.tasks)

    @property
    def default_task(self) -> str:
        return self.tasks[0].name


_REGISTERED: dict[str, Benchmark] = {}
_LOADED = False


def register(benchmark: Benchmark) -> Benchmark:
    """Add (or replace) a benchmark; returns it."""
    _REGISTERED[benchmark.name] = benchmark
    return benchmark


def unregister(name: str) -> None:
    _REGISTERED.pop(name, None)


def _load_built_in() -> None:
    global _LOADED
    if not _LOADED:
        _LOADED = True
        for package in BUILT_IN:
            module = importlib.import_module(package)
            _REGISTERED.setdefault(module.BENCHMARK.name, module.BENCHMARK)


def benchmarks() -> Iterator[Benchmark]:
    _load_built_in()
    return iter(list(_REGISTERED.values()))


def names() -> tuple[str, ...]:
    return tuple(b.name for b in benchmarks())


def get(name: str) -> Benchmark:
    """The benchmark of that name; KeyError naming the registered ones otherwise."""
    _load_built_in()
    try:
        return _REGISTERED[name]
    except KeyError:
        raise KeyError(f"no benchmark {name!r}: one of {', '.join(_REGISTERED)}") from None


def is_registered(name: object) -> bool:
    _load_built_in()
    return isinstance(name, str) and name in _REGISTERED
