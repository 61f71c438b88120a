"""`culturebench evaluate 3xcm|mixcube ... --name NAME`: a short human name beside the model's full identity, whatever
runs the model (precomputed vectors, the demo encoder and VLM, a remote endpoint, a harness's prediction file). It
lands in metrics.json as `model.display_name` and changes nothing else: not the model id, the result folder, the
numbers or the caches. Without it the key is absent, so results keep their bytes and reruns stay `unchanged`. A bad
one is one line naming --name (exit 2) before anything runs; the Prefect flow's typed config takes it as
`display_name`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.cli import invoke, one_line

NAME = "Tiny CLIP · B/32 (ours)"  # spaces, a slash and a non-ASCII character: a label, never an id


def written(result: Any) -> dict[str, Any]:
    """The command's last line (its JSON summary) and the result's metrics.json model, checked as a success."""
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output.strip().splitlines()[-1])
    model = json.loads((Path(summary["out"]) / "metrics.json").read_text(encoding="utf-8"))["model"]
    assert summary["model_id"] == model["model_id"]
    return {**summary, "model": model}


def assert_label_only(named: dict[str, Any], plain: dict[str, Any], root_named: Path, root_plain: Path) -> None:
    """`named` is `plain` with `display_name` added: the same identity, id and (relative) result folder."""
    assert "display_name" not in plain["model"]
    assert named["model"].pop("display_name") == NAME
    assert named["model"] == plain["model"]
    assert Path(named["out"]).relative_to(root_named) == Path(plain["out"]).relative_to(root_plain)


@pytest.fixture
def vectors(small_releases: dict[str, Path], tmp_path: Path) -> list[str]:
    """`--model-backend embeddings` options: vectors of every image and query text of the small 3XCM release."""
    release = small_releases["3xcm"]
    images = pq.read_table(sorted((release / "image_metadata").glob("*.parquet")), columns=["image_id"])
    texts: set[str] = set()
    for config in ("benchmark", "benchmark_cd"):
        texts |= set(pq.read_table(sorted((release / config).glob("*.parquet")))["query_text"].to_pylist())
    ids = images["image_id"].to_pylist()
    image_vectors = [[1.0, (i % 7) / 7, 0.5] for i in range(len(ids))]
    pq.write_table(pa.table({"image_id": ids, "embedding": image_vectors}), tmp_path / "IMG.parquet")
    text_vectors = [[(i % 5) / 5, 1.0, 0.25] for i in range(len(texts))]
    pq.write_table(pa.table({"text": sorted(texts), "embedding": text_vectors}), tmp_path / "TXT.parquet")
    return ["--model-backend", "embeddings", "--image-embeddings", str(tmp_path / "IMG.parquet"),
            "--text-embeddings", str(tmp_path / "TXT.parquet"), "--bootstrap-resamples", "0"]  # fmt: skip


def test_a_name_is_a_label_beside_the_identity(
    small_releases: dict[str, Path], vectors: list[str], tmp_path: Path
) -> None:
    release = str(small_releases["3xcm"])
    plain_root, named_root = tmp_path / "plain", tmp_path / "named"
    plain = written(invoke("evaluate", "3xcm", release, *vectors, "--results-root", str(plain_root)))
    named = written(invoke("evaluate", "3xcm", release, *vectors, "--results-root", str(named_root), "--name", NAME))
    assert plain["model"]["backend"] == "embeddings"
    assert set(plain["model"]) == {"backend", "model_id", "name", "weights_sha256", "device", "precision"}
    per_query = [pq.read_table(Path(run["out"]) / "per_query.parquet") for run in (plain, named)]
    assert per_query[0].equals(per_query[1])  # the same numbers
    # the manifest records the same model as metrics.json
    manifest = json.loads((Path(named["out"]) / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["model"] == named["model"]
    assert_label_only(named, plain, named_root, plain_root)

    # Reruns: the same name is unchanged; without a name, the unnamed result is unchanged; another name is another
    # result's (result folders are immutable: it is refused, exit 1, nothing written)
    again = invoke("evaluate", "3xcm", release, *vectors, "--results-root", str(named_root), "--name", NAME)
    assert again.exit_code == 0 and json.loads(again.output.splitlines()[-1])["status"] == "unchanged", again.output
    again = invoke("evaluate", "3xcm", release, *vectors, "--results-root", str(plain_root))
    assert again.exit_code == 0 and json.loads(again.output.splitlines()[-1])["status"] == "unchanged", again.output
    other = invoke("evaluate", "3xcm", release, *vectors, "--results-root", str(named_root), "--name", "Other")
    assert other.exit_code == 1 and "another model" in one_line(other.output), other.output

    # --name over a config's display_name
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"display_name": "From the config"}), encoding="utf-8")
    from_config = written(invoke("evaluate", "3xcm", release, *vectors, "--out", str(tmp_path / "c"), "--config",
                                 str(config)))  # fmt: skip
    assert from_config["model"]["display_name"] == "From the config"
    over = written(invoke("evaluate", "3xcm", release, *vectors, "--out", str(tmp_path / "o"), "--config",
                          str(config), "--name", NAME))  # fmt: skip
    assert over["model"]["display_name"] == NAME


@pytest.mark.slow
def test_a_name_for_the_demo_models_and_their_caches(small_releases: dict[str, Path], tmp_path: Path) -> None:
    """The demo open_clip (3XCM) and the demo VLM (MixCuBe's questions): the same label rule; the embedding cache
    records no display name."""
    config = tmp_path / "demo.json"
    config.write_text(json.dumps({"demo_models": str(tmp_path / "models")}), encoding="utf-8")
    cache = tmp_path / "vectors-cache"
    common = ["--demo-model", "--config", str(config)]
    xcm = [str(small_releases["3xcm"]), *common, "--task", "triplet", "--bootstrap-resamples", "0",
           "--embedding-cache", str(cache)]  # fmt: skip
    plain = written(invoke("evaluate", "3xcm", *xcm, "--results-root", str(tmp_path / "p3")))
    named = written(invoke("evaluate", "3xcm", *xcm, "--results-root", str(tmp_path / "n3"), "--name", NAME))
    assert plain["model"]["backend"] == "open_clip"
    assert_label_only(named, plain, tmp_path / "n3", tmp_path / "p3")
    records = [json.loads(p.read_text()) for p in cache.rglob("model.json")]
    assert records and all("display_name" not in record["identity"] for record in records)

    mix = [str(small_releases["mixcube"]), *common]
    plain = written(invoke("evaluate", "mixcube", *mix, "--results-root", str(tmp_path / "pm")))
    named = written(invoke("evaluate", "mixcube", *mix, "--results-root", str(tmp_path / "nm"), "--name", NAME))
    assert plain["model"]["backend"] == "transformers"
    assert_label_only(named, plain, tmp_path / "nm", tmp_path / "pm")


@pytest.mark.slow
def test_a_name_for_an_endpoint_and_a_prediction_file(small_releases: dict[str, Path], tmp_path: Path) -> None:
    """An OpenAI-compatible endpoint (its answer cache records no display name: the named run asks nothing again)
    and a VLMEvalKit prediction file."""
    from tests.evaluation.harnesses.predictions.test_predictions import default_rows, write_tsv
    from tests.support.fake_openai import FakeOpenAI, text_reply

    release = small_releases["mixcube"]
    answers = tmp_path / "answers"
    with FakeOpenAI(fallback=lambda request: text_reply("UK")) as fake:
        args = ["evaluate", "mixcube", str(release), "--model-backend", "openai", "--base-url", fake.base_url,
                "--model", "fake-vlm", "--cache-dir", str(answers)]  # fmt: skip
        plain = written(invoke(*args, "--results-root", str(tmp_path / "po")))
        asked = len(fake.requests)
        named = written(invoke(*args, "--results-root", str(tmp_path / "no"), "--name", NAME))
        assert len(fake.requests) == asked  # the same cache keys: every answer from the cache
    assert plain["model"]["backend"] == "openai"
    assert_label_only(named, plain, tmp_path / "no", tmp_path / "po")
    entries = [json.loads(p.read_text()) for p in answers.rglob("*.json")]
    assert entries and all("display_name" not in entry["identity"] for entry in entries)

    rows = default_rows(release)
    file = write_tsv(tmp_path / "m_MixCuBe.tsv", ["index", "prediction"], [[i, "UK"] for i in range(len(rows))])
    args = ["evaluate", "mixcube", str(release), "--predictions", str(file)]
    plain = written(invoke(*args, "--results-root", str(tmp_path / "pp")))
    named = written(invoke(*args, "--results-root", str(tmp_path / "np"), "--name", NAME))
    assert plain["model"]["backend"] == "predictions" and plain["model"]["name"] == "m"  # from the file's name
    assert_label_only(named, plain, tmp_path / "np", tmp_path / "pp")


BAD_NAMES = [
    ("empty", "", "is empty"),
    ("blank", "   ", "is empty"),
    ("too-long", "m" * 65, "65 characters long, more than 64"),
    ("two-lines", "Tiny\nCLIP", "not printable"),
    ("a-tab", "Tiny\tCLIP", "not printable"),
    ("an-escape", "Tiny\x1b[31mCLIP", "not printable"),
    ("a-surrogate", "Tiny\udcffCLIP", "not printable"),  # a name that was not UTF-8 on the command line
    ("padded", " Tiny CLIP", "starts or ends with a space"),
]


@pytest.mark.parametrize("benchmark", ["3xcm", "mixcube"])
@pytest.mark.parametrize(("case", "name", "needle"), BAD_NAMES, ids=[case for case, _, _ in BAD_NAMES])
def test_a_bad_name_is_one_line_naming_the_option(
    small_releases: dict[str, Path], tmp_path: Path, benchmark: str, case: str, name: str, needle: str
) -> None:
    out = tmp_path / "out"
    result = invoke("evaluate", benchmark, str(small_releases[benchmark]), "--demo-model", "--name", name,
                    "--out", str(out))  # fmt: skip
    assert result.exit_code == 2, result.output
    line = one_line(result.output)
    assert line.startswith("--name ") and needle in line and "64 characters" in line
    assert not out.exists()


def test_the_longest_name_passes_and_a_bad_one_in_a_config_names_its_field(
    small_releases: dict[str, Path], vectors: list[str], tmp_path: Path
) -> None:
    release = str(small_releases["3xcm"])
    longest = "N" * 63 + "é"
    assert written(invoke("evaluate", "3xcm", release, *vectors, "--out", str(tmp_path / "a"), "--name",
                          longest))["model"]["display_name"] == longest  # fmt: skip
    config = tmp_path / "bad.json"
    config.write_text(json.dumps({"display_name": "two\nlines"}), encoding="utf-8")
    result = invoke("evaluate", "3xcm", release, *vectors, "--out", str(tmp_path / "b"), "--config", str(config))
    assert result.exit_code == 2 and "display_name" in one_line(result.output), result.output
    assert not (tmp_path / "b").exists()


def test_the_flows_typed_config_takes_a_display_name(
    small_releases: dict[str, Path], vectors: list[str], tmp_path: Path
) -> None:
    from pydantic import TypeAdapter, ValidationError

    from evaluation.run import EvaluationConfig, evaluate_and_write

    model = {"backend": "embeddings", "image_embeddings": vectors[3], "text_embeddings": vectors[5]}
    config = {"benchmark": "3xcm", "release": str(small_releases["3xcm"]), "model": model, "bootstrap_resamples": 0}
    adapter: TypeAdapter[Any] = TypeAdapter(EvaluationConfig)
    done = evaluate_and_write(adapter.validate_python({**config, "out": str(tmp_path / "a"), "display_name": NAME}))
    assert done.result.model["display_name"] == NAME
    on_disk = json.loads((tmp_path / "a" / "metrics.json").read_text(encoding="utf-8"))["model"]
    assert on_disk == done.result.model
    with pytest.raises(ValidationError, match="display_name"):
        adapter.validate_python({**config, "display_name": "m" * 65})


def test_the_generic_command_of_a_registered_benchmark_takes_a_name(
    small_releases: dict[str, Path], tmp_path: Path
) -> None:
    """A benchmark without its own command (the registry's toy) gets --name from the generic one, the same rule."""
    from evaluation import registry
    from tests.evaluation.test_registry import TOY, ToyConfig, _identity

    registry.register(TOY)
    try:
        release = str(small_releases["3xcm"])
        named = written(
            invoke("evaluate", "toy", release, "--demo-model", "--name", NAME, "--out", str(tmp_path / "a"))
        )
        assert (
            named["model"]["display_name"] == NAME
            and named["model_id"] == _identity(ToyConfig(release=release, demo=True)).model_id
        )
        bad = invoke("evaluate", "toy", release, "--demo-model", "--name", "x" * 65, "--out", str(tmp_path / "b"))
        assert bad.exit_code == 2 and one_line(bad.output).startswith("--name "), bad.output
    finally:
        registry.unregister(TOY.name)
