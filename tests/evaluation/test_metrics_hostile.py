"""Hostile inputs, third round (issue 38, items 8 and 9): degenerate vectors and pools that the bias audit and the
retrieval across universals used to publish as measured. One vector for every image made the audit read perfectly
fair (MaxSkew 0) and certain (%NH 100); a one-image pool gave MRR and nDCG@5 1.000, identical vectors an MRR and
nDCG published as measured, a one-country pool a diversity of 0 with no note. Each now warns, first in the card and
under a key of metrics.json, as the 3XCM triplet evaluation does for ties."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import flows.cli.output
from data.publish.reader import Release
from data.reference import default_pack
from evaluation.mixcube.bias_audit import audit
from evaluation.mixcube.bias_audit.prompts import PROMPT_SETS
from evaluation.models.encoders import ImageRef, ModelIdentity
from evaluation.xcm import retrieval_metrics as rm
from evaluation.xcm.metrics import TIE_TOLERANCE
from evaluation.xcm.retrieval import Pool, Query, evaluate_pool, pool_from_table
from flows.cli import app
from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT
DEMO_3XCM = ROOT / "releases" / "3xcm" / "0.1.0-demo"
DEMO_MIXCUBE = ROOT / "releases" / "mixcube" / "0.1.0-demo"


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's messages are one line; a terminal of 80 columns would wrap them."""
    monkeypatch.setattr(flows.cli.output.console, "width", 1000)


def cli(*args: object) -> tuple[int, str]:
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.output


def reseal(folder: Path) -> None:
    """The manifest's `files` rewritten to what the folder holds now: a forger's careful release."""
    manifest = json.loads((folder / "manifest.json").read_text())
    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "manifest.json"):
        data = path.read_bytes()
        files[path.relative_to(folder).as_posix()] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    manifest["files"] = files
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2))


def copy_release(source: Path, tables: Sequence[str], folder: Path) -> Path:
    """A release's manifest and the tables an evaluation reads, copied (the demo releases are never touched)."""
    folder.mkdir(parents=True)
    shutil.copy2(source / "manifest.json", folder / "manifest.json")
    for name in tables:
        shutil.copytree(source / name, folder / name)
    return folder


def forged_3xcm(folder: Path, keep: Callable[[pa.Table], pa.Table] | None = None) -> Path:
    """The 3XCM demo's tables, its image_metadata cut by `keep` and the manifest resealed."""
    release = copy_release(DEMO_3XCM, ("benchmark", "benchmark_cd", "image_metadata"), folder)
    if keep is not None:
        (part,) = sorted((release / "image_metadata").glob("*.parquet"))
        pq.write_table(keep(pq.read_table(part)), part)
        reseal(release)
    return release


def write_embeddings(
    folder: Path, image_ids: Sequence[str], texts: Sequence[str], images: np.ndarray, text_vectors: np.ndarray
) -> list[str]:
    """The embeddings backend's two files, and the CLI options that read them."""
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"image_id": list(image_ids), "embedding": images.tolist()}), folder / "IMG.parquet")
    pq.write_table(pa.table({"text": list(texts), "embedding": text_vectors.tolist()}), folder / "TXT.parquet")
    image, text = str(folder / "IMG.parquet"), str(folder / "TXT.parquet")
    return ["--model-backend", "embeddings", "--image-embeddings", image, "--text-embeddings", text]


def retrieval_vectors(release: Path, folder: Path, *, identical: bool, seed: int = 0) -> list[str]:
    """Vectors for every pool image and every query text (English names and native texts): random, or one vector
    for every image."""
    metadata = pq.read_table(release / "image_metadata", columns=["image_id", "concept", "concept_in_native"])
    ids = metadata.column("image_id").to_pylist()
    texts = sorted(set(metadata.column("concept").to_pylist()) | set(metadata.column("concept_in_native").to_pylist()))
    rng = np.random.default_rng(seed)
    images = np.tile(rng.normal(size=8), (len(ids), 1)) if identical else rng.normal(size=(len(ids), 8))
    return write_embeddings(folder, ids, texts, images, rng.normal(size=(len(texts), 8)))


def evaluate_retrieval_cli(release: Path, options: list[str], out: Path) -> tuple[dict[str, Any], str, str]:
    code, output = cli("evaluate", "3xcm", release, "--task", "retrieval", *options, "--out", out)
    assert code == 0, output
    metrics = json.loads((out / "metrics.json").read_text())
    return metrics, (out / "README.md").read_text(), output


def card_warnings(card: str) -> list[str]:
    """The card's warnings, which must come before anything it reports."""
    head = card.split("## What was evaluated", 1)[0]
    return [line for line in head.splitlines() if line.startswith("> **Warning.**")]


# -- 9: retrieval on degenerate pools ---------------------------------------------------------------------------------


def test_identical_vectors_warn_for_every_retrieval_metric_ties_decide(tmp_path: Path) -> None:
    release = forged_3xcm(tmp_path / "3xcm")
    metrics, card, output = evaluate_retrieval_cli(
        release, retrieval_vectors(release, tmp_path / "same", identical=True), tmp_path / "out"
    )
    part = metrics["retrieval"]
    n = part["settings"]["n_queries"]
    ties = part["ties"]["metrics"]
    # MRR and nDCG@5 rest on ties as much as precision@5 and diversity@5 do, and say so.
    for name in ("precision@5", "diversity@5_country", "diversity@5_region", "mrr", "ndcg@5", "ndcg@10"):
        assert ties[name] == n, name
    assert part["ties"]["tolerance"] == TIE_TOLERANCE and part["ties"]["queries"] == n
    (warning,) = [w for w in card_warnings(card) if "ties within" in w]
    for name in ("precision@5 and diversity@5", "nDCG@5", "MRR"):
        assert f"{name} ({n})" in warning, name
    assert "not measured" in warning and warning.removeprefix("> **Warning.** ") in part["warnings"]
    assert "MRR" in output

    # Vectors that tell the images apart: no ties, no key, no warning.
    metrics, card, _ = evaluate_retrieval_cli(
        release, retrieval_vectors(release, tmp_path / "random", identical=False), tmp_path / "random-out"
    )
    assert "ties" not in metrics["retrieval"] and "pool_decides" not in metrics["retrieval"]
    assert not any("Retrieval" in w for w in card_warnings(card))


def test_a_one_image_pool_says_the_pool_not_the_model_decides(tmp_path: Path) -> None:
    release = forged_3xcm(tmp_path / "3xcm", lambda table: table.slice(0, 1))
    metrics, card, _ = evaluate_retrieval_cli(
        release, retrieval_vectors(release, tmp_path / "v", identical=False), tmp_path / "out"
    )
    assert metrics["mrr"] == 1.0 and metrics["ndcg@5"] == 1.0  # what a pool of one gives ...
    decides = metrics["retrieval"]["pool_decides"]  # ... and what it rests on
    n = decides["queries"]
    assert decides["pool_images"] == 1 and decides["k_at_least_pool"] == [5, 10]
    for name in ("precision@5", "diversity@5_country", "mrr", "ndcg@5"):
        assert decides["metrics"][name] == n, name
    warnings = card_warnings(card)
    assert any("holds only 1 image(s), no more than k = 5 and 10" in w for w in warnings), warnings
    (rest,) = [w for w in warnings if "every ranking of this pool gives the same" in w]
    assert f"mrr ({n} of {n} queries)" in rest and f"ndcg@5 ({n} of {n} queries)" in rest
    assert len(metrics["retrieval"]["warnings"]) == len([w for w in warnings if w.startswith("> **Warning.** Retr")])


def test_a_one_country_pool_notes_that_diversity_is_zero_whatever_the_ranking(tmp_path: Path) -> None:
    release = forged_3xcm(tmp_path / "3xcm", lambda table: table.filter(pc.equal(table["country"], "Japan")))
    metrics, card, _ = evaluate_retrieval_cli(
        release, retrieval_vectors(release, tmp_path / "v", identical=False), tmp_path / "out"
    )
    assert metrics["diversity@5_country"] == 0.0
    decides = metrics["retrieval"]["pool_decides"]
    assert decides["one_country"] == "Japan" and decides["one_region"] == "East Asia"
    assert decides["k_at_least_pool"] == [] and decides["metrics"]["diversity@5_country"] == decides["queries"]
    warnings = card_warnings(card)
    (note,) = [w for w in warnings if "one country (Japan)" in w]
    assert "one region (East Asia)" in note and "diversity@k by country and by region is 0" in note
    # The pool holds several concepts: MRR and nDCG are still the model's.
    assert not any("every ranking of this pool gives the same" in w for w in warnings)
    assert "mrr" not in decides["metrics"] and "ndcg@5" not in decides["metrics"]


def test_the_first_relevant_images_tie_is_found_inside_and_below_the_kept_top() -> None:
    """`first_relevant_tied` against brute force: an image not showing the concept scores within the tolerance of
    the best one that does. Every image has an exact copy, often of another concept; a depth of 3 and blocks of 5
    images leave many ties below the kept top, for the second pass to find."""
    rng = np.random.default_rng(11)
    n_queries, n_concepts, depth = 30, 3, 3
    half = rng.normal(size=(20, 6))
    images = np.concatenate([half, half])  # image j + 20 is a copy of image j
    images /= np.linalg.norm(images, axis=1, keepdims=True)
    queries = rng.normal(size=(n_queries, 6))
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    shows = np.zeros((n_concepts, len(images)), dtype=bool)
    shows[rng.integers(0, n_concepts, size=len(images)), np.arange(len(images))] = True
    concept = rng.integers(0, n_concepts, size=n_queries)
    ranking = rm.rank_images(queries, images, shows, concept, depth=depth, block_size=5, tolerance=TIE_TOLERANCE)
    scores = queries @ images.T
    expected, below = [], []
    for i in range(n_queries):
        relevant = shows[concept[i]]
        rank = np.empty(len(images), dtype=np.int64)
        rank[np.lexsort((np.arange(len(images)), -scores[i]))] = np.arange(1, len(images) + 1)
        tying = ~relevant & (np.abs(scores[i] - scores[i, relevant].max()) <= TIE_TOLERANCE)
        expected.append(bool(tying.any()))
        below.append(bool(tying.any() and (rank[tying] > depth).all()))
    assert ranking.first_relevant_tied.tolist() == expected
    assert 0 < sum(expected) < n_queries and any(below)  # ties and none, and ties only the second pass sees
    # Without copies (random directions), nothing is marked.
    loose = rm.rank_images(
        queries, rng.normal(size=images.shape), shows, concept, depth=depth, block_size=5, tolerance=TIE_TOLERANCE
    )
    assert not loose.first_relevant_tied.any()


def _pool(countries: Sequence[str]) -> Pool:
    rows = [
        {
            "index_in_dataset": i,
            "image_id": f"img-{i}",
            "concept_id": 0 if i < 2 else 1,
            "concept": "train" if i < 2 else "food",
            "concept_in_native": "train" if i < 2 else "food",
            "country": country,
        }
        for i, country in enumerate(countries)
    ]
    return pool_from_table(pa.Table.from_pylist(rows), default_pack())


def test_ndcg_counts_a_tie_between_images_of_different_grade_inside_the_top_k() -> None:
    """Two train images tie at the top, one from the query's country (grade 2), one not (grade 1): the pool's order
    chose which came first, so nDCG@5 rests on a tie; MRR does not (both show the concept), nor precision@5 (no tie
    at the 5th place)."""
    pool = _pool(["UK", "Japan", "UK", "UK", "UK", "UK", "UK", "UK", "UK", "UK", "UK", "UK"])
    query = Query(0, "train", "ja", "train")
    q = np.array([[1.0, 0.0]])
    # The two train images tie at 1; the food images fall away, each a little lower than the one before.
    angles = np.concatenate([[0.0, 0.0], np.linspace(0.3, 1.4, 10)])
    x = np.column_stack([np.cos(angles), np.sin(angles)])
    part = evaluate_pool(pool, [query], q, x, n_resamples=0, seed=0)
    ties = part.metrics["ties"]["metrics"]
    assert ties == {"ndcg@5": 1, "ndcg@10": 1}
    assert any("nDCG@5 (1)" in w for w in part.warnings)
    assert "pool_decides" not in part.metrics


# -- 8: the bias audit on degenerate vectors -------------------------------------------------------------------------


def mixcube_copy(folder: Path) -> Path:
    return copy_release(DEMO_MIXCUBE, ("default",), folder)


def audit_texts() -> list[str]:
    prompts = default_pack().prompts()
    return sorted({t for code in prompts.languages for name in PROMPT_SETS for t in prompts.texts(code, name)})


def test_one_vector_for_every_image_is_not_a_perfectly_fair_audit(tmp_path: Path) -> None:
    release = mixcube_copy(tmp_path / "mixcube")
    ids = pq.read_table(release / "default", columns=["sample_id"]).column("sample_id").to_pylist()
    texts = audit_texts()
    rng = np.random.default_rng(0)
    options = write_embeddings(
        tmp_path / "same", ids, texts, np.tile(rng.normal(size=8), (len(ids), 1)), rng.normal(size=(len(texts), 8))
    )
    code, output = cli(
        "evaluate", "mixcube", release, "--task", "audit", *options, "--out", tmp_path / "o",
        "--bootstrap-resamples", "20",
    )  # fmt: skip
    assert code == 0, output
    metrics = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert set(metrics["max_skew"].values()) == {0.0}  # what one vector gives ...
    ties = metrics["audit"]["ties"]  # ... and what it rests on
    assert ties["all_images_alike"] is True and ties["n_images"] == len(ids)
    assert ties["swaps"] == ties["n_swaps"] > 0 and ties["tolerance"] == TIE_TOLERANCE
    card = (tmp_path / "o" / "README.md").read_text()
    (warning,) = [w for w in card_warnings(card) if "score every prompt alike" in w]
    assert f"All {len(ids)} images" in warning and "MaxSkew 0" in warning and "not measured" in warning
    assert "score every prompt alike" in output

    # Vectors that tell the images apart: no key, no warning.
    options = write_embeddings(
        tmp_path / "random", ids, texts, rng.normal(size=(len(ids), 8)), rng.normal(size=(len(texts), 8))
    )
    code, output = cli(
        "evaluate", "mixcube", release, "--task", "audit", *options, "--out", tmp_path / "r",
        "--bootstrap-resamples", "0",
    )  # fmt: skip
    assert code == 0, output
    assert "ties" not in json.loads((tmp_path / "r" / "metrics.json").read_text())["audit"]
    assert not any(
        "prompt alike" in w or "swaps score" in w for w in card_warnings((tmp_path / "r" / "README.md").read_text())
    )


class VectorEncoder:
    """Vectors from two functions of the image's sample id and of the text."""

    runs_locally = False
    needs_image_bytes = False
    identity = ModelIdentity(
        backend="open_clip", model_id="open_clip--stub", name="stub", weights_sha256=None, device="cpu",
        precision="fp32",
    )  # fmt: skip

    def __init__(self, image: Callable[[str], np.ndarray], text: Callable[[str], np.ndarray]) -> None:
        self.image, self.text = image, text

    def image_vectors(self, images: Sequence[ImageRef], progress: Callable[[int], None] | None = None) -> np.ndarray:
        return np.stack([self.image(ref.image_id) for ref in images])

    def text_vectors(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.text(t) for t in texts])


def _random(key: str) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little")
    return np.random.default_rng(seed).normal(size=8)


def test_swaps_that_score_as_their_original_are_not_a_fair_model(tmp_path: Path) -> None:
    release = Release.open(mixcube_copy(tmp_path / "mixcube"))
    rows = release.table("default", ["sample_id", "original_id"]).to_pylist()
    original = {r["sample_id"]: r["original_id"] for r in rows}
    # Every swap gets its original's vector (the originals differ from each other).
    part = audit.evaluate_audit(release, VectorEncoder(lambda i: _random(original[i]), _random), n_resamples=0, seed=0)
    ties = part.metrics["ties"]
    assert ties["swaps"] == ties["n_swaps"] > 0 and ties["all_images_alike"] is False
    (warning,) = [w for w in part.warnings if "swaps score every prompt" in w]
    assert warning.startswith(f"{ties['swaps']} of {ties['n_swaps']} swaps") and "MaxSkew near 0" in warning
    assert part.warnings[0].startswith("These numbers are meaningless:")  # the placeholders' warning stays first


def test_prompt_vectors_that_tie_leave_the_harm_rates_to_the_prompt_order(tmp_path: Path) -> None:
    release = Release.open(mixcube_copy(tmp_path / "mixcube"))
    n = release.table("default", ["sample_id"]).num_rows
    same = _random("one prompt")
    part = audit.evaluate_audit(release, VectorEncoder(_random, lambda t: same), n_resamples=0, seed=0)
    top1 = part.metrics["ties"]["top1"]
    assert top1["en"] == dict.fromkeys(PROMPT_SETS, n)
    (warning,) = [w for w in part.warnings if "tied its runner-up" in w]
    languages = ", ".join(default_pack().prompts().languages)
    assert f"of the {n} images" in warning and f"crime in {languages}" in warning
    assert "%NA, %NC, %C, %NH" in warning and "not measured" in warning
