"""The image pass (collectors/image_pass.py): one read and one decode per image give the hashes and the stored
thumbnails, which equal what the older path (hash_batch over the bytes) and a full decode give; the dedup reads the
stored thumbnails without decoding."""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import imagehash
import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

import collectors.image_check
import collectors.image_pass
import curation.image_thumbnails
from collectors.fetch import Fetcher
from collectors.image_check import ImageLimits
from collectors.image_pass import ImagePass, PassBlobs
from collectors.importer import ImportConfig, LocalImporter, import_hits
from curation.dedup_stage import StoredThumbnails
from curation.image_hashing import hash_batch
from curation.image_thumbnails import decode_normalized, pixel_sha256, thumbnails
from curation.thumbnail_packs import read_thumbnails
from data.workspace import BlobStore, Workspace

LIMITS = ImageLimits(min_side=32)


def _picture(size: tuple[int, int], seed: int) -> np.ndarray:
    """A smooth, asymmetric RGB picture (stable hashes under rescaling; a rotation changes them)."""
    w, h = size
    y, x = np.mgrid[0:h, 0:w] / max(w, h)
    r = 128 + 100 * np.sin((3 + seed) * x + seed)
    g = 128 + 100 * np.cos((2 + seed % 3) * y * (1 + x))
    b = 255 * x * y
    rgb = np.stack([r, g, b], axis=-1)
    corner = (seed % 4) * w // 4
    rgb[: h // 3, corner : corner + w // 4] = (240, 20, 20)  # a block, placed by the seed
    return np.clip(rgb, 0, 255).astype(np.uint8)


def _encode(image: Image.Image, fmt: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **options)
    return buffer.getvalue()


def _images() -> dict[str, bytes]:
    rotated = Image.Exif()
    rotated[0x0112] = 6  # rotate 90 degrees on display
    rgba = np.dstack([_picture((128, 96), 4), np.linspace(0, 255, 128 * 96).reshape(96, 128).astype(np.uint8)])
    return {
        "jpeg-small": _encode(Image.fromarray(_picture((120, 90), 1)), "JPEG"),
        "jpeg-medium": _encode(Image.fromarray(_picture((640, 480), 2)), "JPEG", quality=90),
        "jpeg-large": _encode(Image.fromarray(_picture((1600, 1200), 3)), "JPEG"),
        "jpeg-exif-rotated": _encode(Image.fromarray(_picture((300, 200), 5)), "JPEG", exif=rotated),
        "jpeg-grey": _encode(Image.fromarray(_picture((200, 160), 6)).convert("L"), "JPEG"),
        "png-rgb": _encode(Image.fromarray(_picture((200, 150), 7)), "PNG"),
        "png-rgba": _encode(Image.fromarray(rgba, "RGBA"), "PNG"),
        "png-grey": _encode(Image.fromarray(_picture((100, 100), 8)).convert("L"), "PNG"),
    }


def _bad_idat_crc_png() -> bytes:
    """A PNG Pillow loads (it does not check the IDAT's CRC) but libpng refuses: the check passes, the decode fails."""
    data = _encode(Image.fromarray(_picture((120, 100), 9)), "PNG")
    at = data.index(b"IDAT")
    crc = at + 4 + struct.unpack(">I", data[at - 4 : at])[0]
    return data[:crc] + bytes([data[crc] ^ 0xFF]) + data[crc + 1 :]


class _ThroughPut:
    """A fetcher that checks by itself and stores with `put` (as the downloader does), or stores outside the pass
    (a blob stored already, as a resumed download finds it): the pass decodes from the bytes, or from the store."""

    def __init__(self, through_pass: bool) -> None:
        self.through_pass = through_pass

    def fetch(self, hits: Sequence[Mapping[str, object]], blobs: BlobStore) -> pa.Table:
        target = blobs if self.through_pass else BlobStore(blobs.storage, blobs.prefix)

        class Plain(BlobStore):  # not a PassBlobs: the importer's own check, then a plain put
            def put(self, data: bytes, digest: str | None = None) -> str:
                return target.put(data, digest)

        return import_hits(hits, Plain(blobs.storage, blobs.prefix), LIMITS)


FETCHERS: dict[str, Callable[[], Fetcher]] = {
    "importer": lambda: LocalImporter(ImportConfig(limits=LIMITS)),
    "put": lambda: _ThroughPut(True),
    "stored": lambda: _ThroughPut(False),
}


def _run_pass(tmp_path: Path, images: dict[str, bytes], fetcher: str = "importer") -> tuple[Workspace, pa.Table]:
    ws = Workspace(str(tmp_path / "ws"), "b")
    hits = []
    for name, data in images.items():
        path = tmp_path / name
        path.write_bytes(data)
        hits.append({"image_id": name, "url": str(path)})
    return ws, ImagePass(FETCHERS[fetcher](), ws.blobs)(hits)


@pytest.mark.parametrize("fetcher", sorted(FETCHERS))
def test_pass_hashes_and_thumbnails_equal_the_independent_paths(tmp_path: Path, fetcher: str) -> None:
    images = _images()
    ws, table = _run_pass(tmp_path, images, fetcher)
    rows = table.to_pylist()
    loaders: list[Callable[[], bytes]] = [lambda data=data: data for data in images.values()]  # type: ignore[misc]
    batch = hash_batch(loaders, workers=1, keep_align=True)
    assert batch.align is not None and batch.chroma is not None
    assert len({row["thumbnails"] for row in rows}) == 1  # one blob for the shard
    packed = read_thumbnails(ws.blobs.get(rows[0]["thumbnails"]))
    assert len(packed["align"]) == len(images)
    for k, (row, data) in enumerate(zip(rows, images.values(), strict=True)):
        name = row["image_id"]
        assert row["status"] == "ok" and row["hash_error"] is None, name
        # The older path: hash_batch over the same bytes.
        assert (row["phash"], row["dhash"]) == (int(batch.phash[k]), int(batch.dhash[k])), name
        at = row["thumbnail_row"]
        np.testing.assert_array_equal(packed["align"][at], batch.align[k], err_msg=name)
        np.testing.assert_array_equal(packed["chroma"][at], batch.chroma[k], err_msg=name)
        np.testing.assert_array_equal(packed["align"][at], thumbnails(data).align_input, err_msg=name)
        # A full decode, orientation applied: the exact pixels (where the pass had them), imagehash's hashes.
        full = decode_normalized(data)
        if name.startswith("png"):
            assert row["pixel_sha256"] == pixel_sha256(data), name
        else:
            assert row["pixel_sha256"] is None, name  # JPEGs: computed later, only where needed
        phash_bits = bin(row["phash"] ^ int(str(imagehash.phash(full)), 16)).count("1")
        dhash_bits = bin(row["dhash"] ^ int(str(imagehash.dhash(full)), 16)).count("1")
        assert phash_bits <= 4 and dhash_bits <= 4, (name, phash_bits, dhash_bits)


@pytest.mark.parametrize("fetcher", sorted(FETCHERS))
def test_a_file_the_check_passes_but_the_decode_fails_is_an_error_row(tmp_path: Path, fetcher: str) -> None:
    bad = _bad_idat_crc_png()
    with pytest.raises(collectors.image_check.DecodeFailed):
        collectors.image_check.examine_image(bad, LIMITS, thumbnails)
    good = _images()["png-rgb"]
    ws, table = _run_pass(tmp_path, {"bad.png": bad, "good.png": good}, fetcher)
    failed, ok = table.to_pylist()
    assert failed["status"] == "ok" and failed["sha256"] is not None  # stored: the file passed the check
    assert failed["hash_error"] and "CRC" in failed["hash_error"]
    assert [failed[c] for c in ("phash", "dhash", "pixel_sha256", "thumbnails", "thumbnail_row")] == [None] * 5
    assert ws.blobs.get(failed["sha256"]) == bad
    # The image after it still gets its own thumbnails (row 0 of a one-image blob).
    assert ok["hash_error"] is None and ok["thumbnail_row"] == 0
    packed = read_thumbnails(ws.blobs.get(ok["thumbnails"]))
    assert packed["align"].shape == (1, 64, 64)
    np.testing.assert_array_equal(packed["align"][0], thumbnails(good).align_input)


def _npz(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # type: ignore[arg-type]
    return buffer.getvalue()


_ALIGN, _CHROMA = np.zeros((2, 64, 64), np.uint8), np.zeros((2, 2, 32, 32), np.int8)
DAMAGED = {
    "align-32": _npz(align=np.zeros((2, 32, 32), np.uint8), chroma=_CHROMA),
    "align-float": _npz(align=_ALIGN.astype(np.float32), chroma=_CHROMA),
    "chroma-rows": _npz(align=_ALIGN, chroma=_CHROMA[:1]),
    "chroma-uint8": _npz(align=_ALIGN, chroma=_CHROMA.view(np.uint8)),
    "align-1d": _npz(align=np.zeros(64, np.uint8), chroma=_CHROMA),
    "no-chroma": _npz(align=_ALIGN),
    "not-npz": b"not a zip archive " * 20,
    "truncated-npz": _npz(align=_ALIGN, chroma=_CHROMA)[:200],
}


@pytest.mark.parametrize("blob", list(DAMAGED.values()), ids=list(DAMAGED))
def test_read_thumbnails_refuses_a_damaged_blob_with_a_value_error(blob: bytes) -> None:
    with pytest.raises(ValueError, match="thumbnails blob k1: not a thumbnails blob") as info:
        read_thumbnails(blob, "k1")
    assert "\n" not in str(info.value)  # one line


@pytest.mark.parametrize("kind", ["align-32", "no-chroma", "not-npz"])
def test_the_dedup_names_the_damaged_thumbnails_blob(tmp_path: Path, kind: str) -> None:
    ws = Workspace(str(tmp_path / "ws"), "b")
    blob = DAMAGED[kind]
    key = ws.blobs.put(blob)
    column = pa.array([key, key], pa.string())
    thumbs = StoredThumbnails(
        ws.blobs, column, pa.array([0, 1], pa.int32()), column, pa.array([None, None], pa.string())
    )
    with pytest.raises(ValueError, match=key):
        thumbs.prepare(np.arange(2))


def test_the_pass_decodes_each_image_once_and_the_dedup_decodes_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    images = _images()
    expected = {name: thumbnails(data) for name, data in images.items()}
    decode = curation.image_thumbnails.decode_reduced
    calls: list[int] = []

    def counted(data: bytes) -> curation.image_thumbnails.ReducedDecode:
        calls.append(1)
        return decode(data)

    monkeypatch.setattr(curation.image_thumbnails, "decode_reduced", counted)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("decoded twice")

    monkeypatch.setattr(collectors.image_check, "inspect_image", refuse)  # the check's own decode
    monkeypatch.setattr(PassBlobs, "get", refuse)  # nothing read back from the store
    ws, table = _run_pass(tmp_path, images)
    rows = table.to_pylist()
    assert len(calls) == len(images)

    monkeypatch.undo()
    for module in (curation.image_thumbnails, collectors.image_pass):
        monkeypatch.setattr(module, "thumbnails", refuse)
    monkeypatch.setattr(curation.image_thumbnails, "decode_reduced", refuse)
    thumbs = StoredThumbnails(
        ws.blobs,
        table["thumbnails"].combine_chunks(),
        table["thumbnail_row"].combine_chunks(),
        table["sha256"].combine_chunks(),
        table["pixel_sha256"].combine_chunks(),
    )
    order = np.array([3, 0, 7, 1, 6, 2, 5, 4])  # any order the pairs ask in
    thumbs.prepare(order)
    for row in order.tolist():
        name = rows[row]["image_id"]
        np.testing.assert_array_equal(thumbs.align(row), expected[name].align_input, err_msg=name)
        np.testing.assert_array_equal(thumbs.chroma(row), expected[name].chroma_input, err_msg=name)
    thumbs.forget()
