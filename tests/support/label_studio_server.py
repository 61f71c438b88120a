"""A real Label Studio server on 127.0.0.1 for the tests, plus its user accounts.

Label Studio lives in its own virtual environment (its pins conflict with Prefect's): `make label-studio` builds
`.venv-labelstudio`, or `CULTUREBENCH_LABEL_STUDIO` names another `label-studio` executable. The settings are the
ones that must be set at the first start: a preset admin and legacy token,
signup only through an invite link, and local-file serving under one document root.

No pytest fixtures here; `label_studio_fixtures.py` wraps `start_label_studio` in a session fixture.
"""

from __future__ import annotations

import contextlib
import html
import os
import re
import secrets
import signal
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

import requests

from tests.support.paths import REPO_ROOT
from tests.support.readiness import wait_until_ready

REPO_ROOT = REPO_ROOT
LABEL_STUDIO_ENV = "CULTUREBENCH_LABEL_STUDIO"
DEFAULT_LABEL_STUDIO = REPO_ROOT / ".venv-labelstudio" / "bin" / "label-studio"
ADMIN_EMAIL = "admin@example.com"
HTTP_TIMEOUT_S = 30.0
# Variables of the test process that would make the other venv's Python import the wrong packages or settings.
_LEAKY_ENV = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "DJANGO_SETTINGS_MODULE", "PYTHONSTARTUP")


@dataclass
class RunningLabelStudio:
    url: str
    admin_email: str
    admin_password: str
    admin_token: str
    document_root: Path
    data_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes]

    @property
    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Token {self.admin_token}"}

    def log_tail(self, lines: int = 40) -> str:
        return _tail(self.log_path, lines)

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM to the server's process group (it was started in its own session), then SIGKILL."""
        if self.process.poll() is not None:
            return
        _signal_group(self.process, signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _signal_group(self.process, signal.SIGKILL)
            self.process.wait(timeout=timeout_s)


def label_studio_executable() -> Path:
    configured = os.environ.get(LABEL_STUDIO_ENV)
    path = Path(configured) if configured else DEFAULT_LABEL_STUDIO
    if not (path.is_file() and os.access(path, os.X_OK)):
        source = f"${LABEL_STUDIO_ENV}" if configured else "the default location"
        raise FileNotFoundError(
            f"no label-studio executable at {path} ({source}). Run `make label-studio` in {REPO_ROOT} to build "
            f".venv-labelstudio (label-studio needs its own venv), or set {LABEL_STUDIO_ENV} to a label-studio binary."
        )
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_label_studio(base_dir: Path, timeout_s: float = 240) -> RunningLabelStudio:
    """Start a fresh server with its database, document root and log under `base_dir`; wait until it answers:
    `timeout_s` (a fresh database migrates in about 25 s on an idle machine) times the machine's load factor.

    A busy port makes Label Studio silently move to port+1, where another server may answer /health. The admin
    token is random per start, so `whoami` with it proves that the server on our port is ours.
    """
    executable = label_studio_executable()
    base_dir.mkdir(parents=True, exist_ok=True)
    data_dir = base_dir / "data"
    document_root = base_dir / "files"
    data_dir.mkdir(exist_ok=True)
    document_root.mkdir(exist_ok=True)
    log_path = base_dir / "label-studio.log"
    password = secrets.token_hex(12)
    token = secrets.token_hex(20)  # 40 characters, the most a legacy token (DRF Token.key) may have
    port = free_port()
    env = {key: value for key, value in os.environ.items() if key not in _LEAKY_ENV}
    env.update(
        {
            "LABEL_STUDIO_BASE_DATA_DIR": str(data_dir),
            "LABEL_STUDIO_USERNAME": ADMIN_EMAIL,
            "LABEL_STUDIO_PASSWORD": password,
            "LABEL_STUDIO_USER_TOKEN": token,
            # Fixed when the organization is created at the first start; later changes do nothing.
            "LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN": "true",
            "LABEL_STUDIO_DISABLE_SIGNUP_WITHOUT_LINK": "true",
            "LABEL_STUDIO_LOCAL_FILES_SERVING_ENABLED": "true",
            "LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT": str(document_root),
            "LATEST_VERSION_CHECK": "false",
            "COLLECT_ANALYTICS": "false",
            "SENTRY_DSN": "",
            "FRONTEND_SENTRY_DSN": "",
            # Webhooks to 127.0.0.1 are refused otherwise.
            "SSRF_PROTECTION_ENABLED": "false",
        }
    )
    command = [str(executable), "start", "--no-browser", "--port", str(port), "--internal-host", "127.0.0.1"]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, cwd=base_dir, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    server = RunningLabelStudio(
        url=f"http://127.0.0.1:{port}",
        admin_email=ADMIN_EMAIL,
        admin_password=password,
        admin_token=token,
        document_root=document_root,
        data_dir=data_dir,
        log_path=log_path,
        process=process,
    )
    try:
        _wait_until_ready(server, timeout_s)
    except BaseException:
        server.stop()
        raise
    return server


def _wait_until_ready(server: RunningLabelStudio, timeout_s: float) -> None:
    """`timeout_s` on an idle machine, longer on a busy one (`tests/support/readiness.py`); at once if it exits."""
    session = _session()

    def ours_answers() -> bool:
        health = session.get(f"{server.url}/health", timeout=5)
        if health.status_code != 200 or health.json().get("status") != "UP":
            return False  # still migrating
        me = session.get(f"{server.url}/api/current-user/whoami", headers=server.auth_headers, timeout=10)
        return me.status_code == 200 and me.json().get("email") == server.admin_email

    what = f"label-studio on {server.url} (or another server holds the port)"
    wait_until_ready(what, ours_answers, timeout_s, process=server.process, log_path=server.log_path)


def _session() -> requests.Session:
    session = requests.Session()
    session.trust_env = False  # never send 127.0.0.1 traffic through a proxy from the environment
    return session


def _form_post(session: requests.Session, url: str, fields: dict[str, str]) -> requests.Response:
    """GET the form for its CSRF cookie, then POST it back the way the browser does (Django checks the Referer)."""
    page = session.get(url, timeout=HTTP_TIMEOUT_S)
    page.raise_for_status()
    csrf = session.cookies.get("csrftoken")
    if not csrf:
        raise RuntimeError(f"no csrftoken cookie from {url}")
    data = {**fields, "csrfmiddlewaretoken": csrf}
    return session.post(url, data=data, headers={"Referer": url}, timeout=HTTP_TIMEOUT_S)


def login_session(server: RunningLabelStudio, email: str, password: str) -> requests.Session:
    """A requests session logged in through the login form (cookie auth, as a browser)."""
    session = _session()
    response = _form_post(session, f"{server.url}/user/login/", {"email": email, "password": password})
    if _whoami_email(session, server) != email:
        raise RuntimeError(f"login as {email} failed (HTTP {response.status_code}): {_form_errors(response.text)}")
    return session


def signup_annotator(server: RunningLabelStudio, email: str, password: str) -> str:
    """Sign a new user up through the admin's invite link; return that user's own legacy API token."""
    invite = _session().get(f"{server.url}/api/invite", headers=server.auth_headers, timeout=HTTP_TIMEOUT_S)
    invite.raise_for_status()
    signup_url = server.url + invite.json()["invite_url"]
    session = _session()
    fields = {"email": email, "password": password, "allow_newsletters": "false"}
    response = _form_post(session, signup_url, fields)
    # A refused form answers 200 with the reasons in the page (taken email, short password), and no login.
    if _whoami_email(session, server) != email:
        raise RuntimeError(f"signup of {email} failed (HTTP {response.status_code}): {_form_errors(response.text)}")
    token = session.get(f"{server.url}/api/current-user/token", timeout=HTTP_TIMEOUT_S)
    token.raise_for_status()
    return token.json()["token"]


def _whoami_email(session: requests.Session, server: RunningLabelStudio) -> str | None:
    me = session.get(f"{server.url}/api/current-user/whoami", timeout=HTTP_TIMEOUT_S)
    return me.json().get("email") if me.status_code == 200 else None


def _form_errors(page: str) -> str:
    """The messages of Django's login/signup templates (`<ul class="field_errors"><li>`, `<p class="error">`)."""
    found = re.findall(r"<li>\s*([^<]+?)\s*</li>", "".join(re.findall(r'class="field_errors">(.*?)</ul>', page, re.S)))
    found += re.findall(r'class="error">\s*([^<]+?)\s*<', page)
    return "; ".join(html.unescape(message) for message in found) or "no error message in the page"


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)


def _tail(path: Path, lines: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
