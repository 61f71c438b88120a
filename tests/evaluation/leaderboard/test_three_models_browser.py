"""Issue 59's done-when: a leaderboard of three models, on a release built from a pack of five new countries and on
the demo release, opened in headless Chromium (tests/support/browser.py): no published baseline is ranked on the
pack's release; every breakdown shows an interval on every figure of ours; the paired-test marks are what
comparison.json says; the plot is drawn. The three models are vectors scored by `--model-backend embeddings`: each
image and query text a concept's direction plus noise, the direction weighed 0 (chance), 1 and 3, so that the paired
tests have pairs to tell apart and pairs not to. The page's screenshot is kept as a test artifact (docs/researchers.md
shows one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, SETTLED_JS, Steps, artifact_dir
from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.browser

CULTUREBENCH = Path(sys.executable).with_name("culturebench")
DEMO = REPO_ROOT / "releases" / "3xcm" / "0.1.0-demo"
COUNTRIES = "Indonesia,Ghana,Peru,Kenya,Vietnam"
#: The models: how much of a concept's direction their vectors hold (0: none, chance).
MODELS = {"chance": 0.0, "concept-weak": 1.0, "concept-strong": 3.0}
RESAMPLES = "200"

# Every ranked table: its rows' classes, rank, model id, paired cell (its data-paired ranks; null where the table has
# no paired test), and per figure cell whether it has a value and whether it shows an interval.
TABLES_JS = """() => Array.from(document.querySelectorAll('table.sortable')).map(table => ({
    key: table.getAttribute('data-table'),
    rows: Array.from(table.tBodies[0].rows).map(row => {
        const id = row.cells[0].querySelector('[data-model-id]');
        const paired = row.querySelector('td.paired');
        return {kind: row.className, rank: Number(row.getAttribute('data-rank')),
                model: id ? id.getAttribute('data-model-id') : null, hover: id ? id.getAttribute('title') : null,
                paired: paired ? paired.getAttribute('data-paired') : null,
                cells: Array.from(row.cells).slice(2).filter(c => !c.classList.contains('paired')).map(c =>
                    ({value: c.getAttribute('data-sort') !== '',
                      interval: c.querySelector('.ci') ? c.querySelector('.ci').textContent : null}))};
    })}))"""
PLOT_JS = """() => Array.from(document.images).filter(img => img.getAttribute('src') === 'comparison.png')
    .map(img => img.complete ? img.naturalWidth : 0)"""


def run(*args: object, cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{output[-3000:]}"
    assert "Traceback" not in output, output
    return output


def concept_vectors(release: Path, folder: Path, model: str, weight: float, seed: int) -> tuple[Path, Path]:
    """Vectors for every image and query text of a 3XCM release: the concept's one-hot direction times `weight`,
    plus unit noise."""
    images = pq.read_table(release / "image_metadata", columns=["image_id", "concept", "concept_in_native"])
    concept_of: dict[str, str] = {}
    for name in ("benchmark", "benchmark_cd"):
        rows = pq.read_table(release / name, columns=["query_text", "query_concept"]).to_pylist()
        concept_of |= {r["query_text"]: r["query_concept"] for r in rows}
    concept_of |= dict(zip(images["concept_in_native"].to_pylist(), images["concept"].to_pylist(), strict=True))
    concepts = sorted(set(images["concept"].to_pylist()) | set(concept_of.values()))
    dimension = len(concepts) + 8
    rng = np.random.default_rng(seed)

    def vector(concept: str) -> list[float]:
        direction = np.zeros(dimension)
        direction[concepts.index(concept)] = weight
        return (direction + rng.normal(size=dimension)).tolist()

    folder.mkdir(parents=True, exist_ok=True)
    image_file, text_file = folder / f"{model}.parquet", folder / f"{model}-texts.parquet"
    ids, image_concepts = images["image_id"].to_pylist(), images["concept"].to_pylist()
    pq.write_table(pa.table({"image_id": ids, "embedding": [vector(c) for c in image_concepts]}), image_file)
    texts = sorted(concept_of)
    pq.write_table(pa.table({"text": texts, "embedding": [vector(concept_of[t]) for t in texts]}), text_file)
    return image_file, text_file


@pytest.fixture(scope="module")
def boards(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The leaderboard page of the three models on the pack's release and on the demo release."""
    root = tmp_path_factory.mktemp("board")
    env = {**os.environ, "PREFECT_HOME": str(root / ".prefect")}
    cli = str(CULTUREBENCH)
    source = REPO_ROOT / "examples" / "packs" / "globalrg"
    concepts = "dance,festival,transport"
    run(cli, "reference", "init", "sea5", "--from", source, "--countries", COUNTRIES, "--concepts", concepts,
        "--name", "sea5", cwd=root, env=env)  # fmt: skip
    run(cli, "build", "3xcm", "--demo", "--engine", "local", "--reference", "sea5", "--workspace-root", "ws",
        "--release-root", "releases", "--version", "0.1.0-sea5", cwd=root, env=env)  # fmt: skip
    pages = {}
    for label, release in (("pack", root / "releases" / "3xcm" / "0.1.0-sea5"), ("demo", DEMO)):
        results = []
        for seed, (model, weight) in enumerate(MODELS.items()):
            image, text = concept_vectors(release, root / "vectors" / label, model, weight, seed)
            out = root / "results" / label / model
            vectors = ["--image-embeddings", image, "--text-embeddings", text]
            run(cli, "evaluate", "3xcm", release, "--model-backend", "embeddings", *vectors, "--out", out,
                "--bootstrap-resamples", RESAMPLES, cwd=root, env=env)  # fmt: skip
            results.append(out)
        page = root / "boards" / label
        run(cli, "evaluate", "compare", *results, "--out", root / "comparison" / label, "--html", page, cwd=root,
            env=env)  # fmt: skip
        pages[label] = page
    return pages


def opened(page_dir: Path, screenshot: str) -> tuple[list[dict[str, Any]], list[int]]:
    """The page's ranked tables (TABLES_JS) and the plot's widths, read in Chromium; a screenshot kept."""
    from playwright.sync_api import sync_playwright

    steps = Steps("leaderboard page", 240)
    with sync_playwright() as playwright:
        with steps.step("start Chromium"):
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=steps.ms(60))
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.route(lambda url: not url.startswith("file://"), lambda route: route.abort())
            with steps.step("open the page"):
                page.goto((page_dir / "index.html").as_uri(), wait_until="load", timeout=steps.ms(60))
                page.evaluate(SETTLED_JS)
            found = page.evaluate(TABLES_JS)
            plot = page.evaluate(PLOT_JS)
            with steps.step("take the screenshot"):
                page.screenshot(path=str(artifact_dir() / screenshot), full_page=False, timeout=steps.ms(60))
        finally:
            browser.close()
    return found, plot


@pytest.mark.parametrize("label", ["pack", "demo"])
def test_three_models_on_a_release_in_chromium(boards: dict[str, Path], label: str) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}: run `make browser` (Debian package `chromium`)")
    page_dir = boards[label]
    found, plot = opened(page_dir, f"leaderboard-three-models-{label}.png")
    document = json.loads((page_dir / "comparison.json").read_text())
    assert document == json.loads((page_dir.parent.parent / "comparison" / label / "comparison.json").read_text())
    ids = {m["model_id"] for m in document["models"]}
    assert len(ids) == 3
    by_key = {t["key"]: t for t in found}

    # no published baseline ranked (the paper's Table 2 was measured on its own data, neither of these releases)
    assert all(row["kind"] != "published" for table in found for row in table["rows"])
    # every breakdown: each of our figures with a value shows its interval; each row says who it is on hover
    assert len(found) > 10
    for table in found:
        assert {row["model"] for row in table["rows"]} == ids, table["key"]
        assert all(row["hover"] == row["model"] for row in table["rows"])
        for row in table["rows"]:
            assert any(c["value"] for c in row["cells"]), (table["key"], row)
            intervals = [c["interval"] for c in row["cells"] if c["value"]]
            # both ends drawn, but for a ratio's upper end that resamples with M_cr = 0 leave undefined (SP)
            assert all(i and "[–, –]" not in i for i in intervals), (table["key"], row)
            if not table["key"].endswith("SP") and table["key"] != "triplet":
                assert all("–" not in i for i in intervals), (table["key"], row)
    # the paired tests: the marks say what comparison.json says, pair by pair
    (tests,) = [t for t in document["paired_tests"] if t["table"] == "triplet"]
    assert len(tests["pairs"]) == 3 and tests["metric"] == "M_cr" and tests["correction"] == "Holm"
    rows = by_key["triplet"]["rows"]
    rank_of = {row["model"]: row["rank"] for row in rows}
    for row in rows:
        expected = sorted(
            rank_of[p["b"] if p["a"] == row["model"] else p["a"]]
            for p in tests["pairs"]
            if row["model"] in (p["a"], p["b"]) and not p["distinguishable"]
        )
        assert row["paired"] == " ".join(map(str, expected)), row
    # the vectors with the concept's direction beat chance, distinguishably (the strong model, on every release)
    strong = next(m["model_id"] for m in document["models"] if m["display_name"].startswith("concept-strong"))
    chance = next(m["model_id"] for m in document["models"] if m["display_name"].startswith("chance"))
    (pair,) = [p for p in tests["pairs"] if {p["a"], p["b"]} == {strong, chance}]
    assert pair["distinguishable"] and rows[0]["model"] == strong
    # the plot, drawn from the page's folder
    assert plot and all(width > 0 for width in plot)
