"""The demo corpus generator at scale (issue 31): its memory does not grow with the corpus, its output does not depend
on how many processes draw it, and it reports progress. perf/demo_corpus.py measures it at paper scale."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from curation.image_hashing import dhash_bulk, phash_bulk
from curation.image_thumbnails import thumbnails
from data.reference import default_pack
from demo.corpus import (
    DemoCorpusConfig,
    GroundTruth,
    _BandCheck,
    _decode,
    _jpeg,
    _png,
    _rng,
    draw_scene,
    generate_demo_corpus,
)
from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT

#: Draws a corpus in a fresh interpreter (one process: workers=1) and prints how far its peak RSS rose, in KiB.
_MEASURE = """
import json, resource, sys, tempfile
from demo.corpus import DemoCorpusConfig, generate_demo_corpus
from data.reference import default_pack
countries, concepts = json.loads(sys.argv[1])
def config(c, k):
    # Nine images per query, so the images a generator kept would show; no bad files, whose decompression bomb
    # is a fixed transient that would hide the rest.
    return DemoCorpusConfig(countries=c, concepts=k, images_per_query=9, plant_bad_files=False)
pack = default_pack()
generate_demo_corpus(config(["USA"], ["food"]), tempfile.mkdtemp(), pack=pack)  # libraries, fonts and caches loaded
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
truth = generate_demo_corpus(config(countries, concepts), tempfile.mkdtemp(), workers=1, pack=pack)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"growth_kib": after - before, "images": len(truth.originals) + len(truth.duplicates)}))
"""


def _peak_growth(countries: list[str], concepts: list[str]) -> dict[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE, json.dumps([countries, concepts])],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    figures: dict[str, int] = json.loads(out.strip().splitlines()[-1])
    return figures


@pytest.mark.slow
def test_peak_memory_does_not_grow_with_the_corpus() -> None:
    small = _peak_growth(["USA", "Japan"], ["train", "food"])
    large = _peak_growth(["USA", "Japan", "Spain", "Kenya"], ["train", "food", "wedding", "market"])
    assert large["images"] >= 4 * small["images"]
    # What keeping every image decoded would add (the old generator also kept their bytes and features): 320x240
    # RGB per image. One concept at a time holds a few MB whatever the size; allow a tenth of that.
    kept = (large["images"] - small["images"]) * 320 * 240 * 3 // 1024
    growth = large["growth_kib"] - small["growth_kib"]
    assert growth < kept // 10, (small, large, kept)


def _files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if
            p.is_file()}  # fmt: skip


@pytest.mark.slow
def test_the_corpus_is_the_same_with_one_worker_or_two_and_progress_is_reported(tmp_path: Path) -> None:
    config = DemoCorpusConfig(countries=["USA", "Spain", "Japan"], concepts=["train", "food", "school"],
                              images_per_query=2)  # fmt: skip
    calls: list[tuple[str, int, int]] = []
    one = generate_demo_corpus(
        config, str(tmp_path / "one"), progress=lambda *call: calls.append(call), workers=1, pack=default_pack()
    )
    two = generate_demo_corpus(config, str(tmp_path / "two"), workers=2, pack=default_pack())
    assert one == two and _files(tmp_path / "one") == _files(tmp_path / "two")
    assert one.lookalikes and one.duplicates and one.bad_files
    assert GroundTruth.model_validate_json((tmp_path / "two" / "ground_truth.json").read_text()) == two

    stages, done, totals = zip(*calls, strict=True)
    assert set(stages) == {"demo_corpus"} and len(set(totals)) == 1
    assert done[0] == 0 and done[-1] == totals[0] and list(done) == sorted(done)
    files = len(one.originals) + len(one.duplicates) + len(one.bad_files)
    assert files < totals[0] <= files + 2 * len(config.concepts)  # each look-alike kind counts, planted or not


def test_the_calibration_sees_what_the_dedup_hashes() -> None:
    """The look-alike calibration cuts its hashes and thumbnail itself (without the chroma the dedup also cuts):
    they must stay those of `thumbnails`, or look-alikes would be calibrated against another tier."""
    for index in range(12):
        data = _jpeg(draw_scene(_rng(0, "features", index), 320, 240, f"scene {index}"))
        for encoded in (data, _png(_decode(data))):
            thumbs = thumbnails(encoded)
            phash, dhash, align = _BandCheck.features(encoded)
            assert phash == int(phash_bulk(thumbs.phash_input[None])[0])
            assert dhash == int(dhash_bulk(thumbs.dhash_input[None])[0])
            assert np.array_equal(align, thumbs.align_input)
