"""What each test needs (markers), and how pytest-xdist shares the tests out. Registered in conftest.py through
`pytest_plugins`.

Markers ([tool.pytest.ini_options] in pyproject.toml): a test module marks what it starts itself (`pytestmark`);
what follows from a fixture is marked here, so that a new test that takes `label_studio` or `prefect` is marked
without a word:

- `server`: the Prefect test server (`prefect`, `prefect_server`), a real `prefect server` (`prefect_api`), or Label
  Studio (`label_studio`); also every test marked `prefect`.
- `dask`: the modules in `MODULE_MARKS` (the engine's tests, kept in tests/flows/engine/, start Dask clusters).
- `slow`: every test that takes a fixture its module names in `SLOW_FIXTURES` (a module-scoped build or export),
  besides the tests marked by hand.

Under xdist (`make test` runs `pytest -n auto`; `--dist loadgroup` in addopts):

- the tests of Label Studio go to one worker, which starts the one server they share;
- the tests of a module that has a module-scoped fixture (a build, an export, a server) stay together on one worker,
  so that the fixture is built once;
- every other test is scheduled on its own, and the modules of the longest tests (browser, Dask, server, harness,
  slow, in that order) are handed out first, so that no worker starts an eight-minute test at the end of the run.
  Within a module the order is the written one.
"""

from __future__ import annotations

import pytest

SERVER_FIXTURES = frozenset({"prefect_server", "prefect_api", "label_studio"})
MODULE_MARKS: dict[str, tuple[str, ...]] = {"tests/flows/engine/test_scale_out.py": ("dask",)}
LABEL_STUDIO_GROUP = "label-studio"
# Handed out first, in this order (see the module docstring).
LONGEST_FIRST = ("browser", "dask", "server", "harness", "slow")
SHARED_SCOPES = frozenset({"module", "package", "class"})


def _module_path(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def _has_shared_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(defs and defs[-1].scope in SHARED_SCOPES for defs in info.name2fixturedefs.values())


def _rank(item: pytest.Item) -> int:
    names = {mark.name for mark in item.iter_markers()}
    return next((rank for rank, name in enumerate(LONGEST_FIRST) if name in names), len(LONGEST_FIRST))


def _group(item: pytest.Item) -> str | None:
    named = sorted({str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                    for mark in item.iter_markers("xdist_group")})  # fmt: skip
    if named:
        return "_".join(named)
    if "label_studio" in getattr(item, "fixturenames", ()):
        return LABEL_STUDIO_GROUP
    return _module_path(item) if _has_shared_fixture(item) else None


def _set_group(item: pytest.Item, group: str) -> None:
    """What xdist's loadgroup does with an `xdist_group` mark: the group after an `@` at the end of the node id, which
    the scheduler reads. pytest 9.2 keeps the id in `_id` (a NodeId), where xdist 3.8 still writes `_nodeid`, so its
    own marking is lost (pytest-xdist issue 1386): this plugin sets the id itself and adds no `xdist_group` mark."""
    nodeid = f"{item.nodeid}@{group}"
    if hasattr(item, "_id"):
        from _pytest.nodeid import NodeId

        item._id = NodeId.parse(nodeid)
    else:
        item._nodeid = nodeid


@pytest.hookimpl(tryfirst=True)  # before `-m` selects, and before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for name in MODULE_MARKS.get(_module_path(item), ()):
            item.add_marker(name)
        # A module names its fixtures that build (a release, an export) in SLOW_FIXTURES: their tests are slow
        if set(getattr(getattr(item, "module", None), "SLOW_FIXTURES", ())) & set(getattr(item, "fixturenames", ())):
            item.add_marker("slow")
        if SERVER_FIXTURES & set(getattr(item, "fixturenames", ())) or item.get_closest_marker("prefect"):
            item.add_marker("server")

    if not hasattr(config, "workerinput"):
        return  # no xdist worker: the written order, no groups
    if config.getvalue("loadgroup"):
        for item in items:
            group = _group(item)
            if group:
                _set_group(item, group)
    # Every worker sorts the same collection the same way (xdist checks that they agree). A stable sort: the modules
    # by the rank of their longest test, the tests of a module in their written order.
    module_rank: dict[str, int] = {}
    for item in items:
        path = _module_path(item)
        module_rank[path] = min(module_rank.get(path, len(LONGEST_FIRST)), _rank(item))
    first_seen = {path: index for index, path in enumerate(dict.fromkeys(_module_path(i) for i in items))}
    items.sort(key=lambda item: (module_rank[_module_path(item)], first_seen[_module_path(item)]))
