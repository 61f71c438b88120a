"""The MixCuBe per-item stage work outside the flow: faces, masks and filter rows from in-memory fakes (a dict blob
store, a detector, a masker and a scorer that record their calls), and what the originals configs tell the flow."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

from collectors.mixcube_originals import DemoOriginalsConfig, LocalOriginalsConfig, cells
from collectors.mixcube_search import SearchOriginalsConfig
from curation.filter_rows import filter_stats, filters_table
from curation.synthesis_filters import ERROR, KEEP, REJECT_BRISQUE
from data import schemas
from data.reference import MixCubeCulture, default_pack
from data.schemas import STATUS_FAILED, STATUS_OK
from synthesis.face_rows import decode_rgb, faces_table
from synthesis.faces import FaceBox
from synthesis.mask_rows import masks_table
from synthesis.masks import mask_from_png

# ---------------------------------------------------------------- fakes


class Blobs:
    """A content-addressed dict that counts reads per blob."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.reads: dict[str, int] = {}

    def put(self, data: bytes) -> str:
        sha = hashlib.sha256(data).hexdigest()
        self.data[sha] = data
        return sha

    def get(self, sha: str) -> bytes:
        self.reads[sha] = self.reads.get(sha, 0) + 1
        return self.data[sha]


def png(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def picture(value: int, height: int = 24, width: int = 32) -> np.ndarray:
    return np.full((height, width, 3), value, dtype=np.uint8)


BOX = FaceBox(x=4, y=5, w=10, h=8, score=0.75)  # float32-exact: the schema stores scores as float32


class FakeDetector:
    name = "fake"
    model_id = "fake-detector:v1"

    def __init__(self, answers: dict[int, list[FaceBox] | Exception]) -> None:
        self.answers = answers  # the image's first pixel value -> its boxes, or what the model raises
        self.seen: list[tuple[int, ...]] = []

    def detect(self, image_rgb: np.ndarray) -> list[FaceBox]:
        self.seen.append(image_rgb.shape)
        answer = self.answers[int(image_rgb[0, 0, 0])]
        if isinstance(answer, Exception):
            raise answer
        return answer


class FakeMasker:
    name = "fake"
    model_id = "fake-masker:v1"

    def __init__(self, empty: bool = False, fail: Exception | None = None) -> None:
        self.empty, self.fail = empty, fail
        self.calls: list[tuple[tuple[int, ...], list[FaceBox]]] = []
        self.in_slot: list[bool] = []
        self.slot: Slot | None = None

    def box_masks(self, image_rgb: np.ndarray, boxes: list[FaceBox]) -> np.ndarray:
        raise AssertionError("the stage asks for the union only")

    def mask(self, image_rgb: np.ndarray, boxes: list[FaceBox], *, feather: bool = True) -> np.ndarray:
        self.calls.append((image_rgb.shape, boxes))
        self.in_slot.append(self.slot is not None and self.slot.inside)
        if self.fail is not None:
            raise self.fail
        mask = np.zeros(image_rgb.shape[:2], dtype=np.uint8)
        if not self.empty:
            for box in boxes:
                x0, y0, x1, y1 = box.xyxy()
                mask[y0:y1, x0:x1] = 255
        return mask


class FakeScorer:
    brisque_backend = "fake-brisque:v1"
    clip_backend = "off"

    def __init__(self, slot: Slot | None = None) -> None:
        self.calls: list[list[tuple[bytes, bytes]]] = []
        self.slot = slot
        self.in_slot: list[bool] = []

    def score(self, pairs: Sequence[tuple[bytes, bytes]]) -> list[dict]:
        self.calls.append(list(pairs))
        self.in_slot.append(self.slot is not None and self.slot.inside)
        rows = []
        for _, synthesized in pairs:
            brisque = float(len(synthesized) % 97)
            verdict = KEEP if synthesized.startswith(b"good") else REJECT_BRISQUE
            rows.append(
                {
                    "brisque": brisque,
                    "clip_similarity": None,
                    "brisque_backend": self.brisque_backend,
                    "clip_backend": self.clip_backend,
                    "verdict": verdict,
                    "reason": None if verdict == KEEP else "brisque too high",
                }
            )
        return rows


class Slot:
    """A device slot that records how often it was entered and whether work ran inside it."""

    def __init__(self) -> None:
        self.entered = 0
        self.inside = False

    @contextmanager
    def __call__(self) -> Iterator[None]:
        self.entered += 1
        self.inside = True
        try:
            yield
        finally:
            self.inside = False


def getter(model: object) -> tuple[object, list[int]]:
    """A lazily-built model stand-in, and the list that counts its calls."""
    calls: list[int] = []

    def get() -> object:
        calls.append(1)
        return model

    return get, calls


# ---------------------------------------------------------------- faces


def test_faces_one_row_per_original_with_its_reason() -> None:
    blobs = Blobs()
    detector = FakeDetector({10: [BOX], 20: RuntimeError("model crashed"), 30: []})
    originals = [
        {"original_id": "ok", "sha256": blobs.put(png(picture(10)))},
        {"original_id": "corrupt", "sha256": blobs.put(b"\x89PNG this is no image")},
        {"original_id": "crash", "sha256": blobs.put(png(picture(20)))},
        {"original_id": "nobody", "sha256": blobs.put(png(picture(30)))},
    ]
    table = faces_table(originals, lambda: detector, blobs.get)

    assert table.schema == schemas.MIXCUBE_FACES
    rows = table.to_pylist()
    assert [r["original_id"] for r in rows] == ["ok", "corrupt", "crash", "nobody"]
    assert {r["detector"] for r in rows} == {"fake-detector:v1"}
    ok, corrupt, crash, nobody = rows
    assert (ok["status"], ok["error"], ok["detail"]) == (STATUS_OK, None, None)
    assert ok["boxes"] == [BOX.model_dump()]
    assert (corrupt["status"], corrupt["error"]) == (STATUS_FAILED, "not_an_image")
    assert corrupt["detail"].startswith("UnidentifiedImageError: ") and corrupt["boxes"] is None
    assert (crash["status"], crash["error"], crash["detail"]) == (
        STATUS_FAILED,
        "detector_error",
        "RuntimeError: model crashed",
    )
    assert (nobody["status"], nobody["error"], nobody["detail"]) == (STATUS_FAILED, "no_face", "no face detected")
    assert detector.seen == [(24, 32, 3)] * 3  # the corrupt blob never reached the model


def test_faces_detector_sees_rgb_pixels_and_the_detail_is_cut() -> None:
    blobs = Blobs()
    grey = Image.fromarray(np.full((12, 16), 10, dtype=np.uint8), mode="L")
    buffer = io.BytesIO()
    grey.save(buffer, format="PNG")
    detector = FakeDetector({10: ValueError("x" * 1000)})
    table = faces_table([{"original_id": "grey", "sha256": blobs.put(buffer.getvalue())}], lambda: detector, blobs.get)
    assert detector.seen == [(12, 16, 3)]  # a greyscale file is decoded to 3 channels
    (row,) = table.to_pylist()
    assert row["error"] == "detector_error" and len(row["detail"]) == 300


def test_faces_empty_shard_builds_no_detector() -> None:
    get, calls = getter(FakeDetector({}))
    table = faces_table([], get, Blobs().get)
    assert table.num_rows == 0 and table.schema == schemas.MIXCUBE_FACES
    assert calls == []


def test_decode_rgb_gives_uint8_rgb() -> None:
    rgba = np.zeros((5, 7, 4), dtype=np.uint8)
    rgba[..., 0] = 200
    pixels = decode_rgb(png(rgba))
    assert pixels.shape == (5, 7, 3) and pixels.dtype == np.uint8 and pixels[0, 0, 0] == 200


# ---------------------------------------------------------------- masks


def face_row(original_id: str, boxes: list[FaceBox]) -> dict:
    return {"original_id": original_id, "boxes": [b.model_dump() for b in boxes]}


def test_masks_store_the_mask_and_its_coverage() -> None:
    blobs = Blobs()
    sha = {"a": blobs.put(png(picture(10)))}
    masker, slot = FakeMasker(), Slot()
    masker.slot = slot
    table = masks_table([face_row("a", [BOX])], lambda: masker, sha, blobs.get, blobs.put, slot)

    assert table.schema == schemas.MIXCUBE_MASKS
    (row,) = table.to_pylist()
    assert (row["status"], row["error"], row["masker"]) == (STATUS_OK, None, "fake-masker:v1")
    assert row["coverage"] == pytest.approx(10 * 8 / (24 * 32))
    mask = mask_from_png(blobs.data[row["mask_sha256"]])
    assert mask.shape == (24, 32) and int(mask.sum()) == 255 * 10 * 8
    assert masker.calls == [((24, 32, 3), [BOX])]  # boxes come back as FaceBox
    assert slot.entered == 1 and masker.in_slot == [True]


def test_all_zero_mask_is_an_empty_mask_row_and_stores_nothing() -> None:
    blobs = Blobs()
    sha = {"a": blobs.put(png(picture(10)))}
    stored = set(blobs.data)
    table = masks_table([face_row("a", [BOX])], lambda: FakeMasker(empty=True), sha, blobs.get, blobs.put)
    (row,) = table.to_pylist()
    assert (row["status"], row["error"], row["detail"]) == (STATUS_FAILED, "empty_mask", "mask is empty")
    assert row["mask_sha256"] is None and row["coverage"] is None
    assert set(blobs.data) == stored


def test_masker_failures_are_rows_and_the_shard_goes_on() -> None:
    blobs = Blobs()
    sha = {"a": blobs.put(png(picture(10))), "corrupt": blobs.put(b"not an image")}
    faces = [face_row("a", [BOX]), face_row("corrupt", [BOX]), face_row("unknown", [BOX])]
    failing = masks_table(faces[:1], lambda: FakeMasker(fail=RuntimeError("sam died")), sha, blobs.get, blobs.put)
    (row,) = failing.to_pylist()
    assert (row["status"], row["error"], row["detail"]) == (STATUS_FAILED, "masker_error", "RuntimeError: sam died")

    rows = masks_table(faces, lambda: FakeMasker(), sha, blobs.get, blobs.put).to_pylist()
    assert [(r["original_id"], r["status"], r["error"]) for r in rows] == [
        ("a", STATUS_OK, None),
        ("corrupt", STATUS_FAILED, "masker_error"),  # the blob does not decode
        ("unknown", STATUS_FAILED, "masker_error"),  # no original blob for it
    ]
    assert rows[1]["detail"].startswith("UnidentifiedImageError: ") and rows[2]["detail"] == "KeyError: 'unknown'"


def test_masks_empty_shard_builds_no_masker_but_holds_the_slot() -> None:
    get, calls = getter(FakeMasker())
    slot = Slot()
    table = masks_table([], get, {}, Blobs().get, Blobs().put, slot)
    assert table.num_rows == 0 and table.schema == schemas.MIXCUBE_MASKS
    assert calls == [] and slot.entered == 1


# ---------------------------------------------------------------- filters


def attempt(original_id: str, ethnicity: str, sha256: str | None, error: str | None = None) -> dict:
    return {"attempt_id": f"{original_id}-{ethnicity}-1", "original_id": original_id, "sha256": sha256, "error": error}


def test_failed_synthesis_is_an_error_row_with_its_reason() -> None:
    blobs = Blobs()
    sha = {"o": blobs.put(b"original")}
    attempts = [
        attempt("o", "african", blobs.put(b"good african")),
        attempt("o", "eastasian", None, "RuntimeError: CUDA out of memory"),
        attempt("o", "white", blobs.put(b"bad white")),
    ]
    scorer = FakeScorer()
    table = filters_table(attempts, lambda: scorer, sha, blobs.get)

    assert table.schema == schemas.MIXCUBE_FILTERS
    rows = table.to_pylist()
    assert [r["attempt_id"] for r in rows] == ["o-african-1", "o-eastasian-1", "o-white-1"]
    assert [r["verdict"] for r in rows] == [KEEP, ERROR, REJECT_BRISQUE]
    failed = rows[1]
    assert failed["reason"] == "synthesis failed: RuntimeError: CUDA out of memory"
    assert failed["brisque"] is None and failed["clip_similarity"] is None
    assert (failed["brisque_backend"], failed["clip_backend"]) == ("fake-brisque:v1", "off")
    assert scorer.calls == [[(b"original", b"good african"), (b"original", b"bad white")]]  # only drawn attempts


def test_failed_synthesis_reason_is_cut_to_300_characters() -> None:
    table = filters_table([attempt("o", "african", None, "E" * 1000)], lambda: FakeScorer(), {"o": "x"}, Blobs().get)
    (row,) = table.to_pylist()
    assert row["reason"] == ("synthesis failed: " + "E" * 1000)[:300]


def test_the_original_is_read_once_per_shard_for_four_attempts() -> None:
    blobs = Blobs()
    sha = {"o": blobs.put(b"original"), "p": blobs.put(b"other original")}
    ethnicities = ["african", "eastasian", "southasian", "white"]
    attempts = [attempt("o", e, blobs.put(f"good {e}".encode())) for e in ethnicities]
    attempts.append(attempt("p", "african", blobs.put(b"good p")))
    slot = Slot()
    scorer = FakeScorer(slot)
    table = filters_table(attempts, lambda: scorer, sha, blobs.get, slot)

    assert table.num_rows == 5 and set(table["verdict"].to_pylist()) == {KEEP}
    assert blobs.reads[sha["o"]] == 1 and blobs.reads[sha["p"]] == 1
    assert all(blobs.reads[a["sha256"]] == 1 for a in attempts)
    (pairs,) = scorer.calls  # one scoring call per shard, inside the device slot
    assert [original for original, _ in pairs] == [b"original"] * 4 + [b"other original"]
    assert slot.entered == 1 and scorer.in_slot == [True]


def test_filter_stats_count_verdicts() -> None:
    rows = [
        {"attempt_id": "a", "brisque": 1.0, "clip_similarity": None, "verdict": KEEP, "reason": None},
        {"attempt_id": "b", "brisque": 99.0, "clip_similarity": None, "verdict": REJECT_BRISQUE, "reason": "r"},
        {"attempt_id": "c", "brisque": None, "clip_similarity": None, "verdict": ERROR, "reason": "e"},
        {"attempt_id": "d", "brisque": None, "clip_similarity": None, "verdict": ERROR, "reason": "e"},
    ]
    backends = {"brisque_backend": "piq:w", "clip_backend": "off"}
    table = schemas.from_rows([{**r, **backends} for r in rows], schemas.MIXCUBE_FILTERS)
    stats = filter_stats("filters_r2", table)
    assert (stats.stage, stats.rows_in, stats.kept, stats.dropped) == ("filters_r2", 4, 1, 3)
    assert stats.dropped_by_reason == {REJECT_BRISQUE: 1, ERROR: 2}
    assert stats.extra == backends

    empty = filter_stats("filters_r3", schemas.empty(schemas.MIXCUBE_FILTERS))
    assert (empty.rows_in, empty.kept, empty.dropped, empty.dropped_by_reason) == (0, 0, 0, {})
    assert empty.extra == {"brisque_backend": None, "clip_backend": None}


def test_filters_table_empty_shard_is_an_empty_table() -> None:
    table = filters_table([], lambda: FakeScorer(), {}, Blobs().get)
    assert isinstance(table, pa.Table) and table.num_rows == 0 and table.schema == schemas.MIXCUBE_FILTERS


# ---------------------------------------------------------------- what the originals configs tell the flow


def names(wanted: list[tuple[MixCubeCulture, str]]) -> list[tuple[str, str]]:
    return [(culture.name, category) for culture, category in wanted]


def test_originals_configs_name_their_demo_seed_and_wanted_cells() -> None:
    mix = default_pack().mixcube()
    every = names(cells(mix, None, None))
    assert len(every) == len(mix.cultures) * len(mix.categories)

    local = LocalOriginalsConfig(root="/data", labels_csv="/data/labels.csv")
    assert local.demo_seed is None and names(local.wanted_cells(mix)) == every

    demo = DemoOriginalsConfig(seed=7, cultures=["Myanmar", "South Korea"], categories=["Food"])
    assert demo.demo_seed == 7
    assert names(demo.wanted_cells(mix)) == names(cells(mix, ["Myanmar", "South Korea"], ["Food"]))
    assert len(demo.wanted_cells(mix)) == 2
    assert DemoOriginalsConfig().demo_seed == 0 and names(DemoOriginalsConfig().wanted_cells(mix)) == every

    search = SearchOriginalsConfig(categories=["Clothes", "Festival"])
    assert search.demo_seed is None
    assert names(search.wanted_cells(mix)) == names(cells(mix, None, ["Clothes", "Festival"]))
    assert names(SearchOriginalsConfig().wanted_cells(mix)) == every

    # Nothing new is serialised: the manifest's config and the build id stay as they were.
    assert "demo_seed" not in demo.model_dump() and "wanted_cells" not in search.model_dump()
