"""Screenshots of Label Studio's labeling interface in headless Chromium, kept as test artifacts.

Drives Debian's `chromium` (`make browser` installs it) through Playwright; no browser is downloaded. The PNGs go
to `CULTUREBENCH_TEST_ARTIFACTS` or `<repo>/test-artifacts/`, which CI keeps.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from label_studio_server import REPO_ROOT, RunningLabelStudio

ARTIFACTS_ENV = "CULTUREBENCH_TEST_ARTIFACTS"
CHROMIUM_ENV = "CULTUREBENCH_CHROMIUM"
DEFAULT_CHROMIUM = Path("/usr/bin/chromium")
# The flags verified with Debian's chromium in a root container without a GPU or a display (notes §2).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1400, "height": 900}
# Images of the annotation panel only: the data manager's task table beside it shows thumbnails of the same files.
LABELING_IMAGES = ".lsf-main-view img"
_LOADED_IMAGES_JS = """(selector) => Array.from(document.querySelectorAll(selector))
    .filter((img) => img.complete && img.naturalWidth > 0)
    .map((img) => img.currentSrc || img.src)"""


@dataclass
class ScreenshotReport:
    png: Path
    url: str
    loaded_images: int
    image_srcs: list[str]  # of the loaded <img> elements; Label Studio shows them as blob: URLs
    image_responses: list[tuple[str, int]] = field(default_factory=list)  # (url, status) of image-typed answers
    page_errors: list[str] = field(default_factory=list)  # uncaught JavaScript errors
    seconds: float = 0.0


def artifacts_dir() -> Path:
    path = Path(os.environ.get(ARTIFACTS_ENV) or REPO_ROOT / "test-artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


def chromium_executable() -> Path:
    configured = os.environ.get(CHROMIUM_ENV)
    path = Path(configured) if configured else DEFAULT_CHROMIUM
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise FileNotFoundError(
            f"no chromium at {path}. Run `make browser` (installs Debian's chromium with apt-get) "
            f"or set {CHROMIUM_ENV} to a Chromium executable."
        )
    return path


def labeling_url(server: RunningLabelStudio, project_id: int, task_id: int) -> str:
    """The data manager with this task open in the labeling panel (Label Studio 1.23 adds `&tab=<view>`)."""
    return f"{server.url}/projects/{project_id}/data?task={task_id}"


def screenshot_task(
    server: RunningLabelStudio,
    project_id: int,
    task_id: int,
    out_png: Path,
    expected_images: int,
    timeout_s: float = 60.0,
) -> ScreenshotReport:
    """Log in as the admin through the login form, open the task in the labeling UI, wait until at least
    `expected_images` images of the annotation panel have decoded, and save a full-page PNG.

    On a timeout the PNG is still written (it shows what did render) before the TimeoutError.
    """
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    started = time.monotonic()
    out_png.parent.mkdir(parents=True, exist_ok=True)
    url = labeling_url(server, project_id, task_id)
    responses: list[tuple[str, int]] = []
    errors: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(chromium_executable()), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport=VIEWPORT)
            page.set_default_timeout(timeout_s * 1000)
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.on(
                "response",
                lambda r: responses.append((r.url, r.status))
                if r.headers.get("content-type", "").startswith("image/")
                else None,
            )
            _login(page, server)
            page.goto(url)
            try:
                page.wait_for_function(
                    f"(n) => ({_LOADED_IMAGES_JS})({LABELING_IMAGES!r}).length >= n",
                    arg=expected_images,
                    timeout=timeout_s * 1000,
                )
                waited_out = False
            except PlaywrightError:  # playwright's TimeoutError is a subclass
                waited_out = True
            srcs: list[str] = page.evaluate(_LOADED_IMAGES_JS, LABELING_IMAGES)
            page.screenshot(path=str(out_png), full_page=True)
            final_url = page.url
        finally:
            browser.close()
    if waited_out:
        raise TimeoutError(
            f"{url}: {len(srcs)} of {expected_images} labeling images loaded within {timeout_s:.0f} s "
            f"(screenshot {out_png}; image responses {responses}; page errors {errors[:3]})"
        )
    return ScreenshotReport(
        png=out_png,
        url=final_url,
        loaded_images=len(srcs),
        image_srcs=srcs,
        image_responses=responses,
        page_errors=errors,
        seconds=time.monotonic() - started,
    )


def _login(page: object, server: RunningLabelStudio) -> None:
    """The login form, as a person would use it; the session cookie then opens every page."""
    page.goto(f"{server.url}/user/login/")  # type: ignore[attr-defined]
    page.fill("input[name=email]", server.admin_email)  # type: ignore[attr-defined]
    page.fill("input[name=password]", server.admin_password)  # type: ignore[attr-defined]
    with page.expect_navigation():  # type: ignore[attr-defined]
        page.click("form button[type=submit]")  # type: ignore[attr-defined]
    if "/user/login" in page.url:  # type: ignore[attr-defined]
        raise RuntimeError(f"browser login as {server.admin_email} failed: still on {page.url}")  # type: ignore[attr-defined]
