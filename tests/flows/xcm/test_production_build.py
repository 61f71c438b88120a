"""The whole build-3xcm flow on its production backends, each pointed at a local fake.

- concepts: Gemini (the real google-genai client against `FakeGemini`) generates candidates into a review file; the
  operator accepts one through the CLI, and the build reads the reviewed list;
- concept dedup: BGE-M3 (FlagEmbedding) on a tiny random XLM-R model built by the test;
- translations: Gemini fills in the accepted concept, the shipped table the rest;
- search: the real `ddgs` client with DuckDuckGo's network layer faked, answering with URLs on a loopback host;
- download: the async HTTP downloader fetching from that host (loopback allowed explicitly);
- image dedup: the open_clip embedding tier on a tiny random model built by the test;
- tagging: Gemini vision (App. I) on the fake server.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from unittest import mock

# The production backends' locked dependencies: a missing one must fail the suite, not skip it.
import ddgs  # noqa: F401
import FlagEmbedding  # noqa: F401
import google.genai  # noqa: F401
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from collectors.search import build_queries
from data.reference import default_pack
from data.workspace import Workspace
from demo.corpus import DemoCorpusConfig, country_folder, generate_demo_corpus
from flows.cli import app
from flows.xcm.config import Build3XCMConfig
from tests.support.fake_gemini import FakeGemini
from tests.support.tiny_models import build_tiny_m3, build_tiny_open_clip

COUNTRIES = ["USA", "UK", "Spain", "Japan", "Kenya"]
SHIPPED = ["train", "food"]
NEW_CONCEPT_FOLDER = "school"  # the demo corpus folder whose images stand for the accepted new concept
API_KEY = "test-key-0123456789-do-not-leak"


@pytest.fixture
def corpus_host(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The demo corpus (with its bad files) served over HTTP on 127.0.0.1."""
    root = tmp_path / "web"
    generate_demo_corpus(
        DemoCorpusConfig(countries=COUNTRIES, concepts=[*SHIPPED, NEW_CONCEPT_FOLDER], images_per_query=2),
        str(root),
        pack=default_pack(),
    )
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class FakeDuckDuckGo:
    """Answers DuckDuckGo's image API from the corpus folders, after mapping each query back to its folder with
    the build's own query builder (run on the build's concept and translation tables)."""

    def __init__(self, base_url: str, root: Path, ws: Workspace, new_concept_id: int) -> None:
        self.base_url, self.root, self.ws, self.new_concept_id = base_url, root, ws, new_concept_id
        self.calls: list[dict[str, Any]] = []
        self._folders: dict[str, Path] | None = None
        self._lock = threading.Lock()

    def folders(self) -> dict[str, Path]:
        if self._folders is None:
            concepts = self.ws.read_table("concepts")
            queries = build_queries(concepts, self.ws.read_table("translations"), COUNTRIES, True, default_pack())
            names = dict(zip(concepts["concept_id"].to_pylist(), concepts["concept"].to_pylist(), strict=True))
            self._folders = {}
            for q in queries:
                concept = NEW_CONCEPT_FOLDER if q.concept_id == self.new_concept_id else names[q.concept_id]
                country = country_folder(default_pack().country_by_name()[q.country])
                self._folders[q.query] = self.root / country / concept / q.query_lang
        return self._folders

    def request(self, method: str, url: str, params: dict[str, Any], **kwargs: Any) -> str | None:
        with self._lock:
            self.calls.append(dict(params))
            folder = self.folders().get(params["q"])
        if folder is None or not folder.is_dir():
            return json.dumps({"results": []})
        results = [
            {
                "title": path.stem,
                "image": f"{self.base_url}/{path.relative_to(self.root).as_posix()}",
                "thumbnail": "",
                "url": f"https://pages.example.org/{path.stem}",
                "width": 320,
                "height": 240,
                "source": "fake",
            }
            for path in sorted(folder.iterdir())
        ]
        return json.dumps({"results": results})


@contextlib.contextmanager
def run_loggers_at(level: int) -> Iterator[None]:
    names = ("prefect", "prefect.flow_runs", "prefect.task_runs")
    before = {name: logging.getLogger(name).level for name in names}
    for name in names:
        logging.getLogger(name).setLevel(level)
    try:
        yield
    finally:
        for name, old in before.items():
            logging.getLogger(name).setLevel(old)


async def logs_and_artifacts(flow_run_id: object) -> tuple[list[str], list[str]]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        LogFilter,
        LogFilterFlowRunId,
    )

    async with get_client() as client:
        logs: list = []
        while True:  # every page: the server returns at most 200 per call
            page = await client.read_logs(
                log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])), limit=200, offset=len(logs)
            )
            logs += page
            if len(page) < 200:
                break
        artifacts = await client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])), limit=200
        )
    return [log.message for log in logs], [json.dumps(a.data) + (a.description or "") for a in artifacts]


def hold_gpu_slot_recorder(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[list[str]]]:
    """Records, per model call of the 3XCM stages, which concurrency slots were held while it ran."""
    import flows.xcm.stages as stages

    held: list[str] = []
    calls: dict[str, list[list[str]]] = {}
    real_slot = stages.gpu_slot

    @contextlib.contextmanager
    def slot(name: str | None, *args: Any, **kwargs: Any) -> Iterator[None]:
        with real_slot(name, *args, **kwargs):
            held.append(str(name))
            try:
                yield
            finally:
                held.pop()

    def recorded(function_name: str) -> Any:
        real = getattr(stages, function_name)

        def call(*args: Any, **kwargs: Any) -> Any:
            calls.setdefault(function_name, []).append(list(held))
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(stages, "gpu_slot", slot)
    for name in ("run_concept_dedup", "embed_images"):
        monkeypatch.setattr(stages, name, recorded(name))
    return calls


def test_production_backends_build_a_valid_release_end_to_end(
    prefect: Path,
    tmp_path: Path,
    corpus_host: tuple[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ddgs.engines.duckduckgo_images import DuckduckgoImages

    from collectors import search_ddgs
    from flows.xcm.build import build_3xcm

    base_url, web_root = corpus_host
    monkeypatch.setenv("GEMINI_API_KEY", API_KEY)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    search_ddgs.reset_canary_cache()
    model_dir = build_tiny_m3(tmp_path / "tiny-bge-m3")
    clip_configs, clip_weights = build_tiny_open_clip(tmp_path / "tiny-clip")
    review_file = tmp_path / "concept_review.csv"
    runner = CliRunner()

    with FakeGemini() as gemini:
        generation = tmp_path / "generate.yaml"
        generation.write_text(json.dumps({"count": 3, "countries": COUNTRIES, "gemini": {"base_url": gemini.base_url}}))
        result = runner.invoke(app, ["concepts", "generate", str(review_file), "--config", str(generation)])
        assert result.exit_code == 0, result.output
        candidate = review_file.read_text().splitlines()[1].split(",")[0]
        result = runner.invoke(app, ["concepts", "accept", str(review_file), candidate])
        assert result.exit_code == 0, result.output
        generation_requests = len(gemini.requests)

        gemini_settings = {"base_url": gemini.base_url, "retry": {"base_delay_s": 0.01, "max_delay_s": 0.05}}
        config = Build3XCMConfig.model_validate(
            {
                "workspace_root": str(tmp_path / "workspace"),
                "countries": COUNTRIES,
                "concepts": {"backend": "reviewed", "review_file": str(review_file), "include": SHIPPED},
                # The decision rule is tested in test_bge_m3.py; here every distinct concept must survive.
                "concept_dedup": {"backend": "bge-m3", "model": str(model_dir), "device": "cpu", "threshold": 0.999},
                "translations": {"backend": "gemini", "gemini": gemini_settings},
                "search": {
                    "backend": "ddgs",
                    "requests_per_second": 100,
                    "concurrency": 2,
                    "retry": {"max_attempts": 2, "base_delay_s": 0.01, "max_delay_s": 0.02},
                },
                "download": {
                    "backend": "http",
                    "allow_private_addresses": True,
                    "connect_timeout_s": 2,
                    "read_timeout_s": 5,
                    "retry": {"max_attempts": 2, "base_delay_s": 0.01, "max_delay_s": 0.02},
                },
                "image_dedup": {
                    "embedding": {
                        "embedder": {
                            "model_name": "tiny-clip-test",
                            "pretrained": str(clip_weights),
                            "model_config_dir": str(clip_configs),
                            "device": "cpu",
                        },
                        # A random model's cosines mean nothing: nothing may merge or queue on them here.
                        "merge_min_cosine": 1.0,
                        "review_min_cosine": 1.0,
                    }
                },
                "tagging": {"backend": "gemini", "gemini": gemini_settings, "images_per_request": 4},
                # Nobody annotates here: the pairs for review are decided by the (recorded) auto-accept policy.
                "review": {"backend": "label_studio_files", "when_unreviewed": "auto_accept"},
                "release": {"root": str(tmp_path / "releases"), "version": "1.0.0"},
            }
        )
        ws = Workspace(config.workspace_root, config.resolved_build_id())
        new_concept_id = next(
            int(line.split(",")[5]) for line in review_file.read_text().splitlines()[1:] if line.startswith(candidate)
        )
        ddg = FakeDuckDuckGo(base_url, web_root, ws, new_concept_id)
        in_gpu_slot = hold_gpu_slot_recorder(monkeypatch)
        with (
            mock.patch.object(DuckduckgoImages, "_get_vqd", return_value="fake-vqd"),
            mock.patch.object(DuckduckgoImages, "request", new=lambda engine, *a, **kw: ddg.request(*a, **kw)),
        ):
            with run_loggers_at(logging.INFO):  # what an operator's runs log (the suite runs at WARNING)
                state = build_3xcm(config, return_state=True)
            summary = state.result()
        translation_requests = [
            r for r in gemini.requests[generation_requests:] if "translations" in r.schema_properties
        ]

    # BGE-M3 and open_clip ran inside the `gpu` concurrency slot, every call (README: builds sharing a GPU take turns).
    assert set(in_gpu_slot) == {"run_concept_dedup", "embed_images"}
    assert all(held == ["gpu"] for calls in in_gpu_slot.values() for held in calls)
    # The card and manifest name what differs from the paper: the concept threshold and the unreviewed pairs.
    deviations = json.loads((Path(summary.release_path) / "manifest.json").read_text())["deviations"]
    assert len(deviations) == 2 and "0.999" in deviations[0] and deviations[1].startswith("No human reviewed")
    assert all(d in (Path(summary.release_path) / "README.md").read_text() for d in deviations)
    # Concepts: the shipped ones asked for, plus only the accepted candidate.
    concepts = ws.read_table("concepts").to_pylist()
    assert {c["concept_id"]: c["source"] for c in concepts}[new_concept_id] == "gemini"
    assert len(concepts) == len(SHIPPED) + 1
    # Concept dedup ran on the model and kept every distinct concept.
    dedup = ws.read_table("concept_dedup").to_pylist()
    assert all(r["method"].startswith("bge-m3:") and r["keep"] for r in dedup)
    # Translations: Gemini was asked only for the new concept, once per non-English language; the shipped rows stay.
    translations = ws.read_table("translations").to_pylist()
    languages = {default_pack().country_by_name()[c].language_code for c in COUNTRIES} - {"en"}
    assert len(translation_requests) == len(languages)
    new_rows = [t for t in translations if t["concept_id"] == new_concept_id and t["language_code"] != "en"]
    assert {t["language_code"] for t in new_rows} == languages
    assert all(t["source"].startswith("gemini:") and t["review_status"] == "machine_translated" for t in new_rows)
    assert all(t["source"] == "shipped" for t in translations if t["concept_id"] != new_concept_id)
    # Search went through ddgs with each country's region code.
    regions = {c["l"] for c in ddg.calls}
    assert regions == {default_pack().country_by_name()[c].ddg_region for c in COUNTRIES}
    search = ws.read_table("search").to_pylist()
    assert {r["searcher"] for r in search} == {"ddgs:duckduckgo"}
    assert all(r["status"] == "ok" and r["url"].startswith(base_url) for r in search)
    # Downloads: every planted bad file got its class over HTTP; good images came back with their HTTP facts.
    images = ws.read_table("images").to_pylist()
    truth = json.loads((web_root / "ground_truth.json").read_text())
    expected_errors = {f"{base_url}/{path}": error for path, error in truth["bad_files"].items()}
    assert expected_errors
    for row in images:
        if row["url"] in expected_errors:
            assert row["status"] == "failed" and row["error"] == expected_errors[row["url"]], row
        else:
            assert row["status"] == "ok" and row["http_status"] == 200 and row["final_url"] == row["url"], row
            assert row["sha256"] in ws.blobs
    # The release exists, is valid, and holds the new concept's images.
    release_dir = Path(summary.release_path)
    result = runner.invoke(app, ["validate", str(release_dir)])
    assert result.exit_code == 0, result.output
    catalog = ws.read_table("image_metadata")
    assert new_concept_id in set(catalog["concept_id"].to_pylist())
    assert pa.compute.sum(pa.compute.equal(catalog["concept_id"], new_concept_id)).as_py() > 0
    # Every stored image has a tiny-CLIP embedding, and Gemini tagged every kept image, in batches of at most 4.
    embeddings = ws.read_table("image_embeddings")
    stored = {r["image_id"] for r in images if r["status"] == "ok"}
    assert set(embeddings["image_id"].to_pylist()) == stored and not any(embeddings["error"].to_pylist())
    assert all(m.startswith("open_clip:tiny-clip-test:") for m in embeddings["model_id"].to_pylist())
    tags = ws.read_table("tags")
    assert set(tags["tagger"].to_pylist()) == {"gemini"}
    tag_requests = [r for r in gemini.requests if "images" in r.schema_properties]
    sent = [sum("inlineData" in p or "inline_data" in p for p in r.body["contents"][0]["parts"]) for r in tag_requests]
    sha_of = {r["image_id"]: r["sha256"] for r in images}
    assert max(sent) <= 4 and sum(sent) == len({sha_of[i] for i in tags["image_id"].to_pylist()})  # once per image
    assert set(catalog["tagger"].to_pylist()) == {"gemini"}
    # The API key reached the fake server, and nowhere else.
    assert all(r.api_key == API_KEY for r in gemini.requests)
    for folder in (tmp_path / "workspace", release_dir, prefect):
        for path in folder.rglob("*"):
            if path.is_file():
                assert API_KEY.encode() not in path.read_bytes(), path
    # Nor in what the server holds for the run: its logs and artifacts.
    logs, artifacts = asyncio.run(logs_and_artifacts(state.state_details.flow_run_id))
    assert any("translations: done" in message for message in logs)  # the scan sees the stage logs
    assert len(artifacts) > 10
    assert not [m for m in logs if API_KEY in m] and not [a for a in artifacts if API_KEY in a]
