"""The suite's servers wait as long as the machine needs and no longer than a failure takes to show
(`tests/support/readiness.py`): the deadline grows with the load, a dead server fails at once with its log, a hung
one when it stops making progress; Label Studio, Prefect's temporary servers and the fake image host wait that way,
and Prefect in the test process has the CLI's settings (`flows/cli/prefect_defaults.py`)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from flows.cli.prefect_defaults import EPHEMERAL_STARTUP_TIMEOUT_S, prefect_defaults
from tests.support import readiness
from tests.support.label_studio_server import LABEL_STUDIO_ENV, free_port, start_label_studio
from tests.support.paths import REPO_ROOT
from tests.support.readiness import MAX_LOAD_FACTOR, NotReady, ServerExited, load_factor, wait_until_ready

BUSY = "while True:\n    pass\n"
IDLE = "import time\ntime.sleep(3600)\n"
QUICKLY_S = 30.0  # "at once", with room for a busy machine; every such wait below has a base of 600 s


def never() -> bool:
    return False


@pytest.fixture
def spawn() -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Python processes running a script, killed at the end of the test."""
    started: list[subprocess.Popen[bytes]] = []

    def run(code: str, log: Path | None = None) -> subprocess.Popen[bytes]:
        out = log.open("wb") if log is not None else subprocess.DEVNULL
        process = subprocess.Popen([sys.executable, "-c", code], stdout=out, stderr=subprocess.STDOUT)
        started.append(process)
        return process

    yield run
    for process in started:
        process.kill()
        process.wait()


def loads(monkeypatch: pytest.MonkeyPatch, *factors: float) -> None:
    """The load factor each poll reads: `factors` in turn, then the last one."""
    seen = iter(factors)
    last = [factors[-1]]
    monkeypatch.setattr(readiness, "load_factor", lambda: next(seen, last[0]))


@pytest.mark.parametrize(
    ("load", "cpus", "factor"), [(0.1, 2, 1.0), (2.0, 2, 1.0), (8.0, 2, 4.0), (9.0, 4, 2.25), (500.0, 2, None)]
)
def test_the_load_factor_is_runnable_processes_per_core_from_1_to_the_cap(
    load: float, cpus: int, factor: float | None
) -> None:
    assert load_factor(lambda: (load, 0.0, 0.0), cpus) == (factor if factor is not None else MAX_LOAD_FACTOR)


def test_a_ready_server_ends_the_wait_at_once() -> None:
    answers = iter([False, False, True])
    took = wait_until_ready("a server", lambda: next(answers), 600, poll_s=0.01)
    assert took < QUICKLY_S


def test_the_deadline_grows_with_the_load_and_never_shrinks(monkeypatch: pytest.MonkeyPatch) -> None:
    loads(monkeypatch, 1.0, 3.0, 1.0)  # the machine gets busy during the wait, then quiet again
    start = time.monotonic()
    with pytest.raises(NotReady, match=r"not ready within 3 s \(1 s times the load factor 3\.0\)"):
        wait_until_ready("a server", never, 1.0, poll_s=0.05)
    assert time.monotonic() - start >= 3.0


def test_errors_of_the_probe_count_as_not_yet_and_the_last_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    loads(monkeypatch, 1.0)

    def refused() -> bool:
        raise ConnectionRefusedError("nobody listens")

    with pytest.raises(NotReady, match="last: ConnectionRefusedError: nobody listens"):
        wait_until_ready("a server", refused, 0.2, poll_s=0.05)


def test_a_bug_in_the_probe_is_not_waited_on() -> None:
    answer: dict[str, bool] = {}
    with pytest.raises(KeyError):
        wait_until_ready("a server", lambda: answer["status"], 600)


def test_a_dead_server_fails_at_once_with_its_exit_code_and_log(
    spawn: Callable[..., subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    log = tmp_path / "server.log"
    process = spawn("print('migration failed: disk is full', flush=True)\nraise SystemExit(7)", log)
    start = time.monotonic()
    with pytest.raises(ServerExited) as raised:
        wait_until_ready("a server", never, 600, process=process, log_path=log)
    assert time.monotonic() - start < QUICKLY_S
    assert raised.value.returncode == 7
    assert "exited with code 7" in str(raised.value) and "migration failed: disk is full" in str(raised.value)


def test_a_live_server_that_does_nothing_fails_when_it_stalls(
    spawn: Callable[..., subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    log = tmp_path / "server.log"
    process = spawn(IDLE, log)
    start = time.monotonic()
    with pytest.raises(NotReady, match="alive but used no CPU and wrote no log for"):
        wait_until_ready("a server", never, 600, process=process, log_path=log, stall_s=2.0, poll_s=0.1)
    assert time.monotonic() - start < QUICKLY_S


def test_a_server_busy_starting_is_waited_for_until_the_deadline(
    spawn: Callable[..., subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    loads(monkeypatch, 1.0)
    process = spawn(BUSY)
    start = time.monotonic()
    with pytest.raises(NotReady, match="not ready within 4 s"):
        wait_until_ready("a server", never, 4.0, process=process, stall_s=2.0, poll_s=0.1)
    assert time.monotonic() - start >= 4.0  # past the stall window: it was using CPU all along


# Label Studio, its start as the fixture does it, with stand-ins for the executable.


def fake_label_studio(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    executable = tmp_path / "label-studio"
    executable.write_text(f"#!{sys.executable}\n{body}")
    executable.chmod(0o755)
    monkeypatch.setenv(LABEL_STUDIO_ENV, str(executable))


def test_label_studio_that_exits_fails_at_once_with_its_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_label_studio(
        tmp_path, monkeypatch, "print('OperationalError: no such table', flush=True)\nraise SystemExit(3)"
    )
    start = time.monotonic()
    with pytest.raises(ServerExited, match=r"(?s)label-studio on .* exited with code 3.*no such table"):
        start_label_studio(tmp_path / "ls", timeout_s=600)
    assert time.monotonic() - start < QUICKLY_S


def test_label_studio_gets_longer_on_a_loaded_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """240 s were too short beside other work: the wait is the fixture's 240 s times the load factor."""
    fake_label_studio(tmp_path, monkeypatch, BUSY)  # migrating, as far as anyone can tell
    loads(monkeypatch, 3.0)
    start = time.monotonic()
    with pytest.raises(NotReady, match=r"not ready within 3 s \(1 s times the load factor 3\.0\)"):
        start_label_studio(tmp_path / "ls", timeout_s=1)
    assert time.monotonic() - start >= 3.0


# Prefect's temporary servers in this process.


def test_prefect_here_has_the_clis_settings_and_the_patient_start() -> None:
    import prefect.settings
    from prefect.server.api.server import SubprocessASGIServer

    from tests.support.prefect_startup import patient_start

    assert prefect.settings.PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value() == EPHEMERAL_STARTUP_TIMEOUT_S
    assert set(prefect_defaults()) == {
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS",
        "PREFECT_SERVER_ANALYTICS_ENABLED",
    }
    assert SubprocessASGIServer.start is patient_start


def test_the_patch_lands_when_prefect_is_imported_after_it() -> None:
    code = textwrap.dedent(
        """
        import sys
        from tests.support import prefect_startup
        prefect_startup.install()
        assert "prefect.server.api.server" not in sys.modules
        import prefect.server.api.server as module
        print(module.SubprocessASGIServer.start is prefect_startup.patient_start)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["True"]


@pytest.fixture
def prefect_server_running(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[list[str]], Any]]:
    """A `SubprocessASGIServer` whose uvicorn command is replaced by the scripts given, one per start attempt (the
    last one again for any further attempt); `{port}` in a script is the port of that attempt. Stopped afterwards."""
    from prefect.server.api.server import SubprocessASGIServer

    made: list[Any] = []

    def make(scripts: list[str]) -> Any:
        server = SubprocessASGIServer(port=free_port())
        attempts = iter(scripts)
        last = [scripts[-1]]

        def command() -> subprocess.Popen[bytes]:
            script = next(attempts, last[0]).replace("{port}", str(server.port))
            return subprocess.Popen([sys.executable, "-c", script])

        monkeypatch.setattr(server, "_run_uvicorn_command", command)
        made.append(server)
        return server

    yield make
    for server in made:
        server.stop()


HEALTHY = textwrap.dedent(
    """
    from http.server import BaseHTTPRequestHandler, HTTPServer
    class Ok(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
        def log_message(self, *args):
            pass
    HTTPServer(("127.0.0.1", {port}), Ok).serve_forever()
    """
)


def test_a_prefect_server_that_crashes_fails_at_once(prefect_server_running: Callable[[list[str]], Any]) -> None:
    """Prefect's own wait polls /health to its timeout whatever became of the server."""
    server = prefect_server_running(["print('TypeError: Body() got an unexpected keyword argument'); exit(1)"])
    start = time.monotonic()
    with pytest.raises(ServerExited, match=r"Prefect's temporary API server on .* exited with code 1"):
        server.start(timeout=60)
    assert time.monotonic() - start < QUICKLY_S
    assert not server.running


def test_a_prefect_server_gets_longer_on_a_loaded_machine(
    prefect_server_running: Callable[[list[str]], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    server = prefect_server_running([BUSY])
    loads(monkeypatch, 3.0)
    start = time.monotonic()
    with pytest.raises(NotReady, match=r"not ready within 3 s \(1 s times the load factor 3\.0\)"):
        server.start(timeout=1)
    assert time.monotonic() - start >= 3.0


def test_a_taken_port_moves_the_prefect_server_as_prefect_does_but_not_forever(
    prefect_server_running: Callable[[list[str]], Any],
) -> None:
    moved = prefect_server_running(["exit(3)", HEALTHY])  # uvicorn's exit code when it cannot bind
    first_port = moved.port
    moved.start(timeout=60)
    assert moved.running and moved.port != first_port
    stuck = prefect_server_running(["exit(3)"])  # Prefect itself would start it again without end
    with pytest.raises(ServerExited, match="exited with code 3"):
        stuck.start(timeout=60)
    assert not stuck.running


@pytest.mark.server
def test_a_real_temporary_prefect_server_starts_and_stops(tmp_path: Path) -> None:
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import PREFECT_HOME, PREFECT_SERVER_DATABASE_CONNECTION_URL, temporary_settings

    from tests.support.readiness import answers_200

    database = f"sqlite+aiosqlite:///{tmp_path / 'prefect.db'}"
    with temporary_settings({PREFECT_HOME: tmp_path, PREFECT_SERVER_DATABASE_CONNECTION_URL: database}):
        server = SubprocessASGIServer(port=free_port())
        try:
            server.start(timeout=EPHEMERAL_STARTUP_TIMEOUT_S)
            assert server.running and answers_200(f"{server.api_url}/health")
        finally:
            server.stop()


# The fake image host (the downloader's benchmark and tests).


def test_the_fake_image_host_starts_and_a_broken_one_fails_at_once() -> None:
    from tests.support.fake_image_host import FakeImageHostProcess

    with FakeImageHostProcess(corpus_size=2, latency_s=0.0) as host:
        assert host.port > 0 and isinstance(host.counts(), dict)
    broken = FakeImageHostProcess()
    broken.args = ["--no-such-option"]
    start = time.monotonic()
    with pytest.raises(ServerExited, match="the fake image host: its process exited with code 2"):
        broken.start(timeout_s=600)
    assert time.monotonic() - start < QUICKLY_S
