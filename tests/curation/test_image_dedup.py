"""Concept dedup and image dedup, checked against planted ground truth."""

from __future__ import annotations

import hashlib
import io
import itertools
from pathlib import Path

import imagehash
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image, ImageDraw

from collectors.concepts import ShippedConceptsConfig, run_concepts
from curation.concept_dedup import LexicalConceptDedupConfig, normalize, run_concept_dedup
from curation.file_dedup import dedup_files
from curation.image_dedup import (
    EMBEDDING,
    EXACT_PIXEL_WINDOW,
    DedupInputs,
    EmbeddingTierConfig,
    ImageDedupConfig,
    PerceptualTierConfig,
    decide,
)
from curation.image_hashing import dhash_bulk, hamming_within, hash_batch, phash_bulk
from curation.image_thumbnails import pixel_sha256, thumbnails
from data.reference import default_pack
from data.schemas import CONCEPTS
from data.unionfind import UnionFind
from demo.corpus import DemoCorpusConfig, generate_demo_corpus


def test_shipped_concepts_are_all_distinct_at_the_default_threshold() -> None:
    decisions = run_concept_dedup(LexicalConceptDedupConfig(), run_concepts(ShippedConceptsConfig(), default_pack()))
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


def _hash_of(bits: np.ndarray) -> int:
    return int(np.packbits(bits.flatten().astype(np.uint8)).view(">u8")[0])


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_bulk_hashes_equal_imagehash_image_by_image(seed: int) -> None:
    rng = np.random.default_rng(seed)
    big = (rng.random((3, 32, 32)) * 255).astype(np.uint8)
    small = (rng.random((3, 8, 9)) * 255).astype(np.uint8)
    assert phash_bulk(big.astype(np.float32)).tolist() == [
        _hash_of(imagehash.phash(Image.fromarray(a)).hash) for a in big
    ]
    assert dhash_bulk(small.astype(np.float32)).tolist() == [
        _hash_of(imagehash.dhash(Image.fromarray(a)).hash) for a in small
    ]


def _photo(seed: int, size: tuple[int, int] = (400, 300)) -> Image.Image:
    rng = np.random.default_rng(seed)
    coarse = rng.random((6, 8, 3)) * 255
    return Image.fromarray(coarse.astype(np.uint8)).resize(size, Image.Resampling.BICUBIC)


def _encode(image: Image.Image, fmt: str, **options: object) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


@pytest.mark.parametrize("seed", range(6))
def test_a_png_resave_of_a_jpeg_hashes_within_the_exact_pixel_window(seed: int) -> None:
    """The draft decode of a JPEG and the full decode of the same pixels as PNG give near-equal pHashes."""
    jpeg = _encode(_photo(seed, (1200, 900)), "JPEG", quality=90)
    png = _encode(Image.open(io.BytesIO(jpeg)).convert("RGB"), "PNG")
    assert pixel_sha256(jpeg) == pixel_sha256(png)
    batch = hash_batch([lambda: jpeg, lambda: png], workers=2)
    assert int(batch.phash[0] ^ batch.phash[1]).bit_count() <= EXACT_PIXEL_WINDOW
    assert (batch.width.tolist(), batch.height.tolist()) == ([1200, 1200], [900, 900])


def test_exif_orientation_is_applied_before_hashing() -> None:
    image = _photo(1, (300, 200))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90: stored 300x200, shown 200x300
    rotated = _encode(image, "JPEG", quality=95, exif=exif.tobytes())
    upright = _encode(image.transpose(Image.Transpose.ROTATE_270), "JPEG", quality=95)
    a, b = thumbnails(rotated), thumbnails(upright)
    assert (a.width, a.height) == (200, 300) == (b.width, b.height)
    assert (
        int(phash_bulk(np.stack([a.phash_input, b.phash_input]))[0] ^ phash_bulk(b.phash_input[None])[0]).bit_count()
        <= 4
    )


def test_an_undecodable_image_is_a_row_with_an_error() -> None:
    batch = hash_batch([lambda: b"<html>not an image</html>", lambda: _encode(_photo(2), "PNG")], workers=2)
    assert batch.errors[0] and "UnidentifiedImageError" in batch.errors[0]
    assert batch.errors[1] is None and batch.phash[1] != 0


def _inputs(n: int, **columns: object) -> DedupInputs:
    base: dict = {
        "image_ids": [f"img{k:02d}" for k in range(n)],
        "concept_ids": np.zeros(n, np.int32),
        "width": np.full(n, 100, np.int32),
        "height": np.full(n, 100, np.int32),
        "rank": np.arange(n, dtype=np.int32),
        "english": np.ones(n, bool),
    }
    base.update(columns)
    return DedupInputs(**base)


def _rows(result: object) -> dict[str, dict]:
    return {r["image_id"]: r for r in result.decisions.to_pylist()}  # type: ignore[attr-defined]


def test_perceptual_band_merges_queues_and_keeps_apart() -> None:
    # 0 and 1 differ by 3 bits (merge), 2 by 12 from 0 (band: with no thumbnails to check, people decide), 3 by 30.
    phash = np.array([0, 0b111, (1 << 12) - 1, (1 << 30) - 1], dtype=np.uint64)
    config = ImageDedupConfig(perceptual=PerceptualTierConfig(merge_max_distance=5, verify_max_distance=14))
    inputs = _inputs(4, phash=phash, dhash=np.zeros(4, np.uint64), sha256=["a", "b", "c", "d"])
    result = decide(inputs, config)
    rows = _rows(result)
    assert (
        rows["img01"]["duplicate_of"] == "img00" and rows["img01"]["method"] == "phash" and rows["img01"]["score"] == 3
    )
    assert rows["img02"]["keep"] and rows["img03"]["keep"]
    queue = result.review_queue.to_pylist()
    assert {(q["image_a"], q["image_b"]) for q in queue} == {("img00", "img02"), ("img01", "img02")}
    assert all(q["cluster_a"] == "img00" and q["cluster_b"] == "img02" for q in queue)
    decisions = {(p["image_a"], p["image_b"]): p["decision"] for p in result.pairs.to_pylist()}
    assert decisions[("img00", "img01")] == "merge" and ("img00", "img03") not in decisions
    # A layout-alike pair whose dHash disagrees is not linked at all.
    strict = config.model_copy(update={"perceptual": config.perceptual.model_copy(update={"dhash_max_distance": 2})})
    far_dhash = np.array([0, (1 << 40) - 1, 0, 0], dtype=np.uint64)
    assert _rows(decide(_inputs(4, phash=phash, dhash=far_dhash, sha256=["a", "b", "c", "d"]), strict))["img01"]["keep"]


def test_exact_pixels_are_checked_only_for_candidates_and_win_over_phash() -> None:
    calls: list[int] = []
    pixels = {0: "p", 1: "p", 2: "q", 3: "r"}

    def pixel_hash(row: int) -> str:
        calls.append(row)
        return pixels[row]

    inputs = _inputs(
        4,
        sha256=["a", "b", "c", "d"],
        phash=np.array([0, 1, 3, (1 << 40) - 1], dtype=np.uint64),
        dhash=np.zeros(4, np.uint64),
        width=np.array([100, 100, 100, 100], np.int32),
        height=np.array([100, 100, 90, 100], np.int32),
        pixel_hash=pixel_hash,
    )
    rows = _rows(decide(inputs, ImageDedupConfig()))
    assert rows["img01"]["method"] == "exact_pixels" and rows["img01"]["duplicate_of"] == "img00"
    assert rows["img02"]["method"] == "phash"  # other size: never decoded in full
    assert set(calls) == {0, 1}  # 3 is too far, 2 has another size


def test_embedding_tier_merges_above_and_queues_inside_the_band() -> None:
    v = np.zeros((4, 3), np.float32)
    v[0] = [1, 0, 0]
    v[1] = [0.99, 0.141, 0]  # cosine 0.99 with 0
    v[2] = [0.93, 0, 0.367]  # 0.93 with 0
    v[3] = [0, 1, 0]
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    tier = EmbeddingTierConfig(merge_min_cosine=0.97, review_min_cosine=0.9)
    result = decide(_inputs(4, embeddings=v.astype(np.float16)), ImageDedupConfig(embedding=tier))
    rows = _rows(result)
    assert rows["img01"]["method"] == EMBEDDING and rows["img01"]["score"] > 0.97
    assert rows["img02"]["keep"] and rows["img03"]["keep"]
    queue = result.review_queue.to_pylist()
    cosine = v @ v.T
    band = {
        (f"img{a:02d}", f"img{b:02d}") for a, b in itertools.combinations(range(4), 2) if 0.9 <= cosine[a, b] < 0.97
    }
    assert ("img00", "img02") in band and {(q["image_a"], q["image_b"]) for q in queue} == band
    assert all(0.9 <= q["embedding_cosine"] < 0.97 for q in queue)


def test_a_member_linked_only_through_another_records_a_chain() -> None:
    phash = np.array([0, 0b1111, 0b11111111], dtype=np.uint64)  # 0-1: 4, 1-2: 4, 0-2: 8
    config = ImageDedupConfig(perceptual=PerceptualTierConfig(merge_max_distance=5, verify_max_distance=6))
    rows = _rows(decide(_inputs(3, phash=phash, dhash=np.zeros(3, np.uint64)), config))
    assert rows["img02"]["duplicate_of"] == "img00" and rows["img02"]["reason"] == "near_duplicate:phash_chain"
    assert rows["img01"]["reason"] == "near_duplicate:phash" and rows["img00"]["cluster_size"] == 3


def test_keep_rule_prefers_resolution_then_rank_then_english() -> None:
    same = {"sha256": ["s"] * 3}
    rows = _rows(decide(_inputs(3, width=np.array([100, 200, 200], np.int32), rank=np.array([0, 5, 2], np.int32),
                                **same), ImageDedupConfig()))  # fmt: skip
    assert rows["img02"]["keep"] and rows["img00"]["duplicate_of"] == rows["img01"]["duplicate_of"] == "img02"
    assert rows["img00"]["method"] == "exact_bytes"
    tie = _inputs(2, rank=np.array([1, 1], np.int32), english=np.array([False, True]), sha256=["s", "s"])
    rows = _rows(decide(tie, ImageDedupConfig()))
    assert rows["img01"]["keep"] and not rows["img00"]["keep"]


def test_scope_is_the_concept_unless_global() -> None:
    inputs = _inputs(2, sha256=["s", "s"], concept_ids=np.array([0, 1], np.int32))
    assert all(decide(inputs, ImageDedupConfig()).decisions["keep"].to_pylist())
    assert decide(inputs, ImageDedupConfig(scope="global")).decisions["keep"].to_pylist() == [True, False]


@pytest.mark.slow
def test_demo_corpus_planted_duplicates_are_found_and_nothing_else(tmp_path: Path) -> None:
    """Every planted duplicate within a concept is merged into its source by the expected tier; no original is."""
    root = tmp_path / "corpus"
    config = DemoCorpusConfig(countries=["USA", "Spain", "Japan"], concepts=["train", "food"], images_per_query=3)
    truth = generate_demo_corpus(config, str(root), pack=default_pack()).model_dump()
    bad = set(truth["bad_files"])
    paths = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name != "ground_truth.json")
    paths = [p for p in paths if p not in bad]
    contents = [(root / p).read_bytes() for p in paths]
    batch = hash_batch([lambda d=d: d for d in contents])
    assert not any(batch.errors)
    inputs = _inputs(
        len(paths),
        image_ids=paths,
        concept_ids=np.array([0 if p.split("/")[1] == "train" else 1 for p in paths], np.int32),
        width=batch.width,
        height=batch.height,
        rank=np.array([int(p.rsplit("/", 1)[1][:2]) for p in paths], np.int32),
        english=np.array([p.split("/")[2] == "eng" for p in paths]),
        sha256=[hashlib.sha256(d).hexdigest() for d in contents],
        phash=batch.phash,
        dhash=batch.dhash,
        pixel_hash=lambda row: pixel_sha256(contents[row]),
    )
    rows = _rows(decide(inputs, ImageDedupConfig()))
    expected_method = {"exact_bytes": "exact_bytes", "exact_pixels": "exact_pixels", "reencode": "phash",
                       "resize": "phash", "brightness": "phash"}  # fmt: skip
    planted = set()
    for dup in truth["duplicates"]:
        copy, source = dup["path"], dup["duplicate_of"]
        if dup["kind"].startswith("cross_concept"):
            assert rows[copy]["keep"], "dedup is scoped within a concept"
            continue
        planted.add(copy)
        assert rows[copy]["duplicate_of"] == source and rows[copy]["method"] == expected_method[dup["kind"]]
        assert rows[source]["keep"]
    assert {i for i, r in rows.items() if not r["keep"]} == planted  # no distinct original was merged


def _scene(seed: int, layout_seed: int, size: tuple[int, int] = (480, 360)) -> Image.Image:
    """A textured background with shapes; the same layout_seed places the shapes alike (a hard negative)."""
    photo = _photo(seed, size)
    draw = ImageDraw.Draw(photo)
    layout = np.random.default_rng(layout_seed)
    colours = np.random.default_rng(seed + 1000)
    for _ in range(6):
        x, y = layout.integers(0, size[0] - 90), layout.integers(0, size[1] - 90)
        w, h = layout.integers(30, 90, 2)
        fill = tuple(int(c) for c in colours.integers(0, 255, 3))
        if colours.random() < 0.5:
            draw.ellipse((x, y, x + w, y + h), fill=fill)
        else:
            draw.rectangle((x, y, x + w, y + h), fill=fill)
    return photo


def test_crops_and_rotations_merge_by_alignment_and_a_same_layout_photo_does_not(tmp_path: Path) -> None:
    base = _scene(1, 7)
    w, h = base.size
    variants = {
        "base.jpg": base,
        "crop.jpg": base.crop((int(0.05 * w), 0, w, int(0.95 * h))),
        "rotate.jpg": base.rotate(4, resample=Image.Resampling.BICUBIC).crop((20, 15, w - 20, h - 15)),
        "sibling.jpg": _scene(2, 7),  # other texture and colours, same layout
        "other.jpg": _scene(3, 99),
    }
    paths = []
    for name, image in variants.items():
        image.save(tmp_path / name, quality=90)
        paths.append(str(tmp_path / name))
    result = dedup_files(paths)
    merged = {Path(p).name for cluster in result.clusters for p in cluster}
    assert merged == {"base.jpg", "crop.jpg", "rotate.jpg"}
    # Alignment is what tied at least one of them: pHash alone is not enough for these.
    strict = ImageDedupConfig(perceptual=PerceptualTierConfig(verify_max_distance=10))
    assert {Path(p).name for c in dedup_files(paths, strict).clusters for p in c} != merged


def test_unreadable_files_are_reported_and_never_merged(tmp_path: Path) -> None:
    paths = []
    for k, text in enumerate((b"<html>one</html>", b"<html>two</html>")):
        (tmp_path / f"page{k}.jpg").write_bytes(text)
        paths.append(str(tmp_path / f"page{k}.jpg"))
    _photo(5).save(tmp_path / "photo.png")
    result = dedup_files([*paths, str(tmp_path / "photo.png")])
    assert set(result.unreadable) == set(paths) and result.clusters == []


def test_a_full_decode_gives_its_pixel_hash_for_free_and_a_draft_does_not() -> None:
    image = _photo(6, (500, 400))
    png, jpeg = _encode(image, "PNG"), _encode(image, "JPEG", quality=90)
    batch = hash_batch([lambda: png, lambda: jpeg], workers=1)
    assert batch.pixel_sha256[0] == pixel_sha256(png) and batch.pixel_sha256[1] is None
    assert batch.sha256 == [hashlib.sha256(png).hexdigest(), hashlib.sha256(jpeg).hexdigest()]
