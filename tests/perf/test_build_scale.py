"""The whole 3XCM build's peak memory stays bounded as the corpus grows (issue 31): the build of a synthetic corpus
(perf/build_scale.py) at two small sizes, each in a fresh process, and the growth of its peak RSS between them."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

from data.reference import load_pack
from perf.build_scale import STAGE_ORDER, Shape, generate_corpus, plan_corpus, run_stage_process, write_pack

COUNTRIES = ("USA", "UK", "Spain", "Japan")  # 2 English + 2 others: 6 queries per concept
SMALL, LARGE = 2, 8  # images per query: 240 and 960 images over 20 concepts


def _prepare(tmp_path: Path, per_query: int) -> tuple[Path, int, float]:
    """The corpus and build spec of one size: the spec's path, the corpus's files, and what holding every image
    decoded would take (MB)."""
    shape = Shape(concepts=20, synthetic_countries=0, real_countries=COUNTRIES, per_query=per_query)
    ref = write_pack(shape, tmp_path)
    corpus, facts = generate_corpus(shape, tmp_path, workers=2, pack=load_pack(ref))
    work = tmp_path / f"work-{per_query}"
    spec = {"shape": asdict(shape), "reference": str(ref), "corpus": str(corpus), "work": str(work)}
    spec_path = tmp_path / f"spec-{per_query}.json"
    spec_path.write_text(json.dumps(spec))
    sizes = plan_corpus(shape, load_pack(ref)).size
    return spec_path, facts["files"], float(np.prod(sizes, axis=1).sum()) * 3 / 2**20


def _peak_mb(spec_path: Path) -> float:
    """The whole build and release in one fresh process: its high-water mark (MB)."""
    measures = run_stage_process(spec_path, [*STAGE_ORDER, "release"])
    assert measures[-1].extra["status"] == "created"
    return max(m.peak_rss_mb for m in measures)


@pytest.mark.slow
def test_build_peak_memory_grows_far_below_the_images(tmp_path: Path) -> None:
    (small_spec, small_n, small_decoded), (large_spec, large_n, large_decoded) = (
        _prepare(tmp_path, SMALL),
        _prepare(tmp_path, LARGE),
    )
    # Both builds at once, each in its own process (one per core): a process's peak RSS is its own.
    with ThreadPoolExecutor(max_workers=2) as pool:
        small_peak, large_peak = pool.map(_peak_mb, [small_spec, large_spec])
    assert large_n >= 3.5 * small_n
    growth = large_peak - small_peak
    held = large_decoded - small_decoded  # what the growth would be if the build held its images decoded
    print(f"peak {small_peak:.0f} MB at {small_n} images, {large_peak:.0f} MB at {large_n}; growth {growth:.0f} MB, "
          f"holding the images decoded {held:.0f} MB")  # fmt: skip
    assert growth < 0.25 * held, (growth, held)
