"""The dedup's cheaper paths give the same answers as the plain ones, and the colour check tells look-alikes apart.

- PNGs decoded by libpng (imagecodecs) give Pillow's pixels, grey conversion and pixel hash; the formats it does not
  take go to Pillow.
- A JPEG's luma plane, decoded in YCbCr draft mode, is the greyscale draft decode the hashes were defined on.
- Two pictures with the same grey structure and other colours (another photo shot the same way) are not merged,
  while a brightness copy and a colourless copy are.
- Importing the file deduplicator and the CLI loads none of the heavy libraries.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageEnhance, ImageOps

from curation.file_dedup import dedup_files
from curation.image_thumbnails import decode_reduced, pixel_sha256, thumbnails
from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT


def _scene(seed: int, size: tuple[int, int] = (480, 360)) -> np.ndarray:
    rng = np.random.default_rng(seed)
    coarse = rng.random((6, 8, 3)) * 255
    return np.asarray(Image.fromarray(coarse.astype(np.uint8)).resize(size, Image.Resampling.BICUBIC))


def _png(pixels: np.ndarray | Image.Image, **options: object) -> bytes:
    image = pixels if isinstance(pixels, Image.Image) else Image.fromarray(pixels)
    out = io.BytesIO()
    image.save(out, "PNG", **options)
    return out.getvalue()


def _pillow_decode(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    with Image.open(io.BytesIO(data)) as image:
        rgb = ImageOps.exif_transpose(image).convert("RGB")
    return np.asarray(rgb.convert("L")), np.asarray(rgb)


@pytest.mark.parametrize(
    "make",
    [
        lambda a: _png(a),  # RGB, libpng
        lambda a: _png(np.dstack([a, np.full(a.shape[:2], 128, np.uint8)])),  # RGBA, libpng
        lambda a: _png(Image.fromarray(a).convert("L")),  # grey, libpng
        lambda a: _png(Image.fromarray(a).convert("P")),  # palette: Pillow
        lambda a: _png(Image.fromarray(a).convert("I;16")),  # 16-bit grey: Pillow
        lambda a: _png(a, optimize=True),
    ],
    ids=["rgb", "rgba", "grey", "palette", "grey16", "optimized"],
)
def test_png_decodes_like_pillow_whichever_decoder_takes_it(make: object) -> None:
    data = make(_scene(1))  # type: ignore[operator]
    decoded = decode_reduced(data)
    grey, rgb = _pillow_decode(data)
    assert np.array_equal(np.asarray(decoded.grey), grey)
    assert np.array_equal(np.asarray(decoded.full_rgb), rgb)
    assert thumbnails(data, pixel_hash=True).pixel_sha256 == pixel_sha256(data)


def test_an_oriented_png_is_turned_like_pillow_turns_it() -> None:
    exif = Image.Exif()
    exif[0x0112] = 6
    data = _png(Image.fromarray(_scene(2, (300, 200))), exif=exif.tobytes())
    decoded = decode_reduced(data)
    assert (decoded.width, decoded.height) == (200, 300)
    assert np.array_equal(np.asarray(decoded.grey), _pillow_decode(data)[0])


def test_a_jpeg_luma_plane_is_its_greyscale_draft_decode() -> None:
    out = io.BytesIO()
    Image.fromarray(_scene(3, (1200, 900))).save(out, "JPEG", quality=90)
    data = out.getvalue()
    with Image.open(io.BytesIO(data)) as image:
        image.draft("L", (128, 128))
        grey = np.asarray(image.convert("L"))
    decoded = decode_reduced(data)
    assert decoded.draft_decoded and decoded.colour.mode == "YCbCr"
    assert np.array_equal(np.asarray(decoded.grey), grey)


def _recoloured(pixels: np.ndarray, seed: int) -> np.ndarray:
    """The same luma, other chroma: `pixels` in YCbCr with Cb and Cr replaced by another smooth pattern."""
    ycc = np.asarray(Image.fromarray(pixels).convert("YCbCr")).copy()
    other = np.asarray(Image.fromarray(_scene(seed, (pixels.shape[1], pixels.shape[0]))).convert("YCbCr"))
    ycc[:, :, 1:] = other[:, :, 1:]
    return np.asarray(Image.fromarray(ycc, "YCbCr").convert("RGB"))


def test_same_grey_other_colours_is_review_not_merge_and_copies_still_merge(tmp_path: Path) -> None:
    base = _scene(10)
    files = {
        "base.png": _png(base),
        "brighter.png": _png(ImageEnhance.Brightness(Image.fromarray(base)).enhance(1.2)),
        "other_colours.png": _png(_recoloured(base, 11)),
        "grey.png": _png(Image.fromarray(_scene(20)).convert("L").convert("RGB")),
        "grey_brighter.png": _png(ImageEnhance.Brightness(Image.fromarray(_scene(20)).convert("L")).enhance(1.15)),
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    paths = [str(tmp_path / name) for name in files]
    result = dedup_files(paths, workers=1)
    clusters = [sorted(Path(p).name for p in c) for c in result.clusters]
    assert sorted(clusters) == [["base.png", "brighter.png"], ["grey.png", "grey_brighter.png"]]
    review = {tuple(sorted((Path(a).name, Path(b).name))) for a, b in result.review_pairs}
    assert ("base.png", "other_colours.png") in review or ("brighter.png", "other_colours.png") in review


_HEAVY = ("cv2", "pandas", "torch", "open_clip", "transformers", "prefect")


@pytest.mark.parametrize("module", ["curation.file_dedup", "curation.image_hashing", "flows.cli"])
def test_importing_the_hashing_path_and_the_cli_loads_no_heavy_library(module: str) -> None:
    heavy = _HEAVY if module != "flows.cli" else ("cv2", "pandas", "torch", "open_clip", "transformers")
    code = f"import json, sys; import {module}; print(json.dumps(sorted(set({heavy!r}) & set(sys.modules))))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


def test_a_first_call_in_a_fresh_process_imports_no_pandas(tmp_path: Path) -> None:
    """pyarrow imports pandas on its first array: the file deduplicator builds no Arrow table, so a fresh process's
    first call does not pay for it (issue 31: the cold first call against imagededup). Nor for numpy.ma, which
    np.median imports on first use."""
    for name, seed in (("a.png", 1), ("b.png", 1), ("c.png", 2)):
        (tmp_path / name).write_bytes(_png(_scene(seed)))
    code = (
        "import json, sys; from curation.file_dedup import dedup_files; "
        f"r = dedup_files(sorted({[str(p) for p in tmp_path.iterdir()]!r}), workers=2); "
        "print(json.dumps([len(r.clusters), sorted({'pandas', 'numpy.ma'} & set(sys.modules))]))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [1, []]


def test_the_file_deduplicator_answers_as_the_stage_tables_do(tmp_path: Path) -> None:
    """dedup_files reads decide_columns directly; the answer is what the stage's tables (decide) say, in order."""
    from functools import partial

    from curation.file_hashing import read_file
    from curation.image_dedup import DedupInputs, ImageDedupConfig, decide
    from curation.image_hashing import hash_batch
    from perf.dedup_vs_imagededup.corpus import generate_corpus

    paths = generate_corpus(tmp_path / "c", seed=4, bases=12, workers=1, mix="small-crops").paths()
    result = dedup_files(paths, workers=2)

    batch = hash_batch([partial(read_file, p) for p in paths], 2, keep_align=True)
    align, chroma = batch.align, batch.chroma
    assert align is not None and chroma is not None
    n = len(paths)
    inputs = DedupInputs(
        image_ids=paths,
        concept_ids=np.zeros(n, dtype=np.int32),
        width=batch.width,
        height=batch.height,
        rank=np.zeros(n, dtype=np.int32),
        english=np.ones(n, dtype=bool),
        sha256=[d or f"unreadable:{p}" for d, p in zip(batch.sha256, paths, strict=True)],
        phash=batch.phash,
        dhash=batch.dhash,
        hashed=np.array([e is None for e in batch.errors], dtype=bool),
        pixel_hash=lambda row: batch.pixel_sha256[row] or pixel_sha256(read_file(paths[row])),
        align_thumbnail=lambda row: align[row],
        chroma_thumbnail=lambda row: chroma[row],
        draft_decoded=batch.draft_decoded,
        workers=2,
    )
    tables = decide(inputs, ImageDedupConfig(scope="global"))
    members: dict[str, list[str]] = {}
    for row in tables.decisions.to_pylist():
        if row["cluster_size"] > 1:
            members.setdefault(row["cluster_id"], []).append(row["image_id"])
    clusters = [[kept, *sorted(m for m in group if m != kept)] for kept, group in sorted(members.items())]
    queue = tables.review_queue
    review = list(zip(queue["image_a"].to_pylist(), queue["image_b"].to_pylist(), strict=True))
    pairs = tables.pairs.to_pylist()
    merge_pairs = sorted({(p["image_a"], p["image_b"]) for p in pairs if p["decision"] == "merge"})
    assert clusters and merge_pairs
    assert result.clusters == clusters
    assert result.review_pairs == review
    assert result.merge_pairs == merge_pairs
