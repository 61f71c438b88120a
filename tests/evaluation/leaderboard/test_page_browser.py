"""The leaderboard page (`evaluate compare --html`) opened in headless Chromium as the labeling-interface screenshots
open Label Studio (tests/support/browser.py): what it shows, that a click on a column's name sorts it, that the card
links resolve to files in the page's folder, that every figure loads, that no request leaves file://, and that a
hostile model name stays text. The screenshot is kept as a test artifact."""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pytest
from typer.testing import CliRunner

from evaluation.leaderboard.tables import published_rows
from flows.cli import app
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, SETTLED_JS, Steps, artifact_dir
from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.browser

XCM = REPO_ROOT / "evaluations" / "3xcm" / "0.1.0-demo" / "open_clip--demo-random-clip--demo-random-clip-seed0--all"
HOSTILE = '<script>alert("id")</script><img src=x onerror=alert(1)>'
# Each table's rows: the model's full id (ours: its cell's data-model-id; a paper's row: its text), the name shown,
# and each cell's data-sort value (null for a dash or a text cell).
ROWS_JS = """key => Array.from(document.querySelector(`table[data-table="${key}"]`).tBodies[0].rows).map(row => {
    const id = row.cells[0].querySelector('[data-model-id]');
    return {label: id ? id.getAttribute('data-model-id') : row.cells[0].textContent,
            shown: (id || row.cells[0]).textContent, hover: id ? id.getAttribute('title') : null,
            sort: Array.from(row.cells).slice(2).map(c => c.getAttribute('data-sort'))};
})"""
IMAGES_JS = "() => Array.from(document.images).map(img => [img.getAttribute('src'), img.complete && img.naturalWidth])"


def flipped(folder: Path, target: Path, model_id: str) -> Path:
    """A copy of a result as another model's: every headline figure and RQ2 rate v written as 1 - v."""
    shutil.copytree(folder, target)
    document = json.loads((target / "metrics.json").read_text())

    def flip(value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            return {k: flip(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [flip(v) for v in value]
        return 1 - value if isinstance(value, float) and key in ("value", "ci_low", "ci_high") else value

    document |= {k: 1 - document[k] for k in ("M_cr", "M_lb", "M_ti", "SP")}
    document |= {"rq2": flip(document["rq2"]), "model": {"model_id": model_id}, "meaningless_demo_model": False}
    (target / "metrics.json").write_text(json.dumps(document))
    return target


def record(dialogs: list[str], dialog: Any) -> None:
    """A script that ran would open one: it is noted and closed."""
    dialogs.append(dialog.message)
    dialog.dismiss()


def test_the_page_in_chromium(tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}: run `make browser` (Debian package `chromium`)")
    from playwright.sync_api import sync_playwright

    other = flipped(XCM, tmp_path / "other", HOSTILE)
    page_dir = tmp_path / "board"
    result = CliRunner().invoke(app, ["evaluate", "compare", str(XCM), str(other), "--html", str(page_dir)])
    assert result.exit_code == 0, result.output
    index = page_dir / "index.html"
    metrics = {r: json.loads((r / "metrics.json").read_text()) for r in (XCM, other)}
    figures = sum(len(list(r.rglob("*.png"))) for r in (XCM, other))

    steps = Steps("leaderboard page", 240)
    requests: list[str] = []
    dialogs: list[str] = []
    failed: list[tuple[str, str | None]] = []
    with sync_playwright() as playwright:
        with steps.step("start Chromium"):
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=steps.ms(60))
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("request", lambda r: requests.append(r.url))
            page.on("dialog", lambda dialog: record(dialogs, dialog))
            # anything but file:// is refused (and recorded above): the page must not need it
            page.route(lambda url: not url.startswith("file://"), lambda route: route.abort())
            with steps.step("open the page"):
                page.goto(index.as_uri(), wait_until="load", timeout=steps.ms(60))
                page.evaluate(SETTLED_JS)
            images = page.evaluate(IMAGES_JS)
            rows = page.evaluate(ROWS_JS, "triplet")
            elsewhere = page.evaluate(ROWS_JS, "triplet-elsewhere")
            with steps.step("click M_lb"):
                page.locator('table[data-table="triplet"] thead button', has_text="M_lb").click(timeout=steps.ms(30))
            descending = page.evaluate(ROWS_JS, "triplet")
            with steps.step("click M_lb again"):
                page.locator('table[data-table="triplet"] thead button', has_text="M_lb").click(timeout=steps.ms(30))
            ascending = page.evaluate(ROWS_JS, "triplet")
            links = page.eval_on_selector_all("a[href$='README.md']", "links => links.map(a => a.href)")
            title = page.title()
            # Defence in depth: a script or remote image that escaping had let through is stopped by the page's CSP.
            requests_of_the_page = list(requests)
            page.on("requestfailed", lambda r: failed.append((r.url, r.failure)))
            tampered = page_dir / "tampered.html"
            planted = '<script>window.injected = 1</script><img src="https://example.invalid/x.png"></body>'
            tampered.write_text(index.read_text().replace("</body>", planted))
            with steps.step("open a tampered copy"):
                page.goto(tampered.as_uri(), wait_until="load", timeout=steps.ms(60))
            injected = page.evaluate("() => window.injected === undefined ? null : window.injected")
            with contextlib.suppress(Exception), steps.step("take the screenshot"):
                page.screenshot(path=str(artifact_dir() / "leaderboard.png"), full_page=True, timeout=steps.ms(60))
        finally:
            browser.close()

    assert title == "3XCM 0.1.0-demo leaderboard"
    assert injected is None  # the planted script did not run, the planted image was never fetched
    assert ("https://example.invalid/x.png", "csp") in failed
    # the ranked rows: our two results (the hostile name as text, never markup); the paper's Table 2 apart, unranked
    expected = {m["model"]["model_id"] for m in metrics.values()}
    assert {r["label"] for r in rows} == expected and len(rows) == len(expected)
    assert {r["label"] for r in elsewhere} == {p.model for p in published_rows("3xcm") if p.table == "triplet"}
    assert not dialogs
    # first view: by M_cr (the paper's main figure), highest first
    m_cr = [float(r["sort"][0]) for r in rows]
    assert m_cr == sorted(m_cr, reverse=True)
    # a click sorts by M_lb, high to low; another, low to high; the values are the results' and the paper's
    m_lb = [float(r["sort"][1]) for r in descending]
    assert m_lb == sorted(m_lb, reverse=True)
    assert [float(r["sort"][1]) for r in ascending] == sorted(m_lb)
    ours = {r["label"]: float(r["sort"][1]) for r in descending}
    assert all(ours[m["model"]["model_id"]] == m["M_lb"] for m in metrics.values())
    # the cards: links to files inside the page's folder, copies of the results' cards
    assert len(links) >= 2
    for link in links:
        url = urlparse(link)
        assert url.scheme == "file"
        target = Path(unquote(url.path))
        assert target.is_file() and page_dir.resolve() in target.resolve().parents
        assert target.read_bytes() in {(XCM / "README.md").read_bytes(), (other / "README.md").read_bytes()}
    # every figure drawn, from the page's folder; nothing asked of the network
    assert len(images) == figures + 1 and all(width for _, width in images), images  # the results' and the plot
    assert all((page_dir / src).is_file() for src, _ in images)
    assert requests_of_the_page and all(url.startswith("file://") for url in requests_of_the_page), requests
