"""The fastest reduced JPEG decode (issue 60): Pillow's draft mode, as `curation.image_thumbnails.decode_reduced`
uses it, against libjpeg-turbo's scaled decoding through simplejpeg and PyTurboJPEG, at the same DCT scale.

    .venv/bin/python perf/reduced_decode.py                        # 2000 JPEGs at full size, 2000 at quarter size
    .venv/bin/python perf/reduced_decode.py --corpus DIR --images 5000

The sample is drawn from perf/build_scale.py's web-like corpus recipe (`plan_corpus` and `draw`, seeded, JPEGs
only), at full size (`--size-scale 1`) and at the default quarter size, straight into memory; `--corpus DIR`
(repeatable) samples the JPEGs of a folder instead, read into memory first. Disk is never in a measurement.

The DCT scale is Pillow's: `JpegImageFile.draft(mode, (DRAFT_SIDE, DRAFT_SIDE))` takes the largest s of 8, 4, 2, 1
with s <= min(width // DRAFT_SIDE, height // DRAFT_SIDE) (1 when that is 0) and decodes at ceil(width / s) x
ceil(height / s). libjpeg-turbo's bindings are asked for exactly that size (simplejpeg's `min_width`/`min_height`
pick the smallest of turbojpeg's N/8 factors that reaches it, which is 1/s; PyTurboJPEG takes (1, s)).

Variants, each timed over the whole sample in one thread (a plain loop) and in two (a ThreadPoolExecutor of 2, as
the hashing runs), `--rounds` rounds in rotating order, medians reported:

    pil_reduced   decode_reduced: today's path (open, EXIF orientation, draft YCbCr, load, copy, luma plane)
    pil_draft     the bare Pillow decode: open, draft("YCbCr"), load
    pil_header    Pillow's open and EXIF look-up alone: what a pass keeps paying to learn the orientation
    sj_gray       simplejpeg GRAY: the luma plane only (what the hashes read)
    sj_rgb        simplejpeg RGB: one decode of all the colour; luma then by conversion (Pillow "L")
    sj_gray_rgb   simplejpeg GRAY + RGB: the exact luma and the colour, two decodes
    tj_gray       PyTurboJPEG GRAY
    tj_yuv        PyTurboJPEG decode_to_yuv_planes: Y, Cb, Cr as coded (chroma at its own subsampled size)
    sj_pass       a drop-in for decode_reduced on colour JPEGs: Pillow's header and EXIF orientation, simplejpeg
                  RGB at draft scale, grey = its Pillow "L" conversion, colour = the RGB (chroma_thumbnail takes RGB)
    tj_pass       the same with PyTurboJPEG's planes: grey = Y as coded, colour = YCbCr, chroma upsampled (nearest)
    sj_lean       sj_pass with simplejpeg's header instead of Pillow's where the file holds no EXIF block
    tj_lean       tj_pass likewise, and the chroma thumbnail box-reduced straight from the coded planes (no upsampling,
                  no `colour` image: a pass would have to take the thumbnail from the decode)

The "fastest pass variant" is the quickest of pil_reduced and the *_pass and *_lean ones (what a pass would run,
and its floor). No other file in the sample goes through a pass variant: the sample holds colour JPEGs only.

simplejpeg has no YCbCr (or YUV-planes) output: its colourspaces are RGB/BGR/RGBX/.../GRAY/CMYK. Pixels are compared
once per file, untimed, with Pillow's draft planes: luma (files identical, pixels identical, max abs difference) and
the pipeline's (2, 32, 32) chroma thumbnail (`chroma_thumbnail`; turbojpeg's coded chroma planes either box-reduced
straight to 32x32, or first upsampled to the luma's size as tj_pass does). Prints a table per sample and ends with
one JSON line. Without simplejpeg or PyTurboJPEG their variants are reported as not measured, with the reason.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import PIL
from PIL import Image, features

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: the repository's packages
    sys.path.insert(0, str(ROOT))

from curation.image_thumbnails import (  # noqa: E402
    _TRANSPOSE,
    _TRANSPOSED_ORIENTATIONS,
    CHROMA_SIDE,
    DRAFT_SIDE,
    chroma_thumbnail,
    decode_reduced,
)

try:
    import simplejpeg
except ImportError:  # CI's venv: Pillow alone is timed
    simplejpeg = None

TURBOJPEG: Any = None
TURBOJPEG_NOTE = ""
try:
    import turbojpeg

    TURBOJPEG = turbojpeg.TurboJPEG()
    TURBOJPEG_NOTE = f"PyTurboJPEG {getattr(turbojpeg, '__version__', '?')}"
except ImportError:
    TURBOJPEG_NOTE = "not installed"
except (OSError, RuntimeError) as error:  # the binding is there, the system's libturbojpeg (or its version) not
    TURBOJPEG_NOTE = f"not usable: {str(error).splitlines()[0]}"

_EXIF_ORIENTATION = 0x0112
# Variants that give what a pass needs (luma for the hashes and the colour for the chroma check).
PASS_VARIANTS = ("pil_reduced", "sj_pass", "tj_pass", "sj_lean", "tj_lean")


class PassDecode(NamedTuple):
    """The part of `ReducedDecode` a colour JPEG fills: full size after orientation, luma and colour at draft scale."""

    width: int
    height: int
    grey: Image.Image
    colour: Image.Image


class LeanDecode(NamedTuple):
    width: int
    height: int
    grey: Image.Image
    chroma: np.ndarray  # (2, 32, 32) int8, Cb and Cr minus 128


def draft_scale(width: int, height: int, side: int = DRAFT_SIDE) -> int:
    """The DCT scale denominator Pillow's `draft(mode, (side, side))` picks for a width x height JPEG."""
    most = min(width // side, height // side)
    return next((s for s in (8, 4, 2) if most >= s), 1)


def _scaled(width: int, height: int) -> tuple[int, int]:
    s = draft_scale(width, height)
    return -(-width // s), -(-height // s)


# -- the decoders ---------------------------------------------------------------------------------------------------


def pil_draft(data: bytes) -> Image.Image:
    with Image.open(io.BytesIO(data)) as image:
        image.draft("YCbCr", (DRAFT_SIDE, DRAFT_SIDE))
        image.load()
        return image


def pil_header(data: bytes) -> tuple[int, int, int]:
    with Image.open(io.BytesIO(data)) as image:
        return image.width, image.height, image.getexif().get(_EXIF_ORIENTATION, 1)


def sj_decode(data: bytes, colorspace: str) -> np.ndarray:
    """simplejpeg at Pillow's draft scale: (h, w, channels) uint8."""
    height, width, _, _ = simplejpeg.decode_jpeg_header(data)
    out_w, out_h = _scaled(width, height)
    return simplejpeg.decode_jpeg(data, colorspace, min_height=out_h, min_width=out_w)


def sj_gray(data: bytes) -> np.ndarray:
    return sj_decode(data, "GRAY")


def sj_rgb(data: bytes) -> np.ndarray:
    return sj_decode(data, "RGB")


def sj_gray_rgb(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    return sj_decode(data, "GRAY"), sj_decode(data, "RGB")


def tj_gray(data: bytes) -> np.ndarray:
    width, height, _, _ = TURBOJPEG.decode_header(data)
    factor = (1, draft_scale(width, height))
    return TURBOJPEG.decode(data, pixel_format=turbojpeg.TJPF_GRAY, scaling_factor=factor)


def _tj_planes(data: bytes) -> tuple[int, int, list[np.ndarray]]:
    """(width, height, [Y, Cb, Cr]) as coded, at Pillow's draft scale. turbojpeg pads the Y plane to whole chroma
    samples (an even width and height in 4:2:0): it is cut back to the scaled size (a view); the chroma planes are
    ceil(Y / 2) already."""
    width, height, _, _ = TURBOJPEG.decode_header(data)
    out_w, out_h = _scaled(width, height)
    y, *chroma = TURBOJPEG.decode_to_yuv_planes(data, scaling_factor=(1, draft_scale(width, height)))
    return width, height, [y[:out_h, :out_w], *chroma]


def tj_yuv(data: bytes) -> list[np.ndarray]:
    return _tj_planes(data)[2]


def _planes_chroma_thumbnail(cb: np.ndarray, cr: np.ndarray) -> np.ndarray:
    """A (2, 32, 32) int8 chroma thumbnail straight from coded chroma planes (box-reduced, minus 128)."""
    out = [
        np.asarray(Image.fromarray(np.ascontiguousarray(p)).resize((CHROMA_SIDE, CHROMA_SIDE), Image.Resampling.BOX))
        for p in (cb, cr)
    ]
    return (np.stack(out).astype(np.int16) - 128).astype(np.int8)


def _upsampled(planes: Sequence[np.ndarray]) -> tuple[Image.Image, Image.Image]:
    """("L" luma, "YCbCr" colour) at the luma's size from coded planes, the chroma upsampled by repetition: what
    `grey` and `colour` of a `ReducedDecode` would be. (Pillow's bilinear upsampling costs 7x as much, about 100 us
    a plane at 256x192, for a chroma thumbnail no closer to Pillow's draft one: mean |diff| 0.4 either way.)"""
    y = Image.fromarray(np.ascontiguousarray(planes[0]))
    chroma = [Image.fromarray(np.ascontiguousarray(p)).resize(y.size, Image.Resampling.NEAREST) for p in planes[1:]]
    return y, Image.merge("YCbCr", [y, *chroma])


def _pass(data: bytes, decode: Callable[[bytes, int, int], tuple[Image.Image, Image.Image]]) -> PassDecode:
    """What `decode_reduced` gives for a colour JPEG, with `decode` (data, width, height) -> (grey, colour) in place
    of Pillow's draft decode: Pillow still reads the header for the size and the EXIF orientation."""
    with Image.open(io.BytesIO(data)) as image:
        width, height = image.size
        orientation = image.getexif().get(_EXIF_ORIENTATION, 1)
    grey, colour = decode(data, width, height)
    transpose = _TRANSPOSE.get(orientation)
    if transpose is not None:
        grey, colour = grey.transpose(transpose), colour.transpose(transpose)
    if orientation in _TRANSPOSED_ORIENTATIONS:
        width, height = height, width
    return PassDecode(width, height, grey, colour)


def _sj_images(data: bytes, width: int, height: int) -> tuple[Image.Image, Image.Image]:
    out_w, out_h = _scaled(width, height)
    colour = Image.fromarray(simplejpeg.decode_jpeg(data, "RGB", min_height=out_h, min_width=out_w), "RGB")
    return colour.convert("L"), colour


def _tj_images(data: bytes, width: int, height: int) -> tuple[Image.Image, Image.Image]:
    return _upsampled(_tj_planes(data)[2])


def sj_pass(data: bytes) -> PassDecode:
    return _pass(data, _sj_images)


def tj_pass(data: bytes) -> PassDecode:
    return _pass(data, _tj_images)


def _has_exif(data: bytes) -> bool:
    """Whether an EXIF block may be there (APP1 comes first in practice); a false hit only costs Pillow's look."""
    return data.find(b"Exif\x00\x00", 0, 65536) >= 0


def sj_lean(data: bytes) -> PassDecode:
    """sj_pass without Pillow's header where there is no EXIF: simplejpeg's header gives the size."""
    if _has_exif(data):
        return sj_pass(data)
    height, width, _, _ = simplejpeg.decode_jpeg_header(data)
    return PassDecode(width, height, *_sj_images(data, width, height))


def tj_lean(data: bytes) -> PassDecode | LeanDecode:
    """tj_pass without Pillow's header where there is no EXIF, and without the chroma upsampling: the (2, 32, 32)
    chroma thumbnail is box-reduced straight from the coded planes (what `colour` is only ever used for)."""
    if _has_exif(data):
        return tj_pass(data)
    width, height, (y, cb, cr) = _tj_planes(data)
    return LeanDecode(width, height, Image.fromarray(np.ascontiguousarray(y)), _planes_chroma_thumbnail(cb, cr))


VARIANTS: dict[str, tuple[Callable[[bytes], object], str]] = {
    "pil_reduced": (decode_reduced, "pillow"),
    "pil_draft": (pil_draft, "pillow"),
    "pil_header": (pil_header, "pillow"),
    "sj_gray": (sj_gray, "simplejpeg"),
    "sj_rgb": (sj_rgb, "simplejpeg"),
    "sj_gray_rgb": (sj_gray_rgb, "simplejpeg"),
    "tj_gray": (tj_gray, "turbojpeg"),
    "tj_yuv": (tj_yuv, "turbojpeg"),
    "sj_pass": (sj_pass, "simplejpeg"),
    "tj_pass": (tj_pass, "turbojpeg"),
    "sj_lean": (sj_lean, "simplejpeg"),
    "tj_lean": (tj_lean, "turbojpeg"),
}


def available() -> dict[str, str | None]:
    """Each library: None when it can be measured, else why not."""
    return {
        "pillow": None,
        "simplejpeg": None if simplejpeg is not None else "not installed",
        "turbojpeg": None if TURBOJPEG is not None else TURBOJPEG_NOTE,
    }


# -- the samples ----------------------------------------------------------------------------------------------------


def generated_sample(images: int, size_scale: float, seed: int, workers: int) -> list[bytes]:
    """`images` JPEGs of perf/build_scale.py's corpus at `size_scale`, drawn (seeded) from its plan, in memory."""
    from data.reference import default_pack
    from perf import build_scale as bs

    plan = bs.plan_corpus(bs.shape_for(images, size_scale=size_scale), default_pack())
    jpeg_kinds = [bs.ORIG, bs.BYTES, bs.REENCODE, bs.RESIZE, bs.BRIGHT, bs.XBYTES]
    candidates = np.flatnonzero(np.isin(plan.kind, jpeg_kinds))
    rng = np.random.default_rng([seed, 60])
    picked = np.sort(rng.choice(candidates, min(images, len(candidates)), replace=False))
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(lambda i: bs.draw(plan, int(i), 0), picked.tolist()))


def folder_sample(folder: Path, images: int, seed: int) -> list[bytes]:
    """Up to `images` files of `folder` (seeded), read into memory."""
    paths = sorted(
        os.path.join(d, n)
        for d, _, names in os.walk(folder)
        for n in names
        if n.lower().endswith((".jpg", ".jpeg", ".jpe"))
    )
    rng = np.random.default_rng([seed, 60])
    picked = rng.choice(len(paths), min(images, len(paths)), replace=False) if paths else []
    return [Path(paths[int(i)]).read_bytes() for i in sorted(picked)]


def usable(blobs: list[bytes]) -> tuple[list[bytes], Counter[str]]:
    """The colour (YCbCr-coded) JPEGs every measured decoder decodes; the rest counted by why they were left out."""
    kept: list[bytes] = []
    left_out: Counter[str] = Counter()
    can = available()
    for data in blobs:
        try:
            with Image.open(io.BytesIO(data)) as image:
                if image.format != "JPEG" or image.mode != "RGB":
                    left_out[f"{image.format} {image.mode}"] += 1
                    continue
            if pil_draft(data).mode != "YCbCr":
                left_out["not YCbCr-coded"] += 1
                continue
            for name in ("pil_reduced", "sj_pass", "tj_pass"):  # one pass per library
                fn, library = VARIANTS[name]
                if can[library] is None:
                    fn(data)
        except Exception as error:  # truncated or odd files: timed by none
            left_out[type(error).__name__] += 1
            continue
        kept.append(data)
    return kept, left_out


# -- timing ---------------------------------------------------------------------------------------------------------


def one_pass(fn: Callable[[bytes], object], blobs: Sequence[bytes], threads: int) -> float:
    start = time.perf_counter()
    if threads == 1:
        for data in blobs:
            fn(data)
    else:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            for _ in pool.map(fn, blobs):
                pass
    return time.perf_counter() - start


def time_variants(
    blobs: Sequence[bytes], names: list[str], rounds: int, threads: Sequence[int]
) -> dict[str, dict[str, float]]:
    """Median seconds per variant and thread count; each round runs every variant once, in a rotated order."""
    times: dict[str, dict[int, list[float]]] = {n: {t: [] for t in threads} for n in names}
    for name in names:  # warm-up: imports, first allocations
        VARIANTS[name][0](blobs[0])
    for r in range(rounds):
        for k in range(len(names)):
            name = names[(k + r) % len(names)]
            for t in threads:
                times[name][t].append(one_pass(VARIANTS[name][0], blobs, t))
    return {n: {str(t): round(statistics.median(v), 4) for t, v in per.items()} for n, per in times.items()}


# -- pixels ---------------------------------------------------------------------------------------------------------


def compare(reference: Sequence[np.ndarray], other: Sequence[np.ndarray]) -> dict[str, Any]:
    """How alike two lists of arrays are, file by file: shapes equal, files identical, pixels identical, the largest
    and the mean absolute difference (over the files whose shapes match)."""
    same_shape = identical = pixels = equal_pixels = 0
    max_diff = 0
    abs_sum = 0.0
    for a, b in zip(reference, other, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            continue
        same_shape += 1
        diff = np.abs(a.astype(np.int16) - b.astype(np.int16))
        identical += int(not diff.any())
        pixels += diff.size
        equal_pixels += int((diff == 0).sum())
        max_diff = max(max_diff, int(diff.max()) if diff.size else 0)
        abs_sum += float(diff.sum())
    n = max(1, len(reference))
    return {
        "files": len(reference),
        "same_shape": round(same_shape / n, 4),
        "files_identical": round(identical / n, 4),
        "pixels_identical": round(equal_pixels / max(1, pixels), 6),
        "max_abs_diff": max_diff,
        "mean_abs_diff": round(abs_sum / max(1, pixels), 4),
    }


def pixel_stats(blobs: Sequence[bytes]) -> dict[str, Any]:
    """Each decoder's luma and chroma thumbnail against Pillow's draft planes."""
    drafts = [np.asarray(pil_draft(d)) for d in blobs]
    luma = [a[:, :, 0] for a in drafts]
    chroma = [chroma_thumbnail(Image.fromarray(a, "YCbCr")) for a in drafts]
    out: dict[str, Any] = {
        "pil_draft_vs_reduced": {
            "luma": compare(luma, [np.asarray(decode_reduced(d).grey) for d in blobs]),
            "chroma_thumbnail": compare(chroma, [chroma_thumbnail(decode_reduced(d).colour) for d in blobs]),
        }
    }
    can = available()
    if can["simplejpeg"] is None:
        rgb = [sj_rgb(d) for d in blobs]
        passes = [sj_pass(d) for d in blobs]
        out["sj_gray"] = {"luma": compare(luma, [sj_gray(d)[:, :, 0] for d in blobs])}
        out["sj_rgb"] = {
            "chroma_planes_via_YCbCr": compare(
                [a[:, :, 1:] for a in drafts],
                [np.asarray(Image.fromarray(a, "RGB").convert("YCbCr"))[:, :, 1:] for a in rgb],
            )
        }
        out["sj_pass"] = {
            "luma": compare(luma, [np.asarray(p.grey) for p in passes]),
            "chroma_thumbnail": compare(chroma, [chroma_thumbnail(p.colour) for p in passes]),
        }
        leans = [sj_lean(d) for d in blobs]
        out["sj_lean"] = {
            "luma": compare(luma, [np.asarray(p.grey) for p in leans]),
            "chroma_thumbnail": compare(chroma, [chroma_thumbnail(p.colour) for p in leans]),
        }
    if can["turbojpeg"] is None:
        planes = [tj_yuv(d) for d in blobs]
        passes = [tj_pass(d) for d in blobs]
        out["tj_gray"] = {"luma": compare(luma, [tj_gray(d)[:, :, 0] for d in blobs])}
        out["tj_yuv"] = {
            "luma": compare(luma, [p[0] for p in planes]),
            "chroma_thumbnail_from_planes": compare(chroma, [_planes_chroma_thumbnail(p[1], p[2]) for p in planes]),
            "chroma_plane_shape_vs_luma": Counter(
                f"{p[1].shape[1] / p[0].shape[1]:.2g}x{p[1].shape[0] / p[0].shape[0]:.2g}" for p in planes
            ).most_common(3),
        }
        out["tj_pass"] = {
            "luma": compare(luma, [np.asarray(p.grey) for p in passes]),
            "chroma_thumbnail": compare(chroma, [chroma_thumbnail(p.colour) for p in passes]),
        }
        leans = [tj_lean(d) for d in blobs]
        out["tj_lean"] = {
            "luma": compare(luma, [np.asarray(p.grey) for p in leans]),
            "chroma_thumbnail": compare(
                chroma, [p.chroma if isinstance(p, LeanDecode) else chroma_thumbnail(p.colour) for p in leans]
            ),
        }
    return out


# -- the report -----------------------------------------------------------------------------------------------------


def measure_set(label: str, blobs: list[bytes], rounds: int, threads: Sequence[int]) -> dict[str, Any]:
    kept, left_out = usable(blobs)
    if not kept:
        raise SystemExit(f"{label}: no usable colour JPEG among {len(blobs)} files ({dict(left_out)})")
    can = available()
    names = [n for n, (_, lib) in VARIANTS.items() if can[lib] is None]
    sizes = []
    for data in kept:
        with Image.open(io.BytesIO(data)) as image:
            sizes.append(image.size)
    scales = Counter(draft_scale(w, h) for w, h in sizes)
    seconds = time_variants(kept, names, rounds, threads)
    base, bare = seconds["pil_reduced"], seconds["pil_draft"]
    ratios = {n: {t: round(s[t] / base[t], 3) for t in s} for n, s in seconds.items()}
    ratios_bare = {n: {t: round(s[t] / bare[t], 3) for t in s} for n, s in seconds.items()}
    fastest = {str(t): min((n for n in names if n in PASS_VARIANTS), key=lambda n: seconds[n][str(t)]) for t in threads}
    row = {
        "set": label,
        "files": len(kept),
        "left_out": dict(left_out),
        "mean_kb": round(sum(map(len, kept)) / len(kept) / 1000, 1),
        "median_size": [int(np.median([w for w, _ in sizes])), int(np.median([h for _, h in sizes]))],
        "dct_scales": {f"1/{s}": n for s, n in sorted(scales.items())},
        "seconds": seconds,
        "us_per_image": {n: {t: round(v * 1e6 / len(kept), 1) for t, v in s.items()} for n, s in seconds.items()},
        "ratio_to_pil_reduced": ratios,
        "ratio_to_pil_draft": ratios_bare,
        "fastest_pass_variant": fastest,
        "not_measured": {n: can[lib] for n, (_, lib) in VARIANTS.items() if can[lib] is not None},
        "pixels": pixel_stats(kept),
    }
    print_set(row, threads)
    return row


def print_set(row: dict[str, Any], threads: Sequence[int]) -> None:
    print(
        f"\n{row['set']}: {row['files']} JPEGs, {row['mean_kb']} KB on average, median {row['median_size'][0]}x"
        f"{row['median_size'][1]}, DCT scales {row['dct_scales']}, left out {row['left_out'] or 'none'}"
    )
    head = "".join(f"{f'{t} thr s':>10}{'us/img':>9}{'/reduced':>9}{'/draft':>8}" for t in threads)
    print(f"{'variant':<13}{head}")
    for name, secs in row["seconds"].items():
        cells = "".join(
            f"{secs[str(t)]:10.3f}{row['us_per_image'][name][str(t)]:9.0f}"
            f"{row['ratio_to_pil_reduced'][name][str(t)]:9.3f}{row['ratio_to_pil_draft'][name][str(t)]:8.3f}"
            for t in threads
        )
        print(f"{name:<13}{cells}")
    for name, why in row["not_measured"].items():
        print(f"{name:<13}not measured: {why}")
    print(f"fastest pass variant: {row['fastest_pass_variant']}")
    for name, checks in row["pixels"].items():
        for what, stats in checks.items():
            if isinstance(stats, dict):
                print(
                    f"  pixels {name:<21}{what:<24} files identical {stats['files_identical']:.4f}, pixels identical "
                    f"{stats['pixels_identical']:.6f}, max |diff| {stats['max_abs_diff']}, "
                    f"mean {stats['mean_abs_diff']}"
                )
            else:
                print(f"  pixels {name:<21}{what:<24} {stats}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=2000, help="files per sample")
    parser.add_argument("--size-scales", default="1,0.25", help="build_scale corpus sizes to generate")
    parser.add_argument("--corpus", type=Path, action="append", help="sample this folder's JPEGs instead")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2, help="threads drawing the generated samples")
    args = parser.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",")]
    libraries = {
        "pillow": PIL.__version__,
        "pillow_libjpeg_turbo": features.version("libjpeg_turbo"),
        "simplejpeg": simplejpeg.__version__ if simplejpeg is not None else "not installed",
        "turbojpeg": TURBOJPEG_NOTE,
    }
    print(f"libraries: {libraries}; {args.rounds} rounds, threads {threads}, medians", flush=True)
    sets = []
    if args.corpus:
        for folder in args.corpus:
            sets.append(measure_set(str(folder), folder_sample(folder, args.images, args.seed), args.rounds, threads))
    else:
        for scale in (float(s) for s in args.size_scales.split(",")):
            start = time.perf_counter()
            blobs = generated_sample(args.images, scale, args.seed, args.workers)
            print(f"drew {len(blobs)} files at size scale {scale:g} in {time.perf_counter() - start:.1f} s", flush=True)
            sets.append(measure_set(f"size_scale={scale:g}", blobs, args.rounds, threads))
    summary = {
        "benchmark": "reduced_decode",
        "images": args.images,
        "rounds": args.rounds,
        "threads": threads,
        "seed": args.seed,
        "draft_side": DRAFT_SIDE,
        "libraries": libraries,
        "sets": sets,
    }
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
