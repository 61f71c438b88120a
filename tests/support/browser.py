"""Screenshots of Label Studio's labeling interface in headless Chromium (Debian's `chromium`, driven by Playwright;
no browser download). The PNGs are kept as test artifacts."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from tests.support.label_studio_server import RunningLabelStudio
from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT
CHROMIUM = os.environ.get("CULTUREBENCH_CHROMIUM", "/usr/bin/chromium")
# As the machine notes say: no sandbox as root, and no background networking on a closed network.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@dataclass
class ScreenshotReport:
    path: Path
    panel_images: int  # images the labeling panel drew (naturalWidth > 0)
    served_files: list[str]  # /data/local-files/ URLs the page fetched with status 200
    visible_textareas: int


def artifact_dir() -> Path:
    folder = Path(os.environ.get("CULTUREBENCH_TEST_ARTIFACTS", ROOT / "test-artifacts")) / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


# Images drawn by the labeling panel itself (`.lsf-main-view`; it loads them as blob: URLs), not the task list's
# thumbnails beside it, which fetch the same files.
PANEL_IMAGES_JS = """() => Array.from(document.querySelectorAll('.lsf-main-view img'))
    .filter(img => img.complete && img.naturalWidth > 0).length"""


def screenshot_task(
    server: RunningLabelStudio,
    project_id: int,
    task_id: int,
    out_png: Path,
    expected_images: int,
    click_label: str | None = None,
) -> ScreenshotReport:
    """Log in as the admin, open the task in the labeling interface, wait for its images, optionally click a choice
    by its label, and take a screenshot."""
    if not Path(CHROMIUM).exists():
        raise RuntimeError(f"no Chromium at {CHROMIUM}: run `make browser` (Debian package `chromium`)")
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            served: set[str] = set()
            page.on(
                "response",
                lambda r: served.add(r.url) if "/data/local-files/" in r.url and r.status == 200 else None,
            )
            page.goto(f"{server.url}/user/login/")
            page.fill("input[name=email]", server.admin_email)
            page.fill("input[name=password]", server.admin_password)
            page.click("button[type=submit]")
            page.wait_for_url(lambda url: "/user/login" not in url, timeout=60_000)
            page.goto(f"{server.url}/projects/{project_id}/data?task={task_id}")
            page.get_by_role("button", name="Submit").wait_for(state="visible", timeout=90_000)
            # On a timeout the screenshot below shows what rendered; the caller asserts on the count.
            with contextlib.suppress(PlaywrightTimeout):
                page.wait_for_function(f"({PANEL_IMAGES_JS})() >= {expected_images}", timeout=90_000)
            if click_label:
                page.get_by_label(click_label).check(timeout=30_000)  # the radio button of that choice
            page.wait_for_timeout(500)  # let the layout settle after the last image or click
            drawn = page.evaluate(PANEL_IMAGES_JS)
            textareas = page.locator("textarea").evaluate_all("els => els.filter(e => e.offsetParent).length")
            out_png.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(out_png), full_page=True)
        finally:
            browser.close()
    return ScreenshotReport(out_png, drawn, sorted(served), textareas)


@dataclass
class FlowRunPage:
    path: Path  # the flow run page
    artifacts_path: Path  # its Artifacts tab
    state_shown: bool  # the page showed the expected state name
    artifacts_shown: list[str]  # expected artifact keys found on the Artifacts tab


def screenshot_flow_run(
    ui_url: str, flow_run_id: str, out_png: Path, state: str, artifact_keys: list[str]
) -> FlowRunPage:
    """Open a flow run in the Prefect UI, wait for its state badge, screenshot it, then its Artifacts tab."""
    if not Path(CHROMIUM).exists():
        raise RuntimeError(f"no Chromium at {CHROMIUM}: run `make browser` (Debian package `chromium`)")
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    artifacts_png = out_png.with_name(out_png.stem + "-artifacts.png")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.goto(f"{ui_url}/runs/flow-run/{flow_run_id}")
            shown = True
            try:
                page.get_by_text(state, exact=True).first.wait_for(state="visible", timeout=90_000)
            except PlaywrightTimeout:
                shown = False
            page.wait_for_timeout(1000)  # the timeline and logs render after the header
            out_png.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(out_png), full_page=True)
            page.get_by_text("Artifacts", exact=True).first.click(timeout=30_000)
            found = []
            for key in artifact_keys:
                with contextlib.suppress(PlaywrightTimeout):
                    page.get_by_text(key).first.wait_for(state="visible", timeout=30_000)
                    found.append(key)
            page.screenshot(path=str(artifacts_png), full_page=True)
        finally:
            browser.close()
    return FlowRunPage(out_png, artifacts_png, shown, found)
