"""`culturebench evaluate` end to end: MixCuBe through the CLI against a fake OpenAI-compatible server (127.0.0.1),
both benchmarks through the `evaluate` flow on the Prefect test server (artifacts read back), the demo models,
the image-vector cache across two evaluations, and the `gpu` slot held only while a local model works.

The 3XCM cross-check against the authors' evaluator, through the same CLI, is in tests/evaluation/xcm/test_task.py."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from evaluation import config as evaluation_config
from evaluation import run as evaluation_run
from evaluation.mixcube.evaluate import EvaluateMixCubeConfig
from evaluation.xcm.evaluate import Evaluate3XCMConfig
from flows.cli import app
from tests.support.fake_openai import FakeOpenAI, RecordedRequest, text_reply

ORIGINAL = "original"


@pytest.fixture
def releases(small_releases: dict[str, Path]) -> dict[str, Path]:
    return small_releases  # conftest's, built once per session


def _release_rows(release: Path) -> list[dict]:
    table = pq.read_table(next((release / "default").glob("*.parquet")))
    rows = table.drop(["image"]).to_pylist()
    for row, image in zip(rows, table["image"].to_pylist(), strict=True):
        row["bytes_sha256"] = hashlib.sha256(image["bytes"]).hexdigest()
    return rows


def _knows_originals(rows: list[dict]):
    """A model that names the culture of every original and of no swap, and a judge that says Yes to a food label
    quoted in its prompt: Country Identification is exactly 1 on originals and 0 on swaps."""
    by_image = {r["bytes_sha256"]: r for r in rows}

    def respond(request: RecordedRequest):
        if not request.images:  # the judge (App. B.3): Yes when the response names the label
            return text_reply("Yes" if "named-food" in request.prompt else "No")
        row = by_image[hashlib.sha256(request.images[0][1]).hexdigest()]
        if row["ethnicity"] == ORIGINAL:
            return text_reply(f"This is {row['country']}. It is named-food.")
        return text_reply("Probably somewhere else entirely.")

    return respond


@pytest.mark.slow
def test_mixcube_cli_against_an_openai_compatible_server(releases: dict[str, Path], tmp_path: Path) -> None:
    release = releases["mixcube"]
    rows = _release_rows(release)
    out = tmp_path / "result"
    with FakeOpenAI(fallback=_knows_originals(rows)) as fake:
        args = ["evaluate", "mixcube", str(release), "--model-backend", "openai", "--base-url", fake.base_url]
        args += ["--model", "fake-vlm", "--judge-backend", "openai", "--judge-base-url", fake.base_url]
        args += ["--judge-model", "fake-judge", "--cache-dir", str(tmp_path / "answers"), "--out", str(out)]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        asked = len(fake.requests)
        # Cached: the same evaluation again asks nothing and finds its folder unchanged.
        again = CliRunner().invoke(app, args)
        assert again.exit_code == 0 and '"status": "unchanged"' in again.output, again.output
        assert len(fake.requests) == asked

    per_image = pq.read_table(out / "per_query.parquet")
    assert per_image.num_rows == len(rows)
    assert per_image["sample_id"].to_pylist() == [r["sample_id"] for r in rows]
    assert all(a is not None for a in per_image["answer"].to_pylist())  # the raw answers are kept
    expected = [r["ethnicity"] == ORIGINAL for r in rows]
    assert per_image["correct"].to_pylist() == expected
    food = [r["category"] == "Food" for r in rows]
    judged = per_image["marker_correct"].to_pylist()
    assert [j is not None for j in judged] == food  # the judge runs on Food only
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["accuracy"] == pytest.approx(sum(expected) / len(rows))
    assert metrics["accuracy_by_ethnicity"][ORIGINAL] == 1.0
    assert all(v == 0.0 for k, v in metrics["accuracy_by_ethnicity"].items() if k != ORIGINAL)
    assert metrics["model"]["backend"] == "openai" and metrics["settings"]["judge"]["backend"] == "openai"
    drops = pq.read_table(out / "swap_drops.parquet").to_pylist()
    assert drops and all(d["drop"] == 1.0 for d in drops)  # the original → swap drop, per country x category x swap
    assert {p.name for p in (out / "figures").iterdir()} >= {"accuracy_bars.png", "swap_difference.png"}
    card = (out / "README.md").read_text()
    assert metrics["release"]["manifest_sha256"] in card and "meaningless" not in card


def test_evaluate_flow_publishes_tables_and_figure_links(
    prefect: Path, releases: dict[str, Path], tmp_path: Path
) -> None:
    """The `evaluate` flow on both benchmarks (the demo models), with its artifacts read back from the server."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from flows.evaluate import evaluate

    models = tmp_path / "models"
    three = evaluate(
        Evaluate3XCMConfig(
            release=str(releases["3xcm"]),
            demo=True,
            demo_models=str(models),
            results_root=str(tmp_path / "ev"),
            embedding_cache=str(tmp_path / "cache"),
        )
    )
    mix = evaluate(
        EvaluateMixCubeConfig(
            release=str(releases["mixcube"]), demo=True, demo_models=str(models), results_root=str(tmp_path / "ev")
        )
    )
    assert three.status == mix.status == "created"
    assert Path(three.out) == tmp_path / "ev" / "3xcm" / "0.0.1" / three.model_id
    assert set(three.headline) == {"M_cr", "M_lb", "M_ti", "SP"} and three.headline["M_cr"] is not None
    assert json.loads((Path(mix.out) / "metrics.json").read_text())["meaningless_demo_model"] is True
    assert "These numbers are meaningless" in (Path(three.out) / "README.md").read_text()
    # The demo VLM's answers are capped below the paper's 120 tokens, and its card says by how much; an encoder's not.
    from demo.models import DEMO_MAX_NEW_TOKENS

    cap = json.loads((Path(mix.out) / "metrics.json").read_text())["settings"]["demo_answer_cap"]
    assert cap == DEMO_MAX_NEW_TOKENS < 120
    assert f"Its answers stop at {cap} new tokens" in (Path(mix.out) / "README.md").read_text()
    assert "new tokens" not in (Path(three.out) / "README.md").read_text()

    async def artifacts() -> dict[str, object]:
        async with get_client() as client:
            found = await client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(like_="3xcm-")))
        return {a.key: a for a in found}

    import asyncio

    found = asyncio.run(artifacts())
    headline = next(a for k, a in found.items() if k.endswith("-headline"))
    table = json.loads(headline.data) if isinstance(headline.data, str) else headline.data
    assert [row["metric"] for row in table] == ["M_cr", "M_lb", "M_ti", "SP"]
    # Link artifacts (Prefect stores them as Markdown links) point at the figures in the result folder.
    links = {str(a.data).split("](", 1)[1].rstrip(")") for k, a in found.items() if k.endswith("-png")}
    assert {Path(link.removeprefix("file://")) for link in links} == set((Path(three.out) / "figures").iterdir())
    assert any(k.endswith("-win-rates") for k in found)


@pytest.mark.slow
def test_the_image_cache_serves_a_second_evaluation_and_the_gpu_slot_is_held_only_by_local_models(
    releases: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import contextlib

    held: list[str | None] = []

    @contextlib.contextmanager
    def slot(name: str | None, timeout_s: float | None = None):
        held.append(name)
        yield

    stats = []
    original = evaluation_config.CachedEncoder

    def spy(encoder, root):
        cached = original(encoder, root)
        stats.append(cached.stats)
        return cached

    monkeypatch.setattr(evaluation_config, "CachedEncoder", spy)
    common = {"release": str(releases["3xcm"]), "demo": True, "demo_models": str(tmp_path / "models")}
    first = evaluation_run.evaluate_and_write(
        Evaluate3XCMConfig(**common, out=str(tmp_path / "a"), embedding_cache=str(tmp_path / "cache")),
        gpu_slot=slot,
    )
    second = evaluation_run.evaluate_and_write(
        Evaluate3XCMConfig(**common, out=str(tmp_path / "b"), embedding_cache=str(tmp_path / "cache")),
        gpu_slot=slot,
    )
    # (Two images of the demo share their bytes, planted copies across concepts: embedded once, served twice.)
    assert 0 < stats[0].embedded <= stats[0].requested and stats[1].embedded == 0
    assert stats[1].from_cache == stats[1].requested == stats[0].requested
    assert pq.read_table(tmp_path / "a" / "per_query.parquet") == pq.read_table(tmp_path / "b" / "per_query.parquet")
    assert first.result.model == second.result.model and held == ["gpu", "gpu"]

    # Precomputed vectors hold no slot.
    images = pq.read_table(next((releases["3xcm"] / "image_metadata").glob("*.parquet")), columns=["image_id"])
    texts = set()
    for config in ("benchmark", "benchmark_cd"):
        texts |= set(pq.read_table(next((releases["3xcm"] / config).glob("*.parquet")))["query_text"].to_pylist())
    pq.write_table(
        pa.table({"image_id": images["image_id"], "embedding": [[1.0, 0.5]] * images.num_rows}),
        tmp_path / "IMG.parquet",
    )
    pq.write_table(pa.table({"text": sorted(texts), "embedding": [[0.5, 1.0]] * len(texts)}), tmp_path / "TXT.parquet")
    model = {
        "backend": "embeddings",
        "image_embeddings": str(tmp_path / "IMG.parquet"),
        "text_embeddings": str(tmp_path / "TXT.parquet"),
    }
    evaluation_run.run(
        Evaluate3XCMConfig(release=str(releases["3xcm"]), model=model, bootstrap_resamples=0), gpu_slot=slot
    )
    assert held[-1] is None


def test_invalid_configs_and_missing_releases_are_one_line_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["evaluate", "3xcm", str(tmp_path), "--model-backend", "embeddings"])
    assert result.exit_code == 2 and "image_embeddings" in result.output, result.output
    result = runner.invoke(app, ["evaluate", "3xcm", str(tmp_path), "--demo-model"])
    assert result.exit_code == 2 and "manifest.json" in result.output, result.output
    result = runner.invoke(app, ["evaluate", "mixcube", str(tmp_path)])
    assert result.exit_code == 2 and "--model-backend" in result.output, result.output
    assert "Traceback" not in result.output
