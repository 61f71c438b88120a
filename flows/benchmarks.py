"""The benchmarks this project builds, by the name the CLI and the flows use. Each module named here defines one
`Benchmark` record (`flows/engine/benchmark.py`); adding a benchmark is adding its package and a line here.

Imported lazily: the CLI's quick commands need not import every benchmark's stages and backends.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flows.engine.benchmark import Benchmark


@dataclass(frozen=True)
class Entry:
    module: str  # defines the record
    attribute: str
    demo_help: str  # what `culturebench build <name> --demo` builds
    needs: str | None = None  # what a non-demo build must be given (printed when it is missing)


REGISTRY: dict[str, Entry] = {
    "3xcm": Entry(
        "flows.xcm.build", "XCM", demo_help="Offline demo: generate a corpus and build on embedded defaults."
    ),
    "mixcube": Entry(
        "flows.mixcube.build",
        "MIXCUBE",
        demo_help="Offline demo: composed originals, embedded backends, placeholder inpainting.",
        needs="give --config (with an `originals` section) or --demo",
    ),
}


class UnknownBenchmark(KeyError):
    pass


def names() -> list[str]:
    return list(REGISTRY)


def get(name: str) -> Benchmark[Any]:
    try:
        entry = REGISTRY[name]
    except KeyError:
        raise UnknownBenchmark(f"unknown benchmark {name!r}; known: {', '.join(REGISTRY)}") from None
    return getattr(importlib.import_module(entry.module), entry.attribute)


def by_flow_name(flow_name: str) -> Benchmark[Any]:
    for name in REGISTRY:
        benchmark = get(name)
        if benchmark.flow_name == flow_name:
            return benchmark
    raise UnknownBenchmark(f"no benchmark has the flow {flow_name!r}")


def all_benchmarks() -> list[Benchmark[Any]]:
    return [get(name) for name in REGISTRY]
