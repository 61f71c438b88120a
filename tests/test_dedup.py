"""Concept dedup and image dedup, checked against planted ground truth."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.concepts import ShippedConceptsConfig, run_concepts
from collectors.demo_corpus import DemoCorpusConfig, generate_demo_corpus
from collectors.image_check import ImageLimits
from collectors.importer import import_hits
from curation.concept_dedup import LexicalConceptDedupConfig, normalize, run_concept_dedup
from curation.image_dedup import DedupRecord, HashImageDedupConfig, run_image_dedup
from curation.image_hashing import hamming_within, hash_images
from curation.unionfind import UnionFind
from data.schemas import CONCEPTS
from data.workspace import Workspace


def test_shipped_concepts_are_all_distinct_at_the_default_threshold() -> None:
    decisions = run_concept_dedup(LexicalConceptDedupConfig(), run_concepts(ShippedConceptsConfig()))
    assert all(decisions["keep"].to_pylist())
    # The closest shipped pair is reported with its score, below the threshold.
    assert max(decisions["score"].to_pylist()) < LexicalConceptDedupConfig().threshold


def test_near_identical_concept_names_merge_into_the_lowest_id() -> None:
    names = {0: "train", 1: "bus station", 2: "Trains", 3: "train_station", 4: "train station", 5: "wedding"}
    table = pa.Table.from_pylist(
        [{"concept_id": i, "concept": n, "source": "operator"} for i, n in names.items()], schema=CONCEPTS
    )
    rows = {r["concept_id"]: r for r in run_concept_dedup(LexicalConceptDedupConfig(), table).to_pylist()}
    assert rows[2]["duplicate_of"] == 0 and not rows[2]["keep"]
    assert rows[4]["duplicate_of"] == 3 and rows[4]["score"] >= 0.9
    assert all(rows[i]["keep"] for i in (0, 1, 3, 5))
    assert rows[1]["duplicate_of"] is None  # "bus station" is not "train station"
    assert normalize("Train_Stations!") == "train station"


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=2**64 - 1), min_size=0, max_size=60), st.integers(0, 20),
       st.integers(1, 16))  # fmt: skip
def test_blocked_hamming_matches_brute_force(values: list[int], max_distance: int, block: int) -> None:
    hashes = np.array(values, dtype=np.uint64)
    i, j, d = hamming_within(hashes, max_distance, block=block)
    got = sorted(zip(i.tolist(), j.tolist(), d.tolist(), strict=True))
    expected = sorted(
        (a, b, (values[a] ^ values[b]).bit_count())
        for a, b in itertools.combinations(range(len(values)), 2)
        if (values[a] ^ values[b]).bit_count() <= max_distance
    )
    assert got == expected


def test_union_find_groups_transitively() -> None:
    uf = UnionFind(6)
    uf.union(0, 1)
    uf.union(1, 2)
    uf.union(4, 5)
    assert sorted(sorted(g) for g in uf.groups().values()) == [[0, 1, 2], [3], [4, 5]]


def _planted_records(tmp_path: Path) -> tuple[list[DedupRecord], dict[str, str], dict]:
    """Generate the demo corpus, import it and hash it; map corpus paths to record ids."""
    root = tmp_path / "corpus"
    config = DemoCorpusConfig(countries=["USA", "Spain", "Japan"], concepts=["train", "food"], images_per_query=3)
    truth = generate_demo_corpus(config, str(root))
    ws = Workspace(str(tmp_path / "ws"), "b")
    paths = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name != "ground_truth.json")
    hits = [{"image_id": f"img{i}", "url": str(root / p)} for i, p in enumerate(paths)]
    images = import_hits(hits, ws.blobs, ImageLimits()).to_pylist()
    stored = [r for r in images if r["status"] == "ok"]
    hashes = {r["image_id"]: r for r in hash_images(stored, ws.blobs).to_pylist()}
    id_of = {p: f"img{i}" for i, p in enumerate(paths)}
    records = []
    for i, path in enumerate(paths):
        image = images[i]
        if image["status"] != "ok":
            continue
        _, concept, lang, name = path.split("/")
        records.append(
            DedupRecord(
                **hashes[image["image_id"]],
                concept_id=0 if concept == "train" else 1,
                width=image["width"],
                height=image["height"],
                rank=int(name[:2]),
                query_lang=lang,
            )
        )
    errors = {id_of[p]: e for p, e in truth.bad_files.items()}
    assert {r["image_id"]: r["error"] for r in images if r["status"] != "ok"} == errors  # every bad file classified
    return records, id_of, truth.model_dump()


def test_image_dedup_finds_every_planted_duplicate_and_nothing_else(tmp_path: Path) -> None:
    records, id_of, truth = _planted_records(tmp_path)
    rows = {r["image_id"]: r for r in run_image_dedup(HashImageDedupConfig(), records).to_pylist()}
    expected_method = {"exact_bytes": "exact_bytes", "exact_pixels": "exact_pixels", "reencode": "phash",
                       "resize": "phash", "brightness": "phash"}  # fmt: skip
    dropped = {i for i, r in rows.items() if not r["keep"]}
    planted = set()
    for dup in truth["duplicates"]:
        copy, source = id_of[dup["path"]], id_of[dup["duplicate_of"]]
        if dup["kind"] == "cross_concept_copy":
            assert rows[copy]["keep"], "dedup is scoped within a concept"
            continue
        planted.add(copy)
        row = rows[copy]
        assert row["duplicate_of"] == source and row["method"] == expected_method[dup["kind"]]
        assert row["cluster_id"] == source and rows[source]["keep"]
    assert dropped == planted  # no distinct original was merged


def test_keep_rule_prefers_resolution_then_rank(tmp_path: Path) -> None:
    base = {"concept_id": 0, "sha256": "s", "pixel_sha256": "p", "phash": 0, "query_lang": "nav"}
    small_first = DedupRecord(image_id="a", width=100, height=100, rank=0, **base)
    large_later = DedupRecord(image_id="b", width=200, height=100, rank=5, **base)
    rows = {r["image_id"]: r for r in run_image_dedup(HashImageDedupConfig(), [small_first, large_later]).to_pylist()}
    assert rows["b"]["keep"] and rows["a"]["duplicate_of"] == "b"
    same_size = [DedupRecord(image_id=i, width=100, height=100, rank=r, **base) for i, r in (("x", 3), ("y", 1))]
    rows = {r["image_id"]: r for r in run_image_dedup(HashImageDedupConfig(), same_size).to_pylist()}
    assert rows["y"]["keep"] and rows["x"]["duplicate_of"] == "y"


def test_global_scope_merges_across_concepts(tmp_path: Path) -> None:
    base = {"sha256": "s", "pixel_sha256": "p", "phash": 7, "width": 10, "height": 10, "query_lang": "eng"}
    records = [DedupRecord(image_id="a", concept_id=0, rank=0, **base),
               DedupRecord(image_id="b", concept_id=1, rank=1, **base)]  # fmt: skip
    assert all(run_image_dedup(HashImageDedupConfig(scope="concept"), records)["keep"].to_pylist())
    merged = run_image_dedup(HashImageDedupConfig(scope="global"), records).to_pylist()
    assert [r["keep"] for r in merged] == [True, False]
