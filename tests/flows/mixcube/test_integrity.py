"""What MixCuBe takes in: EXIF orientation applied once at ingest (every stage and the release see the same
upright pixels, the received bytes' sha256 kept), and a labels CSV that cannot reach outside its folder (every bad
row a row with its reason, an unreadable CSV one clear error)."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image

import collectors.mixcube_originals as originals_mod
import synthesis.inpaint
from collectors.mixcube_originals import LocalOriginalsConfig, collect_originals, culture_by_name, demo_scene
from data.reference import default_pack
from data.schemas import STATUS_OK
from data.workspace import Workspace
from flows.mixcube.build import build_locally
from flows.mixcube.config import BuildMixCubeConfig
from flows.mixcube.stages import GRAPH
from tests.collectors.test_mixcube_search import search_originals
from tests.collectors.test_search_ddgs import body, fake_engine
from tests.support.fake_image_host import FakeImageHost

MIX = default_pack().mixcube()  # the shipped MixCuBe reference
ORIENTATION = 0x0112  # EXIF tag 274
# The transpose that stores an upright picture under EXIF orientation n: the inverse of what a reader applies to
# show it (EXIF 2.32 §4.6.4; Pillow's exif_transpose applies 6 as ROTATE_270 and 8 as ROTATE_90).
STORE = {
    1: None,
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_90,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_270,
}
UPRIGHT_SIZE = (640, 480)  # demo_scene's size: landscape, so a sideways decode is 480x640


def stored_as(upright: Image.Image, orientation: int, fmt: str = "JPEG") -> bytes:
    """`upright` as a camera writes it: pixels stored turned, and the EXIF tag saying how to turn them back."""
    transpose = STORE[orientation]
    stored = upright if transpose is None else upright.transpose(transpose)
    exif = Image.Exif()
    exif[ORIENTATION] = orientation
    buffer = io.BytesIO()
    stored.save(buffer, format=fmt, exif=exif.tobytes(), **({"quality": 95} if fmt == "JPEG" else {}))
    return buffer.getvalue()


def scene() -> Image.Image:
    return demo_scene(culture_by_name(MIX, "UK"), "Food", 0, 0)


def raw_decode(data: bytes) -> Image.Image:
    """The pixels as stored, the way a reader that ignores EXIF sees them (the faces, masks and inpainting inputs
    were decoded so before the fix)."""
    with Image.open(io.BytesIO(data)) as image:
        assert image.getexif().get(ORIENTATION, 1) == 1, "an orientation tag left for a reader to apply again"
        return image.convert("RGB")


def mean_difference(a: Image.Image, b: Image.Image) -> float:
    assert a.size == b.size, (a.size, b.size)
    return float(np.abs(np.asarray(a, np.int16) - np.asarray(b, np.int16)).mean())


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_labels(folder: Path, files: list[str]) -> Path:
    labels = folder / "labels.csv"
    labels.write_text("image_file,culture,category,food_label\n" + "".join(f"{f},UK,Food,Tea\n" for f in files))
    return labels


# -- orientation at ingest -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("orientation", range(1, 9))
def test_every_exif_orientation_is_applied_once_and_losslessly(tmp_path: Path, orientation: int) -> None:
    upright = scene()
    received = stored_as(upright, orientation, fmt="PNG")  # a lossless container: the pixels must match exactly
    (tmp_path / "photo.png").write_bytes(received)
    ws = Workspace(str(tmp_path / "ws"), "mixcube-orientation")
    config = LocalOriginalsConfig(root=str(tmp_path), labels_csv=str(write_labels(tmp_path, ["photo.png"])))
    row = collect_originals(config, ws.blobs.put, MIX).to_pylist()[0]
    assert row["status"] == STATUS_OK and (row["width"], row["height"]) == UPRIGHT_SIZE
    assert row["received_sha256"] == sha(received)
    stored = ws.blobs.get(row["sha256"])
    assert np.array_equal(np.asarray(raw_decode(stored)), np.asarray(upright))
    if orientation == 1:  # nothing to turn: the bytes are kept as received
        assert stored == received and row["sha256"] == row["received_sha256"]
    else:
        assert row["sha256"] != row["received_sha256"] and row["format"] == "PNG"


def test_an_upright_jpeg_keeps_its_bytes_and_the_demo_records_what_it_received(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    scene().save(buffer, format="JPEG", quality=90)
    (tmp_path / "plain.jpg").write_bytes(buffer.getvalue())
    ws = Workspace(str(tmp_path / "ws"), "mixcube-upright")
    config = LocalOriginalsConfig(root=str(tmp_path), labels_csv=str(write_labels(tmp_path, ["plain.jpg"])))
    row = collect_originals(config, ws.blobs.put, MIX).to_pylist()[0]
    assert ws.blobs.get(row["sha256"]) == buffer.getvalue() and row["received_sha256"] == row["sha256"]
    assert row["format"] == "JPEG"
    demo = collect_originals(originals_mod.DemoOriginalsConfig(per_cell=1, cultures=["UK"]), ws.blobs.put, MIX)
    assert demo["received_sha256"].to_pylist() == demo["sha256"].to_pylist()


def small_config(tmp_path: Path, originals: object) -> BuildMixCubeConfig:
    return BuildMixCubeConfig.demo(
        workspace_root=str(tmp_path / "ws"),
        originals=originals,
        release={"root": str(tmp_path / "rel"), "version": "0.0.1"},
        shard_size=4,
    )


def released_originals(release_path: str) -> dict[str, bytes]:
    """original id -> the released original's image bytes, read from the Parquet shards without any decoding."""
    out = {}
    for shard in sorted(Path(release_path, "default").glob("*.parquet")):
        for row in pq.read_table(shard, columns=["ethnicity", "original_id", "image"]).to_pylist():
            if row["ethnicity"] == "original":
                out[row["original_id"]] = row["image"]["bytes"]
    return out


@pytest.mark.slow
def test_sideways_phone_photos_are_found_masked_inpainted_and_released_upright(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    upright = scene()
    folder = tmp_path / "originals"
    folder.mkdir()
    files = {name: stored_as(upright, n) for name, n in [("upright.jpg", 1), ("side6.jpg", 6), ("side8.jpg", 8)]}
    for name, data in files.items():
        (folder / name).write_bytes(data)
    assert Image.open(folder / "side6.jpg").size == UPRIGHT_SIZE[::-1]  # stored sideways, as a phone does
    inputs: list[tuple[str, tuple[int, int], tuple[int, int]]] = []
    real = synthesis.inpaint.PlaceholderInpainter.inpaint

    def spy(self: object, requests: list) -> list:
        inputs.extend((r.original_id, r.image.size, r.mask.size) for r in requests)
        return real(self, requests)

    monkeypatch.setattr(synthesis.inpaint.PlaceholderInpainter, "inpaint", spy)
    local = {"backend": "local", "root": str(folder), "labels_csv": str(write_labels(folder, list(files)))}
    config = small_config(tmp_path, local)
    summary = build_locally(config)
    ws = GRAPH.build(config).ws

    originals = {r["source"]: r for r in ws.read_table("originals").to_pylist()}
    ids = {name: originals[name]["original_id"] for name in files}
    faces = {r["original_id"]: r for r in ws.read_table("faces").to_pylist()}
    assert {name: faces[i]["error"] for name, i in ids.items()} == dict.fromkeys(files)  # was no_face for 6 and 8
    for name, data in files.items():
        row = originals[name]
        assert row["status"] == STATUS_OK and (row["width"], row["height"]) == UPRIGHT_SIZE
        assert row["received_sha256"] == sha(data)  # provenance: the bytes as the curators handed them over
        assert mean_difference(raw_decode(ws.blobs.get(row["sha256"])), upright) < 3.0, name
    (face,) = faces[ids["upright.jpg"]]["boxes"]
    for name in ("side6.jpg", "side8.jpg"):  # the same face, where it is in the upright photo
        boxes = faces[ids[name]]["boxes"]
        assert any(abs(b["x"] - face["x"]) <= 8 and abs(b["y"] - face["y"]) <= 8 for b in boxes), (name, boxes)
    for mask in ws.read_table("masks").to_pylist():
        assert raw_decode(ws.blobs.get(mask["mask_sha256"])).size == UPRIGHT_SIZE
    assert sorted(original for original, *_ in inputs) == sorted(list(ids.values()) * 4)
    assert {(image, mask) for _, image, mask in inputs} == {(UPRIGHT_SIZE, UPRIGHT_SIZE)}
    for attempt in ws.read_table("synthesis_r1").to_pylist():
        assert raw_decode(ws.blobs.get(attempt["sha256"])).size == UPRIGHT_SIZE

    released = released_originals(summary.release_path)
    assert set(released) == set(ids.values())
    for name, original_id in ids.items():
        image = raw_decode(released[original_id])  # no orientation tag: every reader sees these pixels
        assert mean_difference(image, upright) < 3.0, name
    assert released[ids["upright.jpg"]] == files["upright.jpg"]  # an upright JPEG is released byte for byte


def test_sideways_search_hits_are_turned_upright_at_ingest(tmp_path: Path) -> None:
    upright = scene()
    served = stored_as(upright, 6)
    host = FakeImageHost(corpus=[served]).start()
    try:

        def answer(params: dict) -> str:
            url = host.url("/img/0/a.jpg")
            return body([{"title": "t", "image": url, "url": url, "height": 1, "width": 1}])

        originals = search_originals(per_cell=1, cultures=["UK"], categories=["Food"])
        config = small_config(tmp_path, originals)
        with fake_engine(answer):
            summary = build_locally(config)
    finally:
        host.stop()
    ws = GRAPH.build(config).ws
    (row,) = ws.read_table("originals").to_pylist()
    assert row["status"] == STATUS_OK and (row["width"], row["height"]) == UPRIGHT_SIZE
    assert row["received_sha256"] == sha(served) and ws.blobs.get(row["received_sha256"]) == served
    assert mean_difference(raw_decode(ws.blobs.get(row["sha256"])), upright) < 3.0
    assert ws.read_table("faces")["status"].to_pylist() == [STATUS_OK]
    (released,) = released_originals(summary.release_path).values()
    assert mean_difference(raw_decode(released), upright) < 3.0


# -- the labels CSV stays inside its folder ---------------------------------------------------------------------


def image_bytes(colour: tuple[int, int, int]) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (200, 160), colour).save(buffer, format="JPEG")
    return buffer.getvalue()


INSIDE = image_bytes((200, 120, 40))
OUTSIDE = image_bytes((10, 200, 90))


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """root/ with images, a folder, links in and out; outside/ beside it holds an image that must never be read."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.jpg").write_bytes(OUTSIDE)
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "kimchi.jpg").write_bytes(INSIDE)
    (root / "sub" / "inner.jpg").write_bytes(INSIDE)
    (root / "escape.jpg").symlink_to(outside / "x.jpg")
    (root / "outdir").symlink_to(outside, target_is_directory=True)
    (root / "inside_link.jpg").symlink_to(root / "kimchi.jpg")
    os.mkfifo(root / "pipe.jpg")  # reading it would block forever
    return tmp_path


def collect(tree: Path, lines: list[str]) -> tuple[list[dict], list[bytes]]:
    labels = tree / "labels.csv"
    labels.write_text("image_file,culture,category,food_label\n" + "".join(line + "\n" for line in lines))
    stored: list[bytes] = []

    def put(data: bytes) -> str:
        stored.append(data)
        return sha(data)

    table = collect_originals(LocalOriginalsConfig(root=str(tree / "root"), labels_csv=str(labels)), put, MIX)
    return table.to_pylist(), stored


BAD_ROWS = [
    ("../outside/x.jpg,UK,Food,", "path_outside_root"),
    ("../../../../../../etc/passwd,UK,Food,", "path_outside_root"),
    ("/etc/passwd,UK,Food,", "path_outside_root"),
    ("{root}/kimchi.jpg,UK,Food,", "path_outside_root"),  # absolute, even inside the root
    ("sub/../../outside/x.jpg,UK,Food,", "path_outside_root"),
    ("..\\outside\\x.jpg,UK,Food,", "path_outside_root"),
    ("file://{tree}/outside/x.jpg,UK,Food,", "path_outside_root"),
    ("escape.jpg,UK,Food,", "path_outside_root"),  # a symlink out of the root
    ("outdir/x.jpg,UK,Food,", "path_outside_root"),  # through a linked folder
    ("sub,UK,Food,", "not_a_file"),
    ("sub/,UK,Food,", "not_a_file"),
    ("pipe.jpg,UK,Food,", "not_a_file"),
    (",UK,Food,", "empty_path"),
    ("  ,UK,Food,", "empty_path"),
    ("gone.jpg,UK,Food,", "missing_file"),
    ("kimchi.jpg,Atlantis,Food,", "bad_label"),
    ("kimchi.jpg,UK,Sports,", "bad_label"),
    ("kimchi.jpg,UK", "short_row"),
    ("kimchi.jpg", "short_row"),
    ("kimchi.jpg,UK,Food,Tea,Scones", "long_row"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("line", "error"), BAD_ROWS, ids=[f"{e}:{line.split(',')[0]}" for line, e in BAD_ROWS])
def test_a_bad_labels_row_is_a_row_with_its_reason(tree: Path, line: str, error: str) -> None:
    line = line.format(root=tree / "root", tree=tree)
    rows, stored = collect(tree, ["kimchi.jpg,UK,Food,Tea", line])
    assert rows[0]["status"] == STATUS_OK  # one bad row costs only itself
    assert len(rows) == 2 and rows[1]["status"] == "failed"
    assert rows[1]["error"].split(":")[0] == error, rows[1]["error"]
    assert rows[1]["sha256"] is None and rows[1]["source"] == line.split(",")[0]
    assert OUTSIDE not in stored  # nothing outside the root was read into the workspace


GOOD_PATHS = ["kimchi.jpg", "./kimchi.jpg", "sub/inner.jpg", "sub/../kimchi.jpg", "sub//inner.jpg", "inside_link.jpg"]


@pytest.mark.parametrize("path", GOOD_PATHS)
def test_paths_that_stay_inside_the_root_are_read(tree: Path, path: str) -> None:
    rows, stored = collect(tree, [f"{path},UK,Food,Tea"])
    assert rows[0]["status"] == STATUS_OK, rows[0]["error"]
    assert stored == [INSIDE] and rows[0]["source"] == path


LATIN_1 = "image_file,culture,category\nk\xe4se.jpg,Germany,Food\n".encode("latin-1")
UNREADABLE = {  # the labels CSV's content (None: no file; "folder": a folder in its place) -> the error's text
    "latin-1": (LATIN_1, r"not UTF-8 .*byte 0xe4 at offset 29"),
    "missing": (None, "does not exist"),
    "folder": ("folder", "is a folder"),
    "empty": (b"", "missing columns"),
    "no-columns": (b"file,country\nx.jpg,UK\n", r"missing columns \['category', 'culture', 'image_file'\]"),
}


@pytest.mark.parametrize("case", UNREADABLE)
def test_an_unreadable_labels_csv_is_one_input_error_naming_it(tmp_path: Path, case: str) -> None:
    content, match = UNREADABLE[case]
    labels = tmp_path / "labels.csv"
    if content == "folder":
        labels.mkdir()
    elif isinstance(content, bytes):
        labels.write_bytes(content)
    error = getattr(originals_mod, "OriginalsInputError", None)
    assert error is not None and issubclass(error, ValueError)
    with pytest.raises(error, match=match) as raised:
        collect_originals(LocalOriginalsConfig(root=str(tmp_path), labels_csv=str(labels)), sha, MIX)
    assert str(labels) in str(raised.value) and "originals.labels_csv" in str(raised.value)


def test_a_missing_root_is_an_input_error(tmp_path: Path) -> None:
    labels = write_labels(tmp_path, ["a.jpg"])
    error = getattr(originals_mod, "OriginalsInputError", None)
    assert error is not None
    with pytest.raises(error, match=r"originals\.root"):
        collect_originals(LocalOriginalsConfig(root=str(tmp_path / "nowhere"), labels_csv=str(labels)), sha, MIX)


def test_a_utf8_labels_csv_with_a_byte_order_mark_reads(tmp_path: Path) -> None:
    (tmp_path / "k.jpg").write_bytes(INSIDE)
    text = "image_file,culture,category,food_label\nk.jpg,UK,Food,Tea\n"
    (tmp_path / "labels.csv").write_bytes(text.encode("utf-8-sig"))
    config = LocalOriginalsConfig(root=str(tmp_path), labels_csv=str(tmp_path / "labels.csv"))
    assert collect_originals(config, sha, MIX)["status"].to_pylist() == [STATUS_OK]
