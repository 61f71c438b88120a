"""The suite's own scheduling under pytest-xdist (tests/support/scheduling.py): markers from fixtures, a module's
shared fixture built once on one worker, the Label Studio tests on one worker, the longest modules handed out first."""

from __future__ import annotations

import re

import pytest

from tests.support.paths import REPO_ROOT

CONFTEST = """
import pytest

pytest_plugins = ["tests.support.scheduling"]


@pytest.fixture
def label_studio():
    return "server"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return tmp_path_factory.mktemp("built")
"""

FILES = {
    "test_shared.py": "SLOW_FIXTURES = {'built'}\n\n"
    + "".join(f"def test_{n}(built):\n    pass\n\n" for n in ("one", "two", "three")),
    "test_review_a.py": "def test_a(label_studio):\n    pass\n",
    "test_review_b.py": "def test_b(label_studio):\n    pass\n",
    "test_plain.py": "".join(f"def test_{n}():\n    pass\n\n" for n in range(8)),
    "test_long.py": "import pytest\n\n@pytest.mark.browser\ndef test_screenshot():\n    pass\n",
}
INI = """[pytest]
markers =
    server: a server
    harness: a harness
    browser: a browser
    dask: a cluster
    slow: slow
    prefect: prefect
"""


def _workers(output: str) -> dict[str, str]:
    """test name -> the worker that ran it, from `-v` lines like `[gw1] PASSED test_shared.py::test_one@...`."""
    found = re.findall(r"\[(gw\d+)\] .*?PASSED (\S+?)(?:@\S+)?\s*$", output, flags=re.M)
    return {name.split("::")[-1]: worker for worker, name in found}


@pytest.mark.slow
def test_module_fixtures_and_label_studio_stay_on_one_worker_and_markers_follow_fixtures(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))  # `tests.support.scheduling` in the subprocesses
    pytester.makeconftest(CONFTEST)
    pytester.makeini(INI)
    for name, text in FILES.items():
        pytester.makepyfile(**{name.removesuffix(".py"): text})
    run = pytester.runpytest_subprocess("-n", "2", "-v", "-p", "no:cacheprovider", "--dist", "loadgroup",
                                        "--no-loadscope-reorder")  # fmt: skip
    assert run.ret == 0, run.stdout.str()
    workers = _workers(run.stdout.str())
    assert len(workers) == 14, run.stdout.str()
    assert workers["test_one"] == workers["test_two"] == workers["test_three"]  # the module's fixture: one worker
    assert workers["test_a"] == workers["test_b"]  # one Label Studio server
    assert len(set(workers.values())) == 2  # and the plain tests spread over both

    # `server` follows from the fixture and `slow` from the module's SLOW_FIXTURES: -m leaves out both review tests
    # and the three that take the build, and nothing else.
    fast = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-m", "not server and not browser and not slow")
    fast.assert_outcomes(passed=8)
