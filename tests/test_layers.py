"""The package layering, checked on the source (every import, at module level or inside a function).

- `data/` is the shared infrastructure (schemas, workspace, releases, the retry policy, the LLM client, ...): it
  imports no other project package.
- `data/publish/` is the generic publishing code (immutable folders, shards, Croissant, cards, the release reader,
  patches): it imports no benchmark's module, neither from `flows/` (each benchmark's release content sits there)
  nor one named after a benchmark (`*_3xcm`, `*_mixcube`, `xcm`), and none of its modules is named after one.
- The domain folders `collectors/`, `curation/`, `synthesis/`, `annotation/` and `evaluation/` (which consumes
  releases and builds nothing) import `data/` and their own folder only, apart from the few imports listed in
  `EXCEPTIONS`, each with its reason.
- `demo/` is the offline demo material (the synthetic corpus, the tiny random models): it may import `data/` and the
  domain folders, and only `flows/` imports it, apart from the entries in `EXCEPTIONS`.
- `flows/` orchestrates and may import anything; nothing outside `flows/` imports it.
- A benchmark's package (`flows/xcm/`, `flows/mixcube/`) uses the engine through its public modules only
  (`ENGINE_PUBLIC`): not the runner, the Dask scale-out or the worker pool under the engine (`data/process_pool.py`),
  which decide where work runs.
- The engine, `flows/engine/`, knows no benchmark and no domain: it imports `data/` and `flows/engine/` only (no
  `flows.xcm`, `flows.mixcube` or other flows module, no module named after a benchmark, no domain folder, no
  `demo/`); what it runs (stages, reviews, releases) a benchmark's record hands it.
- No import cycle between project modules. Imports under `if TYPE_CHECKING:` never run, so they count for the
  layering but not for cycles.

The checker reads files, not the import system, so a lazy import inside a function is seen like any other. It is
run once on a small made-up project first, so a checker that stopped finding anything fails too.
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT
PACKAGES = ("data", "collectors", "curation", "synthesis", "annotation", "evaluation", "demo", "flows")
DOMAINS = ("collectors", "curation", "synthesis", "annotation", "evaluation")
INFRASTRUCTURE = "data"
DEMO = "demo"
ORCHESTRATION = "flows"
PUBLISHING = "data.publish"
ENGINE = "flows.engine"
#: The engine's public interface, what a benchmark's package may import of it (`flows/engine/__init__.py`).
ENGINE_PUBLIC = frozenset(
    f"{ENGINE}.{name}" for name in ("benchmark", "config", "graph", "placement", "shards", "slots")
)
#: The worker pool the engine runs local work on: a benchmark asks `flows.engine.placement` instead.
WORKER_POOL = "data.process_pool"
BENCHMARK_PACKAGES = ("flows.xcm", "flows.mixcube")
#: A module named after a benchmark (`data.release_3xcm`, `curation.validate_mixcube`, `flows.xcm.release`).
BENCHMARK_NAMED = re.compile(r"(^|[._])(3xcm|xcm|mixcube)($|[._])")

#: Imports across domain folders that are allowed, (importing module, imported module) -> why. Keep it short: an
#: entry here is a dependency a reader cannot guess from the folder names. An entry no import uses fails the test.
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("collectors.image_pass", "curation.image_hashing"): (
        "The image pass (issue 60): the import reads each image once and decodes it once, and from that decode makes "
        "the hashes and the dedup's thumbnails with curation's own code, so that no later stage reads or decodes "
        "the image again (docs/contributors.md, 'The image pass')."
    ),
    ("collectors.image_pass", "curation.image_thumbnails"): "As above: the one reduced decode and its thumbnails.",
    ("collectors.image_pass", "curation.thumbnail_packs"): "As above: the shard's thumbnails blob, in its one format.",
    ("curation.reassemble", "collectors.concepts"): (
        "Reassembling a released benchmark needs the query texts its build used: the shipped concepts and "
        "translations, made by the same collectors (shipped backends, no model, no network) so the texts are "
        "byte for byte the build's. Imported inside the function that needs them."
    ),
    ("curation.reassemble", "collectors.translations"): "As above: the shipped translations of the pool's concepts.",
    ("evaluation.config", "demo.models"): (
        "`--demo-model` builds a tiny random model when the evaluation asks for it, imported inside the function "
        "that builds it: the evaluation config names the demo model, so the run resolves it."
    ),
    ("evaluation.mixcube.evaluate", "demo.models"): (
        "The demo VLM's answer cap, named in its result's settings (and so its card) only when the demo model "
        "answered: imported inside that function, as above."
    ),
    ("evaluation.xcm.retrieval", "curation.rules"): (
        "The retrieval task (GlobalRG's and RAVENEA's protocols on a 3XCM release): an image is relevant to a "
        "retrieval query if it shows the concept by the same rule as assembly (its concept, a tag, a byte or pixel "
        "copy): `Catalog.shows`, read-only, numpy and pyarrow only. A second copy of the rule in evaluation/ could "
        "drift from the one the benchmark was built by."
    ),
}


@dataclass(frozen=True)
class Import:
    source: str  # importing module, dotted
    target: str  # imported project module, dotted
    path: str  # importing file, relative to the root
    line: int
    type_only: bool  # under `if TYPE_CHECKING:`

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def project_modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the project packages under `root`."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST) -> Iterable[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement anywhere in the tree (functions, classes, try blocks, ...), and whether it sits in
    the body of an `if TYPE_CHECKING:`."""
    stack: list[tuple[ast.AST, bool]] = [(tree, False)]
    while stack:
        node, type_only = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, type_only
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack += [(child, True) for child in node.body]
            stack += [(child, type_only) for child in node.orelse]
            continue
        stack += [(child, type_only) for child in ast.iter_child_nodes(node)]


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module that `name` (a module or a name inside one) lives in; None outside the project."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def project_imports(root: Path) -> list[Import]:
    modules = project_modules(root)
    found = []
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        rel = path.relative_to(root).as_posix()
        for node, type_only in _import_nodes(ast.parse(path.read_text(encoding="utf-8"), filename=rel)):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:  # relative: from the package this module is in (a package is its own)
                    package = module.split(".") if is_package else module.split(".")[:-1]
                    package = package[: len(package) - (node.level - 1)]
                    base = ".".join([*package, *([base] if base else [])])
                # `from pkg import mod` imports the module pkg.mod; `from mod import name` imports mod.
                names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
            for name in dict.fromkeys(names):
                target = _resolve(name, modules)
                if target is not None and target != module:
                    found.append(Import(module, target, rel, node.lineno, type_only))
    return sorted(found, key=lambda item: (item.path, item.line, item.target))


def _publishing(module: str) -> bool:
    return module == PUBLISHING or module.startswith(f"{PUBLISHING}.")


def _engine(module: str) -> bool:
    return module == ENGINE or module.startswith(f"{ENGINE}.")


def _benchmark_package(module: str) -> bool:
    return any(module == package or module.startswith(f"{package}.") for package in BENCHMARK_PACKAGES)


def layer_violations(imports: Iterable[Import], exceptions: dict[tuple[str, str], str]) -> list[str]:
    problems = []
    for item in imports:
        source_top, target_top = item.source.split(".")[0], item.target.split(".")[0]
        if _publishing(item.source) and (target_top == ORCHESTRATION or BENCHMARK_NAMED.search(item.target)):
            problems.append(
                f"{item.where}: {item.source} imports {item.target}, but data/publish/ is generic: it imports no "
                "benchmark's module (that content goes beside the benchmark, in flows/<benchmark>/)"
            )
            continue
        if _engine(item.source) and (
            not (_engine(item.target) or target_top == INFRASTRUCTURE) or BENCHMARK_NAMED.search(item.target)
        ):
            problems.append(
                f"{item.where}: {item.source} imports {item.target}, but the engine knows no benchmark and no domain: "
                "flows/engine/ imports data/ and flows/engine/ only (a benchmark's record hands it what it runs)"
            )
            continue
        if _benchmark_package(item.source) and (
            (_engine(item.target) and item.target not in ENGINE_PUBLIC) or item.target == WORKER_POOL
        ):
            public = ", ".join(sorted(module.rsplit(".", 1)[1] for module in ENGINE_PUBLIC))
            problems.append(
                f"{item.where}: {item.source} imports {item.target}, but a benchmark uses the engine through its "
                f"public modules only (flows/engine/: {public})"
            )
            continue
        if source_top in (ORCHESTRATION, target_top) or (source_top == DEMO and target_top != ORCHESTRATION):
            continue
        if source_top == INFRASTRUCTURE:
            problems.append(f"{item.where}: {item.source} imports {item.target}, but data/ imports no other package")
        elif target_top == ORCHESTRATION:
            problems.append(f"{item.where}: {item.source} imports {item.target}: only flows/ may import flows")
        elif source_top in DOMAINS and target_top != INFRASTRUCTURE and (item.source, item.target) not in exceptions:
            problems.append(
                f"{item.where}: {item.source} imports {item.target}, but {source_top}/ may import only data/ and "
                f"{source_top}/ (or add a reasoned entry to EXCEPTIONS in tests/test_layers.py)"
            )
    return problems


def benchmark_named_publishing(modules: Iterable[str]) -> list[str]:
    """The modules of data/publish/ named after a benchmark."""
    return [m for m in modules if _publishing(m) and BENCHMARK_NAMED.search(m[len(PUBLISHING) :])]


def unused_exceptions(imports: Iterable[Import], exceptions: dict[tuple[str, str], str]) -> list[str]:
    used = {(item.source, item.target) for item in imports}
    return [f"{source} -> {target}" for source, target in exceptions if (source, target) not in used]


def import_cycles(imports: Iterable[Import]) -> list[str]:
    """One cycle per strongly connected group of modules (runtime imports only), as `a (file:line) -> b ... -> a`."""
    edges: dict[str, dict[str, Import]] = {}
    for item in imports:
        if not item.type_only:
            edges.setdefault(item.source, {}).setdefault(item.target, item)
    # Tarjan's strongly connected components, iteratively.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, {}))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, {})))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    cycles = []
    for group in groups:
        members = set(group)
        # The shortest way from the group's first module back to itself, inside the group.
        first = group[0]
        paths = {first: [first]}
        queue = [first]
        cycle: list[str] | None = None
        while queue and cycle is None:
            node = queue.pop(0)
            for child in sorted(edges.get(node, {})):
                if child == first:
                    cycle = [*paths[node], first]
                    break
                if child in members and child not in paths:
                    paths[child] = [*paths[node], child]
                    queue.append(child)
        assert cycle is not None
        steps = [f"{a} ({edges[a][b].where})" for a, b in itertools.pairwise(cycle)]
        cycles.append(" -> ".join([*steps, first]))
    return cycles


# -- the checker on a made-up project: it must find what is planted ----------------------------------------------
def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_checker_finds_planted_violations_and_cycles(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            **{f"{package}/__init__.py": "" for package in PACKAGES},
            "data/base.py": "def f():\n    from curation import c\n",  # data importing a domain, lazily
            "curation/c.py": "from data.base import f\n\ndef g():\n    from synthesis.d import x\n",  # lazily
            "collectors/a.py": "from . import b\n",
            "collectors/b.py": "import collectors.a\n",
            "synthesis/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from flows import e\nx = 1\n",
            "synthesis/s.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from synthesis import t\n",
            "synthesis/t.py": "from synthesis import s\n",  # a cycle only through a type-only import: none
            "flows/e.py": "from curation.c import g\nfrom synthesis.d import x\n",
            # The engine: data/ and itself, nothing else (a type-only import counts too).
            "flows/engine/__init__.py": "",
            "flows/engine/g.py": (
                "from data.base import f\nfrom flows.engine import h\nfrom flows.e import g\n"
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from curation.c import g\n"
            ),
            "flows/engine/h.py": "def f():\n    from data import release_3xcm\n",
            # A benchmark's package: the engine's public modules only, and not the worker pool under it.
            "flows/xcm/__init__.py": "",
            "flows/xcm/b.py": "from flows.engine import h\nfrom data.process_pool import run\n",
            "data/process_pool.py": "",
            "data/release_3xcm.py": "",
            "data/publish/__init__.py": "",
            "data/publish/p.py": "from data import release_3xcm\n\ndef f():\n    from flows.e import g\n",
            "data/publish/card_mixcube.py": "",
        },
    )
    imports = project_imports(tmp_path)
    problems = layer_violations(imports, {})
    assert problems == [
        "curation/c.py:4: curation.c imports synthesis.d, but curation/ may import only data/ and curation/ "
        "(or add a reasoned entry to EXCEPTIONS in tests/test_layers.py)",
        "data/base.py:2: data.base imports curation.c, but data/ imports no other package",
        "data/publish/p.py:1: data.publish.p imports data.release_3xcm, but data/publish/ is generic: it imports no "
        "benchmark's module (that content goes beside the benchmark, in flows/<benchmark>/)",
        "data/publish/p.py:4: data.publish.p imports flows.e, but data/publish/ is generic: it imports no "
        "benchmark's module (that content goes beside the benchmark, in flows/<benchmark>/)",
        *(
            f"flows/engine/{where} imports {target}, but the engine knows no benchmark and no domain: flows/engine/ "
            "imports data/ and flows/engine/ only (a benchmark's record hands it what it runs)"
            for where, target in (
                ("g.py:3: flows.engine.g", "flows.e"),
                ("g.py:6: flows.engine.g", "curation.c"),
                ("h.py:2: flows.engine.h", "data.release_3xcm"),
            )
        ),
        *(
            f"flows/xcm/b.py:{line}: flows.xcm.b imports {target}, but a benchmark uses the engine through its public "
            "modules only (flows/engine/: benchmark, config, graph, placement, shards, slots)"
            for line, target in ((1, "flows.engine.h"), (2, "data.process_pool"))
        ),
        "synthesis/d.py:3: synthesis.d imports flows.e: only flows/ may import flows",
    ]
    assert benchmark_named_publishing(project_modules(tmp_path)) == ["data.publish.card_mixcube"]
    assert layer_violations(imports, {("curation.c", "synthesis.d"): "reason"}) == problems[1:]
    # An entry of EXCEPTIONS allows a domain's import, never the engine's.
    assert layer_violations(imports, {("flows.engine.g", "curation.c"): "reason"}) == problems
    assert unused_exceptions(imports, {("curation.c", "annotation.z"): "reason"}) == ["curation.c -> annotation.z"]
    assert sorted(import_cycles(imports)) == [
        "collectors.a (collectors/a.py:1) -> collectors.b (collectors/b.py:1) -> collectors.a",
        "curation.c (curation/c.py:1) -> data.base (data/base.py:2) -> curation.c",  # the lazy import counts
    ]


# -- the project ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def imports() -> list[Import]:
    found = project_imports(ROOT)
    assert len(project_modules(ROOT)) > 50 and len(found) > 200, "the checker found too little: is ROOT right?"
    return found


def test_domains_import_only_data_and_their_own_folder(imports: list[Import]) -> None:
    problems = layer_violations(imports, EXCEPTIONS)
    assert not problems, "imports that break the layering:\n" + "\n".join(problems)


def test_publishing_is_generic() -> None:
    """No module of data/publish/ is named after a benchmark (its imports are checked with the layering above)."""
    named = benchmark_named_publishing(project_modules(ROOT))
    assert not named, "data/publish/ modules named after a benchmark (move them to flows/<benchmark>/):\n" + "\n".join(
        named
    )
    assert any(_publishing(m) for m in project_modules(ROOT)), "no data/publish/ package: is ROOT right?"


def test_every_allowed_exception_is_still_used(imports: list[Import]) -> None:
    stale = unused_exceptions(imports, EXCEPTIONS)
    assert not stale, "EXCEPTIONS entries no import uses any more (remove them):\n" + "\n".join(stale)


def test_no_import_cycles_between_project_modules(imports: list[Import]) -> None:
    cycles = import_cycles(imports)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)
