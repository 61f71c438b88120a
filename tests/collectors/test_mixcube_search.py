"""MixCuBe originals from a search: the real ddgs client (network layer faked) and the HTTP downloader on a loopback
host, through the whole `build-mixcube` graph."""

from __future__ import annotations

import io
import json
from pathlib import Path

from datasets import load_dataset
from PIL import Image
from skimage import data as skimage_data

from collectors.mixcube_search import DEFAULT_QUERIES
from flows.mixcube.build import build_locally
from flows.mixcube.config import BuildMixCubeConfig
from flows.mixcube.stages import GRAPH
from tests.collectors.test_search_ddgs import FAST_RETRY, body, fake_engine
from tests.support.fake_image_host import FakeImageHost


def astronaut_jpeg() -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(skimage_data.astronaut()).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def search_originals(per_cell: int, cultures: list[str], categories: list[str]) -> dict:
    """`originals: search` through the faked ddgs engine and the downloader, allowed to reach the loopback host."""
    return {
        "backend": "search",
        "per_cell": per_cell,
        "cultures": cultures,
        "categories": categories,
        "search": {
            "backend": "ddgs",
            "retry": FAST_RETRY.model_dump(),
            "requests_per_second": 1000.0,
            "prefect_concurrency_limit": None,
            "canary_query": "dog",
        },
        "download": {"backend": "http", "allow_private_addresses": True, "retry": FAST_RETRY.model_dump()},
    }


def test_search_hits_become_originals_and_every_failure_is_a_row(tmp_path: Path) -> None:
    host = FakeImageHost(corpus=[astronaut_jpeg()]).start()
    try:
        asked: list[str] = []

        def answer(params: dict) -> str:
            asked.append(params["q"])
            if "festival" in params["q"]:
                return body([])  # the engine finds nothing for this cell
            urls = [host.url("/img/0/a.jpg"), host.url("/html/b.jpg"), host.url("/tiny/c.png"), host.url("/img/0/d")]
            return body([{"title": f"t{i}", "image": u, "url": u, "height": 1, "width": 1} for i, u in enumerate(urls)])

        config = BuildMixCubeConfig.demo(
            workspace_root=str(tmp_path / "ws"),
            release={"root": str(tmp_path / "rel"), "version": "0.0.1"},
            originals=search_originals(per_cell=3, cultures=["Myanmar"], categories=["Food", "Festival"]),
        )
        with fake_engine(answer):
            summary = build_locally(config)
    finally:
        host.stop()

    assert DEFAULT_QUERIES["Food"].format(adjective="Myanmar") in asked
    originals = {r["original_id"]: r for r in GRAPH.build(config).ws.read_table("originals").to_pylist()}
    by_error = {r["error"]: r for r in originals.values()}
    assert set(by_error) == {None, "not_an_image", "too_small", "search:no_results"}, by_error
    assert by_error[None]["source"] == host.url("/img/0/a.jpg") and by_error[None]["category"] == "Food"
    assert by_error["search:no_results"]["category"] == "Festival"
    assert host.counts["/img/0/d"] == 0

    loaded = load_dataset(summary.release_path, split="train")
    assert len(loaded) == 5 and set(loaded["original_id"]) == {by_error[None]["original_id"]}
    manifest = json.loads((Path(summary.release_path) / "manifest.json").read_text())
    assert manifest["demo"] is False
    dropped = manifest["dropped_before_synthesis"]["originals"]
    assert dropped == {"not_an_image": 1, "search:no_results": 1, "too_small": 1}
