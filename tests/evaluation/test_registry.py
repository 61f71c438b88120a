"""The benchmark registry (issue 58, part 1): a toy third benchmark, defined in this file and added through
`evaluation.registry.register` alone, is served by the generic code as 3XCM and MixCuBe are: `culturebench evaluate
toy` (the generic command), its result folder and card, `evaluate compare` (table, figure, JSON) and `--html` (the
leaderboard page). Nothing outside this file knows the toy."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import Field
from typer.testing import CliRunner

from data.publish.reader import Release
from evaluation import registry
from evaluation.config import EvaluateCommon, GpuSlot, Prepared
from evaluation.models.embed import Progress
from evaluation.models.encoders import ModelIdentity
from evaluation.registry import Benchmark, Ref, Task
from evaluation.results.folder import EvaluationResult, headline_names, read_metrics
from flows.cli import app


class ToyConfig(EvaluateCommon):
    """The toy's config: its "model" guesses, per benchmark row, whether the row's query text has an even length."""

    benchmark: Literal["toy"] = "toy"
    task: Literal["parity"] = "parity"
    seed: int = Field(default=0, description="Which toy model: the guess flips with the seed's parity.")


def _identity(config: ToyConfig) -> ModelIdentity:
    return ModelIdentity(
        backend="toy",
        model_id=f"toy--guesser-seed{config.seed}",
        name=f"guesser-seed{config.seed}",
        weights_sha256=None,
        device="n/a",
        precision="n/a",
    )


def prepare(config: ToyConfig, release: Release) -> Prepared:
    identity = _identity(config)

    def run(progress: Progress | None, gpu_slot: GpuSlot) -> EvaluationResult:
        texts: list[str] = []
        for file in sorted((release.path / "benchmark").glob("*.parquet")):
            texts += [str(t) for t in pq.read_table(file, columns=["query_text"])["query_text"].to_pylist()]
        digest = [hashlib.sha256(f"{config.seed}:{t}".encode()).digest()[0] % 2 for t in texts]
        correct = [guess == len(t) % 2 for guess, t in zip(digest, texts, strict=True)]
        share = sum(correct) / len(correct)
        per_query = pa.table({"query_text": texts, "correct": correct})
        return EvaluationResult(
            benchmark="toy",
            release=release,
            model=identity.model_dump(mode="json"),
            per_query=per_query,
            tables={},
            metrics={"share": share, "ci95": {"share": [max(0.0, share - 0.1), min(1.0, share + 0.1)]}},
            figures={},
            settings={"seed": config.seed},
            demo=config.demo,
        )

    return Prepared(identity, {"seed": config.seed}, run)


TOY = Benchmark(
    name="toy",
    title="ToyBench",
    tasks=(Task("parity", ("share",)),),
    reads=("benchmark",),
    per_query_row="benchmark row",
    config=Ref(f"{__name__}:ToyConfig"),
    prepare=Ref(f"{__name__}:prepare"),
)


@pytest.fixture
def toy() -> Iterator[Benchmark]:
    registry.register(TOY)
    yield TOY
    registry.unregister(TOY.name)


def invoke(*args: object) -> tuple[int, str]:
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result.exit_code, result.output


@pytest.mark.slow
def test_a_toy_benchmark_registered_alone_is_evaluated_compared_and_put_on_a_page(
    toy: Benchmark, small_releases: dict[str, Path], tmp_path: Path
) -> None:
    release = small_releases["3xcm"]  # the toy reads its `benchmark` table
    code, listing = invoke("evaluate", "--help")
    assert code == 0 and "toy" in listing and "ToyBench" in listing
    outs = []
    for seed in (0, 1):
        config = tmp_path / f"toy{seed}.yaml"
        config.write_text(f"seed: {seed}\n")
        out = tmp_path / "results" / f"seed{seed}"
        code, output = invoke("evaluate", "toy", release, "--demo-model", "--config", config, "--out", out)
        assert code == 0, output
        assert json.loads(output.strip().splitlines()[-1]) == {
            "out": str(out),
            "status": "created",
            "model_id": f"toy--guesser-seed{seed}",
        }
        metrics = read_metrics(out)  # the generic reader checks the toy's headline through the registry
        assert metrics["benchmark"] == "toy" and headline_names("toy", metrics) == ["share"]
        per_query = pq.read_table(out / "per_query.parquet")
        assert metrics["share"] == pytest.approx(sum(per_query["correct"].to_pylist()) / per_query.num_rows)
        card = (out / "README.md").read_text()
        assert "one row per benchmark row" in card and "| share |" in card
        outs.append(out)
    # Rerunning the same evaluation finds it unchanged; another seed into the same folder is refused.
    code, output = invoke(
        "evaluate", "toy", release, "--demo-model", "--config", tmp_path / "toy0.yaml", "--out", outs[0]
    )
    assert code == 0 and '"status": "unchanged"' in output
    code, output = invoke(
        "evaluate", "toy", release, "--demo-model", "--config", tmp_path / "toy1.yaml", "--out", outs[0]
    )
    assert code == 1 and "another model" in output

    code, output = invoke("evaluate", "compare", *outs, "--out", tmp_path / "cmp", "--html", tmp_path / "page")
    assert code == 0, output
    table = pq.read_table(tmp_path / "cmp" / "comparison.parquet").to_pylist()
    assert {(r["benchmark"], r["model_id"], r["metric"]) for r in table} == {
        ("toy", "toy--guesser-seed0", "share"),
        ("toy", "toy--guesser-seed1", "share"),
    }
    assert [r["value"] for r in table] == [read_metrics(o)["share"] for o in outs]
    assert (tmp_path / "cmp" / "comparison.png").read_bytes().startswith(b"\x89PNG")
    page = (tmp_path / "page" / "index.html").read_text()
    assert "ToyBench" in page and "toy--guesser-seed0" in page and "toy--guesser-seed1" in page


def test_an_unregistered_benchmark_is_named_with_the_registered_ones() -> None:
    with pytest.raises(KeyError, match="no benchmark 'nope': one of 3xcm, mixcube"):
        registry.get("nope")
    assert registry.names()[:2] == ("3xcm", "mixcube")
    assert registry.get("3xcm").task("triplet").headline[0] == "M_cr"
    with pytest.raises(KeyError, match="3xcm has no task 'questions'"):
        registry.get("3xcm").task("questions")
