"""A synthetic, photo-like image corpus with known near-duplicate ground truth.

Each *family* starts from one base image: a 2-3 colour gradient, a multi-octave low-frequency texture, fine grain,
an optional horizon (a table edge), 3-8 shaded foreground objects with drop shadows, a light lens blur and sensor
noise. A family holds:

- the base and 2-4 copies of it, each made by ONE transform (`COPY_KINDS`), all in the base's group;
- for about half of the families, 1-2 *siblings*: hard negatives drawn from the same style and layout (gradient
  palette, horizon, texture parameters, light direction, object positions and sizes) with a different texture
  realisation and different object shapes and colours, i.e. another photo shot the same way. Each sibling is its
  own group, and about half of them get one transformed copy.

A *mix* (`MIXES`) sets what a corpus is made of: the share of PNG originals, the range of image sizes, the sensor
noise and the number of copies per base. `tuned` is the corpus the dedup thresholds were chosen on; the others were
never used for tuning: `web` (JPEG-dominant, about 1 MP), `png-small` (40% PNG, 320-480 px), `sensor` (a new user's
corpus: 480x360, heavy sensor noise, 17% PNG), `large` (about 2 MP) and `small-crops` (issue 31: at most 512 px, 17%
PNG, crops and rotations twice as likely as each other copy kind; its speed work was done on seed 1 only, and seeds
2 and 3 are held out for it).

Everything is drawn from `numpy.random.default_rng([seed, family, ...])`, so a seed and a mix give the same files
byte for byte, whatever the number of workers. File names are a seeded permutation, so they say nothing about the
truth.

    .venv/bin/python -m perf.dedup_vs_imagededup.corpus OUT_DIR [--seed 0] [--bases 240] [--mix tuned]
                                                               [--examples PNG]
"""

from __future__ import annotations

import argparse
import io
import json
import math
import shutil
import string
import time
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from functools import lru_cache
from itertools import combinations
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageEnhance, ImageFilter, ImageFont, PngImagePlugin

COPY_KINDS = ("jpeg", "resize", "crop", "brightness", "blur", "rotate", "watermark", "exact", "lossless")
ORIGINAL_KINDS = ("base", "sibling")
IMAGE_DIR = "images"
TRUTH_FILE = "truth.json"
MARKER_FILE = ".dedup-corpus"

# Share of bases with siblings, and of siblings with one copy of their own.
SIBLING_SHARE = 0.5
SIBLING_COPY_SHARE = 0.5
ASPECTS = (4 / 3, 3 / 2, 16 / 9, 1.0, 5 / 4, 2.0)
OBJECT_KINDS = ("ellipse", "rect", "polygon", "line", "text")
OBJECT_WEIGHTS = (0.3, 0.22, 0.25, 0.1, 0.13)
WATERMARKS = ("© {} photo", "{}.com", "stock {}", "@{}", "© {} 2024", "SAMPLE {}")


@dataclass(frozen=True)
class Mix:
    """What a corpus is made of. Ranges are inclusive."""

    name: str
    png_share: float  # of originals; copies keep their source's format except the `jpeg` and `lossless` kinds
    long_side: tuple[int, int]  # pixels
    aspects: tuple[float, ...]  # long side / short side
    noise: tuple[float, float]  # sensor noise, standard deviation in grey levels
    copies: tuple[int, int]  # transformed copies per base
    # Weights of COPY_KINDS when a copy's transform is drawn; None draws them uniformly (and keeps the earlier
    # mixes' files byte for byte).
    copy_weights: tuple[float, ...] | None = None


# `small-crops`: every kind of copy, with crops and rotations (the costly band) twice as likely as each other kind.
_CROP_ROTATE_WEIGHTS = tuple(2.0 if kind in ("crop", "rotate") else 1.0 for kind in COPY_KINDS)
SMALL_CROPS_WEIGHTS = tuple(w / sum(_CROP_ROTATE_WEIGHTS) for w in _CROP_ROTATE_WEIGHTS)

MIXES = {
    mix.name: mix
    for mix in (
        Mix("tuned", 0.15, (480, 1024), ASPECTS, (1.0, 3.0), (2, 4)),
        Mix("web", 0.05, (1150, 1350), ASPECTS, (1.0, 3.0), (1, 3)),
        Mix("png-small", 0.40, (320, 480), (4 / 3, 3 / 2, 1.0, 5 / 4), (1.0, 3.0), (1, 3)),
        Mix("sensor", 0.17, (480, 480), (4 / 3,), (4.0, 8.0), (1, 3)),
        Mix("large", 0.20, (1600, 1800), (4 / 3, 3 / 2, 16 / 9), (1.0, 4.0), (1, 3)),
        Mix("small-crops", 0.17, (256, 512), ASPECTS, (1.0, 4.0), (1, 3), SMALL_CROPS_WEIGHTS),
    )
}
DEFAULT_MIX = "tuned"


@dataclass(frozen=True)
class FileTruth:
    group: int
    kind: str  # "base", "sibling" or one of COPY_KINDS
    family: int  # the base whose style and layout this file shares
    source: str | None  # the file a copy was made from; None for originals
    detail: str  # the transform's parameters, for people reading the truth


@dataclass(frozen=True)
class CorpusTruth:
    image_dir: Path
    seed: int
    bases: int
    files: dict[str, FileTruth]
    mix: Mix = MIXES[DEFAULT_MIX]

    @property
    def sibling_groups(self) -> frozenset[int]:
        """Groups whose original is a hard-negative sibling."""
        return frozenset(t.group for t in self.files.values() if t.kind == "sibling")

    def kind_counts(self) -> Counter[str]:
        return Counter(t.kind for t in self.files.values())

    def groups(self) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        for name in sorted(self.files):
            out.setdefault(self.files[name].group, []).append(name)
        return out

    def true_pairs(self) -> set[tuple[str, str]]:
        """Every unordered pair of files in the same group, as sorted name tuples."""
        return {pair for members in self.groups().values() for pair in combinations(members, 2)}

    def paths(self) -> list[str]:
        return [str(self.image_dir / name) for name in sorted(self.files)]

    def save(self, path: Path) -> None:
        doc = {
            "seed": self.seed,
            "bases": self.bases,
            "mix": asdict(self.mix),
            "image_dir": IMAGE_DIR,
            "files": {name: asdict(t) for name, t in sorted(self.files.items())},
        }
        path.write_text(json.dumps(doc, indent=1))

    @classmethod
    def load(cls, path: Path) -> CorpusTruth:
        doc = json.loads(path.read_text())
        files = {name: FileTruth(**t) for name, t in doc["files"].items()}
        mix = doc.get("mix")
        mix = Mix(**{k: tuple(v) if isinstance(v, list) else v for k, v in mix.items()}) if mix else MIXES[DEFAULT_MIX]
        return cls(path.parent / doc["image_dir"], doc["seed"], doc["bases"], files, mix)


# -- planning: which files exist, cheap and serial ---------------------------------------------------------------


@dataclass(frozen=True)
class _Item:
    """One file to write. Originals name the content stream they are drawn from; copies name their source."""

    index: int  # position in the family, also keys the item's random stream
    group: int
    kind: str
    fmt: str  # "jpeg" or "png"
    content: int = 0  # 0 for the base, 1.. for siblings
    source: int | None = None  # index of the original within the family
    name: str = ""


def _plan_family(seed: int, family: int, next_group: int, mix: Mix) -> list[_Item]:
    rng = np.random.default_rng([seed, family, 7])

    def fmt_original() -> str:
        return "png" if rng.random() < mix.png_share else "jpeg"

    def copy(index: int, kind: str, original: _Item) -> _Item:
        fmt = original.fmt
        if kind == "jpeg":
            fmt = "jpeg"
        elif kind == "lossless" and original.fmt == "jpeg" and rng.random() < 0.5:
            fmt = "png"  # the decoded pixels re-served as PNG; otherwise a JPEG with an inserted comment
        return _Item(index, original.group, kind, fmt, source=original.index)

    base = _Item(0, next_group, "base", fmt_original())
    items = [base]
    weights = None if mix.copy_weights is None else list(mix.copy_weights)
    size = int(rng.integers(mix.copies[0], mix.copies[1] + 1))
    kinds = rng.choice(COPY_KINDS, size=size, replace=False, p=weights)
    items += [copy(len(items) + i, str(k), base) for i, k in enumerate(kinds)]
    if rng.random() < SIBLING_SHARE:
        for s in range(int(rng.integers(1, 3))):
            sibling = _Item(len(items), next_group + 1 + s, "sibling", fmt_original(), content=1 + s)
            items.append(sibling)
            if rng.random() < SIBLING_COPY_SHARE:
                items.append(copy(len(items), str(rng.choice(COPY_KINDS, p=weights)), sibling))
    return items


def _plan(seed: int, bases: int, mix: Mix = MIXES[DEFAULT_MIX]) -> list[list[_Item]]:
    families, group = [], 0
    for family in range(bases):
        items = _plan_family(seed, family, group, mix)
        group = max(i.group for i in items) + 1
        families.append(items)
    total = sum(len(f) for f in families)
    order = iter(np.random.default_rng([seed, 1]).permutation(total))
    ext = {"jpeg": "jpg", "png": "png"}
    named = []
    for items in families:
        named.append([_Item(**{**asdict(i), "name": f"img{next(order):05d}.{ext[i.fmt]}"}) for i in items])
    return named


# -- drawing an original --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Style:
    """What siblings share: the camera, the background and the layout."""

    width: int
    height: int
    gradient: np.ndarray  # (2|3, 3) colours
    radial: bool
    angle: float
    centre: tuple[float, float]
    octaves: int
    cells: int
    persistence: float
    texture_amp: float
    tint: np.ndarray  # (3,)
    horizon: tuple[float, float] | None  # (y at the left as a fraction of height, slope)
    table: np.ndarray  # (3,) colour of the surface under the horizon
    table_mix: float
    boxes: list[tuple[float, float, float, float]]  # centre x, centre y, width, height in pixels
    light: tuple[float, float]  # unit vector the light comes from; shading and shadows follow it
    shadow: float
    blur: float
    noise: tuple[float, float]


def _colour(rng: np.random.Generator, sat: tuple[float, float], val: tuple[float, float]) -> np.ndarray:
    """A random colour from hue, saturation and value ranges."""
    h, s, v = rng.random(), rng.uniform(*sat), rng.uniform(*val)
    k = (np.array([5.0, 3.0, 1.0]) + h * 6) % 6
    return (v - v * s * np.clip(np.minimum(k, 4 - k), 0, 1)).astype(np.float32)


def _draw_style(rng: np.random.Generator, mix: Mix) -> _Style:
    long_side = int(rng.integers(mix.long_side[0], mix.long_side[1] + 1))
    aspect = float(rng.choice(mix.aspects))
    short_side = round(long_side / aspect)
    width, height = (long_side, short_side) if rng.random() < 0.7 else (short_side, long_side)
    horizon = (float(rng.uniform(0.42, 0.75)), float(rng.uniform(-0.06, 0.06))) if rng.random() < 0.6 else None
    scale = math.sqrt(width * height)  # sizes follow the area, so portrait frames get objects as big
    sizes = []
    for _ in range(int(rng.integers(3, 9))):
        side = rng.uniform(0.1, 0.35) * scale
        aspect_obj = rng.uniform(0.55, 1.8)
        sizes.append((side * math.sqrt(aspect_obj), side / math.sqrt(aspect_obj)))
    # The objects cover at least 15 % of the frame, so that siblings, which differ in them, are other pictures.
    grow = max(1.0, math.sqrt(0.15 * width * height / sum(w * h for w, h in sizes)))
    boxes = []
    for w, h in sizes:
        bw, bh = min(w * grow, 0.45 * width), min(h * grow, 0.45 * height)
        top = horizon[0] - 0.12 if horizon else 0.1
        cy = rng.uniform(max(top, 0.1), 0.9) * height  # objects stand on the table when there is one
        boxes.append((float(rng.uniform(0.08, 0.92) * width), float(cy), float(bw), float(bh)))
    angle = rng.uniform(0, 2 * np.pi)
    return _Style(
        width=width,
        height=height,
        gradient=np.stack([_colour(rng, (0.1, 0.7), (0.35, 0.95)) for _ in range(int(rng.integers(2, 4)))]),
        radial=bool(rng.random() < 0.4),
        angle=float(rng.uniform(0, 2 * np.pi)),
        centre=(float(rng.uniform(0.2, 0.8)), float(rng.uniform(0.2, 0.8))),
        octaves=int(rng.integers(2, 5)),
        cells=int(rng.integers(3, 9)),
        persistence=float(rng.uniform(0.4, 0.7)),
        texture_amp=float(rng.uniform(0.05, 0.15)),
        tint=(1 + rng.uniform(-0.3, 0.3, 3)).astype(np.float32),
        horizon=horizon,
        table=_colour(rng, (0.1, 0.6), (0.2, 0.8)),
        table_mix=float(rng.uniform(0.5, 0.85)),
        boxes=boxes,
        light=(float(np.cos(angle)), float(np.sin(angle))),
        shadow=float(rng.uniform(0.15, 0.4)),
        blur=float(rng.uniform(0.5, 1.2)),
        noise=mix.noise,
    )


def _texture(rng: np.random.Generator, style: _Style) -> np.ndarray:
    """Unit-variance low-frequency noise: a few octaves of bicubically upsampled white noise."""
    h, w = style.height, style.width
    total = np.zeros((h, w), np.float32)
    amp = 1.0
    for octave in range(style.octaves):
        n = style.cells * 2**octave
        ch, cw = max(2, round(n * h / max(h, w))), max(2, round(n * w / max(h, w)))
        small = Image.fromarray(rng.standard_normal((ch, cw)).astype(np.float32))
        total += amp * np.asarray(small.resize((w, h), Image.Resampling.BICUBIC))
        amp *= style.persistence
    return total / (total.std() + 1e-6)


def _background(style: _Style, texture: np.ndarray) -> np.ndarray:
    h, w = style.height, style.width
    y = np.linspace(0, 1, h, dtype=np.float32)[:, None]
    x = np.linspace(0, 1, w, dtype=np.float32)[None, :]
    if style.radial:
        cx, cy = style.centre
        t = np.sqrt(((x - cx) * w) ** 2 + ((y - cy) * h) ** 2)
    else:
        t = (x - 0.5) * w * np.cos(style.angle) + (y - 0.5) * h * np.sin(style.angle)
    t = (t - t.min()) / (t.max() - t.min() + 1e-6)
    stops = np.linspace(0, 1, len(style.gradient))
    img = np.stack([np.interp(t, stops, style.gradient[:, c]) for c in range(3)], axis=-1).astype(np.float32)
    if style.horizon:
        y0, slope = style.horizon
        below = (y * h > (y0 + slope * (x - 0.5)) * h).astype(np.float32)[..., None]
        depth = np.clip((y - y0) / (1 - y0 + 1e-6), 0, 1)[..., None]  # the surface darkens towards the camera
        table = style.table * (1.05 - 0.3 * depth)
        img = img * (1 - below * style.table_mix) + table * below * style.table_mix
    return img * (1 + style.texture_amp * texture[..., None] * style.tint)


@lru_cache(maxsize=64)
def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=max(6, size))


def _random_words(rng: np.random.Generator, count: int) -> str:
    letters = np.array(list(string.ascii_letters + string.digits))
    return " ".join("".join(rng.choice(letters, int(rng.integers(2, 9)))) for _ in range(count))


def _object_masks(rng: np.random.Generator, kind: str, bw: int, bh: int) -> tuple[Image.Image, Image.Image | None]:
    """The object's coverage, and for text blocks the glyphs printed on it."""
    mask = Image.new("L", (bw, bh))
    draw = ImageDraw.Draw(mask)
    glyphs = None
    if kind == "ellipse":
        draw.ellipse([0, 0, bw - 1, bh - 1], fill=255)
    elif kind == "rect":
        draw.rounded_rectangle([0, 0, bw - 1, bh - 1], radius=int(rng.uniform(0, 0.3) * min(bw, bh)), fill=255)
    elif kind == "polygon":
        n = int(rng.integers(3, 8))
        angles = np.sort(rng.uniform(0, 2 * np.pi, n))
        radii = rng.uniform(0.55, 1.0, n)
        xs = (0.5 + 0.5 * radii * np.cos(angles)) * (bw - 1)
        ys = (0.5 + 0.5 * radii * np.sin(angles)) * (bh - 1)
        draw.polygon(list(zip(xs.tolist(), ys.tolist(), strict=True)), fill=255)
    elif kind == "line":
        width = max(3, int(rng.uniform(0.08, 0.25) * min(bw, bh)))
        if rng.random() < 0.5:
            draw.line([(0, rng.uniform(0, bh)), (bw - 1, rng.uniform(0, bh))], fill=255, width=width)
        else:
            draw.line([(rng.uniform(0, bw), 0), (rng.uniform(0, bw), bh - 1)], fill=255, width=width)
    else:  # a card or sign with a few lines of text on it
        draw.rectangle([0, 0, bw - 1, bh - 1], fill=255)
        glyphs = Image.new("L", (bw, bh))
        rows = int(rng.integers(2, 6))
        size = max(6, int(bh / rows * 0.7))
        pen = ImageDraw.Draw(glyphs)
        for r in range(rows):
            pen.text((size * 0.3, r * bh / rows + size * 0.1), _random_words(rng, 6), fill=255, font=_font(size))
    return mask, glyphs


def _clip_box(shape: tuple[int, ...], x0: int, y0: int, w: int, h: int) -> tuple[slice, slice, slice, slice] | None:
    """Slices of the image and of a patch placed with its top-left at (x0, y0), clipped to the image."""
    ix0, iy0, ix1, iy1 = max(x0, 0), max(y0, 0), min(x0 + w, shape[1]), min(y0 + h, shape[0])
    if ix1 <= ix0 or iy1 <= iy0:
        return None
    return slice(iy0, iy1), slice(ix0, ix1), slice(iy0 - y0, iy1 - y0), slice(ix0 - x0, ix1 - x0)


def _draw_object(
    img: np.ndarray,
    texture: np.ndarray,
    style: _Style,
    box: tuple[float, float, float, float],
    rng: np.random.Generator,
) -> None:
    cx, cy, bw, bh = box
    w, h = max(4, int(bw)), max(4, int(bh))
    x0, y0 = int(cx - w / 2), int(cy - h / 2)
    kind = str(rng.choice(OBJECT_KINDS, p=OBJECT_WEIGHTS))
    mask, glyphs = _object_masks(rng, kind, w, h)
    alpha = np.asarray(mask, np.float32) / 255
    lx, ly = style.light
    # Drop shadow: the blurred silhouette, pushed away from the light.
    pad = int(0.2 * min(w, h)) + 2  # room for the blur, so the shadow has no straight edges
    padded = Image.new("L", (w + 2 * pad, h + 2 * pad))
    padded.paste(mask, (pad, pad))
    soft = np.asarray(padded.filter(ImageFilter.GaussianBlur(0.06 * min(w, h))), np.float32) / 255
    off = 0.08 * min(w, h)
    shadow_box = _clip_box(img.shape, int(x0 - pad - lx * off), int(y0 - pad - ly * off), w + 2 * pad, h + 2 * pad)
    if shadow_box:
        iy, ix, py, px = shadow_box
        img[iy, ix] *= 1 - style.shadow * soft[py, px, None]
    box_slices = _clip_box(img.shape, x0, y0, w, h)
    if not box_slices:
        return
    iy, ix, py, px = box_slices
    colour = _colour(rng, (0.15, 0.95), (0.12, 0.95))
    # Shading: brighter on the side facing the light, plus a highlight on round objects.
    u = np.linspace(-0.5, 0.5, w, dtype=np.float32)[None, :]
    v = np.linspace(-0.5, 0.5, h, dtype=np.float32)[:, None]
    shade = 1 + rng.uniform(0.2, 0.6) * (-(u * lx + v * ly))
    if kind == "ellipse":
        hx, hy = -0.25 * lx, -0.25 * ly
        shade = shade + rng.uniform(0.1, 0.4) * np.exp(-((u - hx) ** 2 + (v - hy) ** 2) / 0.03)
    surface = colour * shade[py, px, None] * (1 + 0.5 * style.texture_amp * texture[iy, ix, None])
    if glyphs is not None:
        ink = _colour(rng, (0.0, 0.9), (0.0, 0.35))
        g = np.asarray(glyphs, np.float32)[py, px, None] / 255
        surface = surface * (1 - g) + ink * g
    a = alpha[py, px, None]
    img[iy, ix] = img[iy, ix] * (1 - a) + surface * a


def _render(style: _Style, rng: np.random.Generator) -> Image.Image:
    """One original: everything not fixed by the style is drawn from `rng`."""
    texture = _texture(rng, style)
    img = _background(style, texture)
    for box in style.boxes:
        _draw_object(img, texture, style, box, rng)
    grain = rng.standard_normal(img.shape[:2], dtype=np.float32) * np.float32(rng.uniform(0.01, 0.03))
    img += grain[..., None]
    img = np.clip(img * 255 + 0.5, 0, 255)
    pic = Image.fromarray(img.astype(np.uint8)).filter(ImageFilter.GaussianBlur(style.blur))
    noise = rng.standard_normal((style.height, style.width, 3), dtype=np.float32) * np.float32(
        rng.uniform(*style.noise)
    )
    noise += np.asarray(pic, np.float32) + 0.5
    return Image.fromarray(np.clip(noise, 0, 255, out=noise).astype(np.uint8))


# -- copies -----------------------------------------------------------------------------------------------------


def _encode(img: Image.Image, fmt: str, rng: np.random.Generator, quality: int | None = None) -> bytes:
    buf = io.BytesIO()
    if fmt == "jpeg":
        img.save(buf, "JPEG", quality=quality if quality is not None else int(rng.integers(85, 96)))
    else:
        img.save(buf, "PNG", compress_level=1)  # zlib's higher levels cost seconds on noisy photos
    return buf.getvalue()


def _inner_rotated_box(w: int, h: int, degrees: float) -> tuple[int, int]:
    """Largest axis-aligned rectangle inside a w x h rectangle rotated by `degrees` (centred)."""
    a = math.radians(abs(degrees))
    sin_a, cos_a = math.sin(a), math.cos(a)
    long_side, short_side = max(w, h), min(w, h)
    if short_side <= 2 * sin_a * cos_a * long_side:
        x = 0.5 * short_side
        wr, hr = (x / sin_a, x / cos_a) if w >= h else (x / cos_a, x / sin_a)
    else:
        cos_2a = cos_a * cos_a - sin_a * sin_a
        wr, hr = (w * cos_a - h * sin_a) / cos_2a, (h * cos_a - w * sin_a) / cos_2a
    return int(wr) - 2, int(hr) - 2  # a margin for the resampling kernel at the edge


def _watermark(img: Image.Image, rng: np.random.Generator) -> tuple[Image.Image, str]:
    text = str(rng.choice(WATERMARKS)).format(_random_words(rng, 1).lower())
    target = rng.uniform(0.10, 0.20) * img.width
    font = _font(int(100 * target / max(1, _font(100).getbbox(text)[2])))
    left, _, right, bottom = font.getbbox(text)
    margin = int(rng.uniform(0.02, 0.04) * min(img.size))
    corner = int(rng.integers(4))
    x = margin if corner in (0, 2) else img.width - margin - right
    y = margin if corner in (0, 1) else img.height - margin - bottom
    value = 255 if rng.random() < 0.7 else 0
    opacity = int(rng.integers(110, 200))
    layer = Image.new("RGBA", img.size, (0, 0, 0, 0))
    pen = ImageDraw.Draw(layer)
    pen.text((x + 1, y + 1), text, fill=(255 - value,) * 3 + (opacity // 2,), font=font)  # a faint outline
    pen.text((x, y), text, fill=(value,) * 3 + (opacity,), font=font)
    out = Image.alpha_composite(img.convert("RGBA"), layer).convert("RGB")
    return out, f"text={text!r} width={right - left}px corner={corner} opacity={opacity}"


def _jpeg_with_comment(data: bytes, comment: bytes) -> bytes:
    """Insert a COM segment after SOI: other bytes, the same decoded pixels."""
    return data[:2] + b"\xff\xfe" + (len(comment) + 2).to_bytes(2, "big") + comment + data[2:]


def _make_copy(item: _Item, original: _Item, data: bytes, rng: np.random.Generator) -> tuple[bytes, str]:
    """The bytes of `item`, one transform away from the original's `data`, and a description of it."""
    kind = item.kind
    if kind == "exact":
        return data, "byte copy"
    src = Image.open(io.BytesIO(data)).convert("RGB")
    if kind == "lossless":
        if original.fmt == "png":
            buf = io.BytesIO()
            info = PngImagePlugin.PngInfo()
            info.add_text("Software", "culturebench re-save")
            level = int(rng.choice([0, 2, 3]))
            src.save(buf, "PNG", compress_level=level, pnginfo=info)
            return buf.getvalue(), f"PNG re-save compress_level={level} with a text chunk"
        if item.fmt == "png":
            return _encode(src, "png", rng), "decoded JPEG pixels saved as PNG"
        return _jpeg_with_comment(data, b"culturebench re-save"), "JPEG with a COM segment inserted"
    if kind == "jpeg":
        q = int(rng.integers(20, 61))
        return _encode(src, "jpeg", rng, quality=q), f"quality={q}"
    if kind == "resize":
        scale = rng.uniform(0.4, 0.8)
        resample = [Image.Resampling.LANCZOS, Image.Resampling.BICUBIC, Image.Resampling.BILINEAR][rng.integers(3)]
        out = src.resize((max(1, round(src.width * scale)), max(1, round(src.height * scale))), resample)
        detail = f"scale={scale:.2f} {resample.name}"
    elif kind == "crop":
        sides = rng.random(4) < 0.5
        if not sides.any():
            sides[rng.integers(4)] = True
        frac = np.where(sides, rng.uniform(0.02, 0.06, 4), 0.0)  # left, top, right, bottom
        w, h = src.size
        out = src.crop((round(frac[0] * w), round(frac[1] * h), w - round(frac[2] * w), h - round(frac[3] * h)))
        detail = "ltrb=" + ",".join(f"{f:.3f}" for f in frac)
    elif kind == "brightness":
        factor = rng.uniform(0.75, 0.85) if rng.random() < 0.5 else rng.uniform(1.15, 1.30)
        out = ImageEnhance.Brightness(src).enhance(factor)
        detail = f"factor={factor:.3f}"
    elif kind == "blur":
        radius = rng.uniform(1.0, 2.5)
        out = src.filter(ImageFilter.GaussianBlur(radius))
        detail = f"radius={radius:.2f}"
    elif kind == "rotate":
        degrees = rng.uniform(2, 5) * (1 if rng.random() < 0.5 else -1)
        turned = src.rotate(degrees, resample=Image.Resampling.BICUBIC)
        iw, ih = _inner_rotated_box(src.width, src.height, degrees)
        left, top = (src.width - iw) // 2, (src.height - ih) // 2
        out = turned.crop((left, top, left + iw, top + ih))  # cropped back so no fill corner shows
        detail = f"degrees={degrees:.2f} crop={iw}x{ih}"
    elif kind == "watermark":
        out, detail = _watermark(src, rng)
    else:
        raise ValueError(f"unknown copy kind {kind!r}")
    return _encode(out, item.fmt, rng), detail


# -- writing ----------------------------------------------------------------------------------------------------


def _write_family(job: tuple[int, int, list[_Item], str, Mix]) -> dict[str, FileTruth]:
    seed, family, items, image_dir, mix = job
    style = _draw_style(np.random.default_rng([seed, family, 0]), mix)
    by_index = {i.index: i for i in items}
    data: dict[int, bytes] = {}
    truth = {}
    for item in items:  # originals precede their copies in the plan
        rng = np.random.default_rng([seed, family, 1000 + item.index])
        if item.source is None:
            pixels = _render(style, np.random.default_rng([seed, family, 1, item.content]))
            data[item.index] = _encode(pixels, item.fmt, rng)
            detail, source = f"{style.width}x{style.height} {item.fmt}", None
        else:
            original = by_index[item.source]
            data[item.index], detail = _make_copy(item, original, data[item.source], rng)
            source = original.name
        (Path(image_dir) / item.name).write_bytes(data[item.index])
        truth[item.name] = FileTruth(group=item.group, kind=item.kind, family=family, source=source, detail=detail)
    return truth


def generate_corpus(
    out_dir: Path, seed: int = 0, bases: int = 240, workers: int = 2, mix: str | Mix = DEFAULT_MIX
) -> CorpusTruth:
    """Write the corpus into `out_dir/images` and its truth into `out_dir/truth.json`.

    An `out_dir` that already holds a corpus (marked by MARKER_FILE, even a half-written one) is regenerated; any
    other non-empty images folder is refused rather than deleted.
    """
    mix = MIXES[mix] if isinstance(mix, str) else mix
    out_dir = Path(out_dir)
    image_dir = out_dir / IMAGE_DIR
    if image_dir.exists() and any(image_dir.iterdir()):
        if not (out_dir / MARKER_FILE).exists():
            raise FileExistsError(f"{image_dir} is not empty and holds no corpus; refusing to overwrite it")
        shutil.rmtree(image_dir)
    image_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MARKER_FILE).write_text("written by perf.dedup_vs_imagededup.corpus\n")
    jobs = [(seed, family, items, str(image_dir), mix) for family, items in enumerate(_plan(seed, bases, mix))]
    files: dict[str, FileTruth] = {}
    if workers <= 1:
        parts: Iterable[dict[str, FileTruth]] = map(_write_family, jobs)
    else:
        pool = ProcessPoolExecutor(max_workers=workers)
        parts = pool.map(_write_family, jobs, chunksize=4)
    for part in parts:
        files.update(part)
    if workers > 1:
        pool.shutdown()
    truth = CorpusTruth(image_dir=image_dir, seed=seed, bases=bases, files=files, mix=mix)
    truth.save(out_dir / TRUTH_FILE)
    return truth


# -- a picture of it, for people --------------------------------------------------------------------------------


def _pick_families(truth: CorpusTruth, count: int) -> list[int]:
    """Families with a sibling, the most varied copies first."""
    copies: dict[int, set[str]] = {}
    with_sibling = {t.family for t in truth.files.values() if t.kind == "sibling"}
    for t in truth.files.values():
        if t.kind in COPY_KINDS and t.kind not in ("exact", "lossless"):
            copies.setdefault(t.family, set()).add(t.kind)
    ranked = sorted(with_sibling, key=lambda f: (-len(copies.get(f, ())), f))
    return ranked[:count]


def save_montage(truth: CorpusTruth, out_path: Path, families: list[int] | None = None, tile: int = 280) -> Path:
    """A grid with one row per family: the base, its copies, then each sibling and its copies, captioned."""
    families = families if families is not None else _pick_families(truth, 2)
    rows = []
    for family in families:
        members = [(n, t) for n, t in truth.files.items() if t.family == family]
        rows.append(sorted(members, key=lambda m: (m[1].group, m[1].source is not None, m[1].kind, m[0])))
    caption_h = 40
    width = tile * max(len(r) for r in rows)
    sheet = Image.new("RGB", (width, len(rows) * (tile + caption_h)), (255, 255, 255))
    pen = ImageDraw.Draw(sheet)
    font = _font(13)
    for r, row in enumerate(rows):
        for c, (name, t) in enumerate(row):
            with Image.open(truth.image_dir / name) as img:
                thumb = img.convert("RGB")
                size = img.size
            thumb.thumbnail((tile - 8, tile - 8))
            x, y = c * tile, r * (tile + caption_h)
            sheet.paste(thumb, (x + (tile - thumb.width) // 2, y + (tile - thumb.height) // 2))
            label = t.kind if t.source is None else f"copy: {t.kind}"
            pen.text((x + 4, y + tile), f"{label}  group {t.group}", fill=(0, 0, 0), font=font)
            pen.text((x + 4, y + tile + 16), f"{name} {size[0]}x{size[1]}", fill=(90, 90, 90), font=font)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(out_path)
    return out_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bases", type=int, default=240)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--mix", choices=sorted(MIXES), default=DEFAULT_MIX)
    parser.add_argument("--examples", type=Path, help="also write a montage of two families to this PNG")
    args = parser.parse_args()
    start = time.perf_counter()
    truth = generate_corpus(args.out_dir, seed=args.seed, bases=args.bases, workers=args.workers, mix=args.mix)
    seconds = time.perf_counter() - start
    print(f"{len(truth.files)} files in {seconds:.1f} s: {dict(sorted(truth.kind_counts().items()))}")
    if args.examples:
        print(f"montage: {save_montage(truth, args.examples)}")


if __name__ == "__main__":
    main()
