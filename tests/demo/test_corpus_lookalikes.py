"""The demo corpus's look-alikes (another viewpoint, night; 3XCM paper App. J) give the human review something to
decide: the image dedup leaves each with its source in the review queue, merges neither, and nothing else moves."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from data.reference import default_pack
from data.workspace import Workspace
from demo.corpus import LOOKALIKE_KINDS, DemoCorpusConfig, GroundTruth, generate_demo_corpus
from flows.xcm.config import Build3XCMConfig
from flows.xcm.stages import STAGES, run_stage


@dataclass(frozen=True)
class DedupOutcome:
    """What the build decided, with image ids mapped back to their corpus paths."""

    truth: GroundTruth
    queue: dict[frozenset[str], dict]  # {path_a, path_b} -> review_queue row
    decisions: dict[str, dict]  # path -> image_dedup row (ids in it mapped to paths as well)


def _build_to_dedup(config: Build3XCMConfig) -> DedupOutcome:
    names = [stage.name for stage in STAGES]
    for name in names[: names.index("image_dedup") + 1]:
        run_stage(name, config)
    ws = Workspace(config.workspace_root, config.resolved_build_id())
    corpus = Path(ws.file_path("demo_corpus"))
    truth = GroundTruth.model_validate_json((corpus / "ground_truth.json").read_text())
    path_of = {
        row["image_id"]: str(Path(row["url"]).relative_to(corpus))
        for row in ws.read_table("search").to_pylist()
        if row["url"]
    }
    queue = {
        frozenset((path_of[row["image_a"]], path_of[row["image_b"]])): row
        for row in ws.read_extra_table("image_dedup", "review_queue").to_pylist()
    }
    decisions = {}
    for row in ws.read_table("image_dedup").to_pylist():
        ids = ("image_id", "cluster_id", "duplicate_of")
        decisions[path_of[row["image_id"]]] = {k: path_of.get(v, v) if k in ids else v for k, v in row.items()}
    return DedupOutcome(truth, queue, decisions)


def _without_lookalikes(config: Build3XCMConfig, root: Path) -> Build3XCMConfig:
    corpus = config.demo_corpus.model_copy(update={"plant_lookalikes": False})
    return config.model_copy(update={"workspace_root": str(root), "demo_corpus": corpus})


@pytest.mark.slow
def test_lookalikes_are_queued_for_review_kept_and_move_nothing_else(
    small_demo_config: Build3XCMConfig, tmp_path: Path
) -> None:
    config = small_demo_config
    tier = config.image_dedup.perceptual
    built = _build_to_dedup(config)
    lookalikes = built.truth.lookalikes
    # Every concept got one or two, of the planned kinds, and they are no planted duplicates.
    per_concept = {concept: [la for la in lookalikes if la.path.split("/")[1] == concept] for concept in
                   config.demo_corpus.concepts}  # fmt: skip
    assert all(1 <= len(found) <= len(LOOKALIKE_KINDS) for found in per_concept.values()), per_concept
    assert {la.kind for la in lookalikes} == set(LOOKALIKE_KINDS)
    assert not {la.path for la in lookalikes} & {d.path for d in built.truth.duplicates}
    for la in lookalikes:
        row = built.queue.get(frozenset((la.path, la.duplicate_of)))
        assert row is not None, f"{la.kind} look-alike {la.path} is not in the review queue with its source"
        # Checked by alignment (past the direct pHash merge) and left in the band between review and merge.
        assert tier.merge_max_distance < row["phash_distance"] <= tier.verify_max_distance, row
        assert tier.align_review_min <= row["aligned_correlation"] < tier.align_merge_min, row
        mine, source = built.decisions[la.path], built.decisions[la.duplicate_of]
        assert mine["keep"] and source["keep"], (mine, source)
        assert mine["cluster_id"] != source["cluster_id"] and mine["duplicate_of"] is None

    # The same build without them: every other image keeps its fate, and the queue held nothing else.
    plain = _build_to_dedup(_without_lookalikes(config, tmp_path / "without"))
    assert not plain.truth.lookalikes and plain.truth.duplicates == built.truth.duplicates
    planted = {la.path for la in lookalikes}
    assert {p: d for p, d in built.decisions.items() if p not in planted} == plain.decisions
    assert set(built.queue) - set(plain.queue) == {frozenset((la.path, la.duplicate_of)) for la in lookalikes}
    assert set(plain.queue) <= set(built.queue)


def _files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if
            p.is_file() and p.name != "ground_truth.json"}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_lookalikes_are_added_last_and_deterministic(tmp_path: Path, seed: int) -> None:
    config = DemoCorpusConfig(countries=["USA", "Spain", "Japan"], concepts=["train", "food"], images_per_query=2,
                              seed=seed)  # fmt: skip
    truth = generate_demo_corpus(config, str(tmp_path / "a"), pack=default_pack())
    again = generate_demo_corpus(config, str(tmp_path / "b"), pack=default_pack())
    without = generate_demo_corpus(
        config.model_copy(update={"plant_lookalikes": False}), str(tmp_path / "c"), pack=default_pack()
    )
    files, files_again, files_without = _files(tmp_path / "a"), _files(tmp_path / "b"), _files(tmp_path / "c")
    assert truth == again and files == files_again  # the seed decides everything
    assert truth.lookalikes and not without.lookalikes
    planted = {la.path for la in truth.lookalikes}
    # Planting them renames, rewrites or reorders nothing that was there without them.
    assert {p: h for p, h in files.items() if p not in planted} == files_without
    assert truth.model_dump(exclude={"lookalikes"}) == without.model_dump(exclude={"lookalikes"})
    written = json.loads((tmp_path / "a" / "ground_truth.json").read_text())
    assert {la["path"] for la in written["lookalikes"]} == planted
    for la in truth.lookalikes:
        folder = la.path.rsplit("/", 1)[0]
        assert la.duplicate_of in truth.originals and la.duplicate_of.rsplit("/", 1)[0] == folder
        assert files[la.path] != files[la.duplicate_of]
        # Sorted after everything else in its folder, so the search ranks of the other files stay as they were.
        others = sorted(p for p in files if p.rsplit("/", 1)[0] == folder and p not in planted)
        assert all(la.path > other for other in others)
