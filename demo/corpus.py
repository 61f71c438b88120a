"""Generate the labelled demo corpus: real photos cannot be shipped, so the offline demo draws its own.

The corpus is laid out for the local-folder searcher (`<country>/<concept>/<eng|nav>/<NN>_<name>.<ext>`; the
searcher ranks a folder's files from 1 in name order) and holds, on purpose, what a web crawl holds:
near-duplicates (byte copies, the same pixels re-saved as PNG, JPEG re-encodes, resizes, brightness shifts) and
bad files (HTML saved as .jpg, truncated and corrupt JPEGs, a tiny image, a decompression bomb).
`ground_truth.json` lists every planted case so tests can check the curation.

It also holds look-alikes: the same scene from another viewpoint, or at night. The 3XCM annotation guideline
(paper App. J) keeps such pairs when the change is meaningful, so they are the cases no threshold can settle and
people must review: each is calibrated against the default perceptual tier to land in its review band.

Memory stays bounded at any size: the whole layout (names, sources, the seeded choices) is planned first, then each
concept is drawn on its own (in worker processes for a large corpus), holding only that concept's bytes and
dedup features, since every check is scoped within a concept. A planted copy of another concept's picture redraws
it from its recipe (`draw_scene` is deterministic). The output does not depend on the worker count.
"""

from __future__ import annotations

import hashlib
import io
import json
import multiprocessing
import os
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from functools import cache

import numpy as np
from PIL import Image, ImageDraw, ImageEnhance, ImageFont
from pydantic import BaseModel, ConfigDict, Field

from collectors.search_types import query_tag
from curation.image_align import fit_alignment, prepare
from curation.image_dedup import PerceptualTierConfig
from curation.image_hashing import dhash_bulk, phash_bulk
from curation.image_thumbnails import (
    ALIGN_SIDE,
    HASH_SIDE,
    PHASH_SIDE,
    _reduce_to_draft_scale,
    decode_reduced,
)
from data.reference import ENGLISH, Country, ReferencePack, pack_or_default
from data.workspace import Storage

#: A pack without a `demo` section draws its first concepts, this many, in every one of its countries.
DEMO_CONCEPT_COUNT = 4


def demo_selection(reference: str | None) -> tuple[list[str], list[str]]:
    """The demo's (countries, concepts) for the pack at `reference` (None: the default pack): its pack.json's
    `demo`, or every country and the first concepts."""
    pack = pack_or_default(reference)
    chosen = pack.info.demo
    countries = list(chosen.countries) if chosen and chosen.countries else [c.name for c in pack.countries]
    concepts = list(chosen.concepts) if chosen else [c.concept for c in pack.concepts[:DEMO_CONCEPT_COUNT]]
    return countries, concepts


def _default_demo() -> tuple[list[str], list[str]]:
    return demo_selection(None)


class DemoCorpusConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    countries: list[str] = Field(default_factory=lambda: _default_demo()[0])
    concepts: list[str] = Field(default_factory=lambda: _default_demo()[1])
    images_per_query: int = Field(default=3, ge=1, le=9)
    width: int = Field(default=320, ge=96)
    height: int = Field(default=240, ge=96)
    seed: int = 0
    plant_duplicates: bool = True
    plant_bad_files: bool = True
    plant_lookalikes: bool = Field(
        default=True,
        description="Plant look-alikes (another viewpoint, night) that the image dedup leaves for human review.",
    )


class PlantedDuplicate(BaseModel):
    path: str
    duplicate_of: str
    # exact_bytes | exact_pixels | reencode | resize | brightness | cross_concept_copy | cross_concept_pixel_copy;
    # other_view | night
    kind: str


class GroundTruth(BaseModel):
    duplicates: list[PlantedDuplicate] = Field(default_factory=list)
    lookalikes: list[PlantedDuplicate] = Field(default_factory=list)  # for review, not duplicates: see LOOKALIKE_KINDS
    bad_files: dict[str, str] = Field(default_factory=dict)  # relative path -> expected error class
    originals: list[str] = Field(default_factory=list)


def _rng(seed: int, *key: object) -> np.random.Generator:
    digest = hashlib.sha256(repr((seed, *key)).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


#: How far the backdrop pans relative to the nearest shape when the camera moves (it is further away).
_BACKDROP_PARALLAX = 0.3


def draw_scene(
    rng: np.random.Generator, width: int, height: int, label: str, view: tuple[float, float] = (0.0, 0.0)
) -> Image.Image:
    """A distinct picture: a smooth random colour field, a few shapes and a caption.

    `view` moves the camera by that fraction of the width and height: the far backdrop pans a little and each
    shape shifts by its nearness (later shapes are drawn on top, so nearer). That parallax is what a real change
    of viewpoint does and what no affine alignment undoes. The same rng state draws the same scene at any view."""
    field = rng.integers(0, 256, size=(6, 8, 3), dtype=np.uint8)
    dx, dy = view
    if dx or dy:
        mx, my = int(np.ceil(abs(dx) * width * _BACKDROP_PARALLAX)), int(np.ceil(abs(dy) * height * _BACKDROP_PARALLAX))
        backdrop = Image.fromarray(field, "RGB").resize((width + 2 * mx, height + 2 * my), Image.Resampling.BICUBIC)
        ox, oy = mx + round(dx * width * _BACKDROP_PARALLAX), my + round(dy * height * _BACKDROP_PARALLAX)
        image = backdrop.crop((ox, oy, ox + width, oy + height))
    else:
        image = Image.fromarray(field, "RGB").resize((width, height), Image.Resampling.BICUBIC)
    draw = ImageDraw.Draw(image)
    count = int(rng.integers(3, 7))
    for index in range(count):
        x0, y0 = int(rng.integers(0, width - 40)), int(rng.integers(0, height - 40))
        x1, y1 = x0 + int(rng.integers(20, width // 2)), y0 + int(rng.integers(20, height // 2))
        colour = tuple(int(v) for v in rng.integers(0, 256, size=3))
        nearness = (index + 1) / count
        sx, sy = round(dx * width * nearness), round(dy * height * nearness)
        box = (x0 + sx, y0 + sy, x1 + sx, y1 + sy)
        if rng.random() < 0.5:
            draw.ellipse(box, fill=colour)
        else:
            draw.rectangle(box, fill=colour)
    draw.rectangle((0, height - 22, width, height), fill=(0, 0, 0))
    # The font ImageDraw loads by default, loaded once: Pillow would rebuild it for every picture.
    draw.text((6, height - 18), label, fill=(255, 255, 255), font=_default_font())
    return image


@cache
def _default_font() -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default()


def night_scene(picture: Image.Image, strength: float, rng: np.random.Generator) -> Image.Image:
    """The same scene at night (`strength` 0..1): a blue cast, darker, the sky darkest, and a few warm lamps lit.

    None of it is a plain change of brightness, which pHash and correlation ignore (and rightly merge): the cast
    moves each colour's grey level by a different amount, and the gamma, the sky and the lamps change the
    picture's structure."""
    w, h = picture.size
    levels = np.arange(256, dtype=np.float32) / 255
    cast = np.array((1 - 0.9 * strength, 1 - 0.6 * strength, 1.0), dtype=np.float32)
    sky = np.linspace(1 - 0.6 * strength, 1.0, h, dtype=np.float32)[:, None, None]  # darkest at the top
    # The per-pixel float32 steps on the 256 levels of each channel, looked up: the same values, without a power
    # of every pixel.
    table = (levels ** (1 + 0.3 * strength) * (1 - 0.4 * strength))[:, None] * cast
    rgb = np.asarray(picture.convert("RGB"))
    pixels = np.stack([table[:, c].take(rgb[:, :, c]) for c in range(3)], axis=2) * sky
    image = Image.fromarray(np.clip(pixels * 255, 0, 255).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(image)
    for _ in range(4):
        x, y = int(rng.integers(10, w - 10)), int(rng.integers(10, h - 40))
        r = max(1, round(int(rng.integers(3, 8)) * strength))
        draw.ellipse((x - r, y - r, x + r, y + r), fill=(255, 230, 160))
    return image


def reframe(picture: Image.Image, zoom: float, degrees: float, shift: tuple[float, float]) -> Image.Image:
    """The picture rotated, zoomed in and shifted (fractions of the frame), at its own size: a re-taken shot."""
    w, h = picture.size
    turned = picture.rotate(degrees, resample=Image.Resampling.BICUBIC)
    cw, ch = round(w / zoom), round(h / zoom)
    x0, y0 = round((w - cw) / 2 + shift[0] * w), round((h - ch) / 2 + shift[1] * h)
    return turned.crop((x0, y0, x0 + cw, y0 + ch)).resize((w, h), Image.Resampling.LANCZOS)


def _jpeg(image: Image.Image, quality: int = 90) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def _png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _bomb_png() -> bytes:
    """A small PNG whose header claims 10,000 x 10,000 pixels (100 MP)."""
    return _png(Image.new("1", (10_000, 10_000)))


#: Look-alike kinds, after the 3XCM annotation guideline (paper App. J): a meaningful change of viewpoint or of time
#: of day keeps both images; whether this one is meaningful is for the reviewers.
LOOKALIKE_KINDS = ("other_view", "night")
#: The settings tried for each look-alike, mildest first: the camera move (fraction of the frame) and the night
#: strength. The one whose aligned correlation sits nearest the middle of the review band is planted.
_VIEW_STEPS = tuple(round(0.015 * k, 3) for k in range(1, 15))
_NIGHT_STEPS = tuple(round(0.05 * k, 2) for k in range(1, 21))
#: A planted look-alike keeps this far inside the band's edges, so a small change of decoder or of OpenCV (or a
#: draft decode against a full one) does not tip it out.
_MARGIN_BITS = 2
_MARGIN_CORRELATION = 0.01
#: The night shot's reframing: zoom, degrees of rotation (measured on the demo corpus: small enough for the ECC
#: alignment to undo, large enough to lift the pHash distance past the merge distance).
_NIGHT_REFRAME_ZOOM = 1.1
_NIGHT_REFRAME_DEGREES = 2.0
_SOURCES_TRIED = 8  # originals tried per look-alike before that look-alike is left out


#: Threads per drawing process that write files: each write syncs the file and its folder, which mostly waits.
_WRITERS = 4
#: Below this many originals the corpus is drawn in this process: starting workers would cost more than it saves.
_POOL_MIN_ORIGINALS = 1500

_LANCZOS = Image.Resampling.LANCZOS
Features = tuple[int, int, np.ndarray]  # pHash, dHash, the 64x64 alignment thumbnail


@dataclass(frozen=True)
class BandScores:
    """What the perceptual tier of curation/image_dedup.py sees of a pair."""

    phash: int
    dhash: int
    plain: float  # unaligned thumbnail correlation (the prefilter)
    aligned: float  # ECC correlation after alignment


class _BandCheck:
    """Scores pairs as the image dedup stage will (same thumbnails, hashes and alignment), to calibrate look-alikes
    into the review band of `tier` and keep them clear of every other image of their concept. It holds one
    concept's images only: the dedup never compares across concepts."""

    def __init__(self, tier: PerceptualTierConfig) -> None:
        self.tier = tier
        self._features: dict[str, Features] = {}

    def add(self, rel: str, data: bytes) -> None:
        self._features[rel] = self.features(data)

    @staticmethod
    def features(data: bytes) -> Features:
        """The hashes and alignment thumbnail `thumbnails(data)` gives (tests/demo/test_corpus_scale.py holds
        them equal), cut from the same reduced decode without the chroma thumbnail the calibration never uses."""
        grey = _reduce_to_draft_scale(decode_reduced(data).grey)
        phash_input = np.asarray(grey.resize((PHASH_SIDE, PHASH_SIDE), _LANCZOS, reducing_gap=2.0), np.float32)
        dhash_input = np.asarray(grey.resize((HASH_SIDE + 1, HASH_SIDE), _LANCZOS, reducing_gap=2.0), np.float32)
        align_input = np.asarray(grey.resize((ALIGN_SIDE, ALIGN_SIDE), Image.Resampling.BOX), dtype=np.uint8)
        phash = int(phash_bulk(phash_input[None])[0])
        dhash = int(dhash_bulk(dhash_input[None])[0])
        return phash, dhash, align_input

    def scores(self, rel: str, candidate: Features) -> BandScores:
        """AlignedScorer's plain and aligned correlation of the pair, computed as it does (same float32 steps) but
        without a thread pool per pair."""
        phash, dhash, thumb = self._features[rel]
        prepared = (prepare(thumb), prepare(candidate[2]))
        flat = np.stack([p.ravel() for p in prepared])
        flat -= flat.mean(axis=1, keepdims=True)
        flat /= np.maximum(np.linalg.norm(flat, axis=1, keepdims=True), 1e-6)
        plain = float(np.einsum("ij,ij->i", flat[[0]], flat[[1]]).astype(np.float32)[0])
        aligned = float(np.float32(fit_alignment(*prepared)[0]))
        return BandScores((phash ^ candidate[0]).bit_count(), (dhash ^ candidate[1]).bit_count(), plain, aligned)

    def in_review_band(self, s: BandScores) -> bool:
        """Checked by alignment, neither merged nor rejected, with the margins kept."""
        t = self.tier
        return (
            t.merge_max_distance + _MARGIN_BITS < s.phash <= t.verify_max_distance - _MARGIN_BITS
            and s.dhash <= t.dhash_max_distance - _MARGIN_BITS
            and s.plain >= t.align_prefilter_min + 5 * _MARGIN_CORRELATION
            and t.align_review_min + _MARGIN_CORRELATION <= s.aligned <= t.align_merge_min - _MARGIN_CORRELATION
        )

    def clear_of_others(self, candidate: Features, source: str) -> bool:
        """The tier records no pair (merge or review) between the candidate and any other image of the concept."""
        t = self.tier
        for rel, (phash, dhash, _) in self._features.items():
            if rel == source:
                continue
            near = (phash ^ candidate[0]).bit_count() <= t.verify_max_distance + _MARGIN_BITS
            if not near or (dhash ^ candidate[1]).bit_count() > t.dhash_max_distance + _MARGIN_BITS:
                continue
            s = self.scores(rel, candidate)
            if s.phash <= t.merge_max_distance + _MARGIN_BITS or (
                s.plain >= t.align_prefilter_min - 5 * _MARGIN_CORRELATION
                and s.aligned >= t.align_review_min - _MARGIN_CORRELATION
            ):
                return False
        return True


def _decode(data: bytes) -> Image.Image:
    """A written JPEG as the pictures derived from it see it (its decoded pixels, not the drawing)."""
    return Image.open(io.BytesIO(data)).convert("RGB")


def lookalike_candidates(
    kind: str, config: DemoCorpusConfig, source: bytes, recipe: tuple[tuple[object, ...], str]
) -> Iterator[bytes]:
    """The candidate look-alikes of an original (`source`, its JPEG bytes), mildest first, as JPEG bytes; `recipe`
    is the original's rng key and caption.

    other_view: the scene redrawn from a camera moved by each of _VIEW_STEPS (parallax, `draw_scene`).
    night: the scene at night of each of _NIGHT_STEPS, shot again from about the same spot: the slight reframing
    (a duplicate on its own, App. J) is undone by the alignment but moves the pHash off the merge distance, which a
    change of light alone barely does."""
    key, label = recipe
    sign = 1.0 if _rng(config.seed, "lookalike", kind, *key).random() < 0.5 else -1.0  # which way the camera moves
    if kind == "other_view":
        for step in _VIEW_STEPS:
            view = (sign * step, 0.25 * step)  # mostly sideways, as a visitor stepping along the street
            yield _jpeg(draw_scene(_rng(config.seed, *key), config.width, config.height, label, view))
    elif kind == "night":
        shot = reframe(_decode(source), _NIGHT_REFRAME_ZOOM, sign * _NIGHT_REFRAME_DEGREES, (sign * 0.02, 0.01))
        for step in _NIGHT_STEPS:  # the same lamps at every step
            yield _jpeg(night_scene(shot, step, _rng(config.seed, "lamps", *key)))
    else:
        raise ValueError(f"unknown look-alike kind {kind!r}")


def _calibrated_lookalike(
    kind: str,
    source: str,
    config: DemoCorpusConfig,
    source_bytes: bytes,
    recipe: tuple[tuple[object, ...], str],
    check: _BandCheck,
) -> bytes | None:
    """The candidate whose pair with `source` sits nearest the middle of the review band, clear of every other
    image of the concept; None if none does."""
    tier = check.tier
    centre = (tier.align_review_min + tier.align_merge_min) / 2
    best: tuple[float, bytes] | None = None
    for data in lookalike_candidates(kind, config, source_bytes, recipe):
        features = check.features(data)
        scores = check.scores(source, features)
        if scores.plain < tier.align_prefilter_min or scores.aligned < tier.align_review_min:
            break  # past the band: stronger candidates only move further away
        if not check.in_review_band(scores):
            continue
        gap = abs(scores.aligned - centre)
        if (best is None or gap < best[0]) and check.clear_of_others(features, source):
            best = (gap, data)
    return None if best is None else best[1]


def country_folder(country: Country) -> str:
    """A country's corpus folder: its slug with `_` for a space (`saudi_arabia`), so no corpus path holds a space;
    the local searcher matches either form."""
    return country.slug.replace(" ", "_")


# -- the plan: every name and seeded choice, decided before a single picture is drawn ------------------------------


@dataclass(frozen=True)
class _Original:
    rel: str
    key: tuple[str, str, str, int]  # the rng key its picture is drawn from
    label: str  # its caption


@dataclass(frozen=True)
class _Copy:
    """A planted duplicate, derived from `source` (possibly of another concept) by `kind`."""

    rel: str
    source: _Original
    kind: str


@dataclass(frozen=True)
class _ConceptTask:
    """Everything one concept's worker draws and writes; nothing in it refers to another concept's files."""

    config: DemoCorpusConfig
    root: str
    originals: tuple[_Original, ...]  # in the ground truth's order
    copies: tuple[_Copy, ...]  # planted duplicates that land in this concept's folders
    lookalike_rank: int | None  # the file number of its look-alikes; None: none planted
    planted_sources: frozenset[str]  # originals that already have a copy: no look-alike is made of them
    folder_sizes: dict[str, int] = field(default_factory=dict)  # files per folder before the look-alikes

    @property
    def units(self) -> int:
        """Its share of the progress: the files it writes, each look-alike kind counting once, planted or not."""
        return len(self.originals) + len(self.copies) + (len(LOOKALIKE_KINDS) if self.lookalike_rank is not None else 0)


@dataclass
class _Plan:
    originals: list[_Original]
    tasks: list[_ConceptTask]
    duplicates: list[PlantedDuplicate]
    bad_files: dict[str, tuple[bytes, str]]  # relative path -> (its bytes, its expected error class)


def _draw_original(config: DemoCorpusConfig, original: _Original) -> bytes:
    return _jpeg(draw_scene(_rng(config.seed, *original.key), config.width, config.height, original.label))


def _plan(config: DemoCorpusConfig, root: str, pack: ReferencePack) -> _Plan:
    countries = [pack.resolve_country(c) for c in config.countries]
    # In name order, and pictures seeded by name: the corpus does not move when concepts are renumbered.
    concepts = sorted((c for c in pack.concepts if c.concept in config.concepts), key=lambda c: c.concept)
    if len(concepts) != len(set(config.concepts)):
        known = {c.concept for c in concepts}
        raise ValueError(f"unknown demo concepts: {sorted(set(config.concepts) - known)}")

    folders: list[str] = []  # country by country, as the originals
    originals: list[_Original] = []
    for country in countries:
        # One folder per query: English, the country's first language (`nav`), and `nav-<code>` for each other one.
        langs = ["eng"] + [query_tag("nav", code, country.language_code) for code in country.language_codes]
        langs = [lang for lang in langs if lang != "nav" or country.language_code != ENGLISH]
        for concept in concepts:
            name = concept.concept.replace(" ", "_")
            for lang in langs:
                folder = f"{country_folder(country)}/{name}/{lang}"
                folders.append(folder)
                # File names count from 00; the searcher ranks a folder's files in name order from 1.
                for rank in range(config.images_per_query):
                    key = (country_folder(country), concept.concept, lang, rank)
                    label = f"{concept.concept} / {country.name} / {lang} #{rank}"
                    originals.append(_Original(f"{folder}/{rank:02d}_{name}.jpg", key, label))

    def concept_of(rel: str) -> str:
        return rel.split("/")[1]

    by_concept: dict[str, list[_Original]] = {}
    for original in originals:
        by_concept.setdefault(concept_of(original.rel), []).append(original)
    concept_folders: dict[str, list[str]] = {}
    for folder in folders:
        concept_folders.setdefault(concept_of(folder), []).append(folder)
    names = sorted(by_concept)
    folder_sizes: Counter[str] = Counter({folder: config.images_per_query for folder in folders})
    copies: dict[str, list[_Copy]] = {name: [] for name in names}
    duplicates: list[PlantedDuplicate] = []

    def plant(copy: _Copy) -> None:
        copies[concept_of(copy.rel)].append(copy)
        duplicates.append(PlantedDuplicate(path=copy.rel, duplicate_of=copy.source.rel, kind=copy.kind))
        folder_sizes[copy.rel.rsplit("/", 1)[0]] += 1

    # The seeded choices are drawn in one sequence, in this order, whatever the workers do later.
    rng = _rng(config.seed, "plant")
    extra_rank = config.images_per_query  # planted files sort after the originals of their folder
    if config.plant_duplicates:
        kinds = ["exact_bytes", "exact_pixels", "reencode", "resize", "brightness"]
        for name in names:
            for kind in kinds:
                source = by_concept[name][int(rng.integers(len(by_concept[name])))]
                target_folder = concept_folders[name][int(rng.integers(len(concept_folders[name])))]
                ext = "png" if kind == "exact_pixels" else "jpg"
                plant(_Copy(f"{target_folder}/{extra_rank:02d}_dup_{kind}.{ext}", source, kind))
                extra_rank += 1
        # The same picture under another concept must NOT be merged (dedup is scoped within a concept), but it
        # shows both concepts: the build gives each copy the other's concept (curation/copies.py). One byte copy,
        # and one copy of the same pixels re-saved as PNG.
        if len(names) > 1:
            cross = [
                ("cross_concept_copy", by_concept[names[0]][0], names[1], "jpg"),
                ("cross_concept_pixel_copy", by_concept[names[0]][1], names[-1], "png"),
            ]
            for kind, original, target_concept, ext in cross:
                target_folder = concept_folders[target_concept][0]
                plant(_Copy(f"{target_folder}/{extra_rank:02d}_{kind.replace('_copy', '')}.{ext}", original, kind))
                extra_rank += 1

    bad_files: dict[str, tuple[bytes, str]] = {}
    if config.plant_bad_files:
        sample = _draw_original(config, originals[0])
        bad = {
            "html_as_image.jpg": (
                b"<!DOCTYPE html><html><body>403 Forbidden</body></html>" * 8,
                "not_an_image",
            ),
            "truncated.jpg": (sample[: len(sample) * 3 // 5], "truncated"),
            "tiny.jpg": (_jpeg(Image.new("RGB", (40, 30), (200, 10, 10))), "too_small"),
            "bomb.png": (_bomb_png(), "decompression_bomb"),
            "corrupt.jpg": (sample[:200] + bytes(rng.integers(0, 256, 3000, dtype=np.uint8)), "corrupt"),
        }
        for index, (file_name, (data, error)) in enumerate(sorted(bad.items())):
            folder = folders[(index * 7) % len(folders)]
            bad_files[f"{folder}/{extra_rank + index:02d}_{file_name}"] = (data, error)
            folder_sizes[folder] += 1
        extra_rank += len(bad)

    # Look-alikes are planted last, each in its source's folder, so every file above keeps its name, its bytes and
    # its rank; one file number per concept.
    sources = frozenset(d.duplicate_of for d in duplicates)
    tasks = [
        _ConceptTask(
            config=config,
            root=root,
            originals=tuple(by_concept[name]),
            copies=tuple(copies[name]),
            lookalike_rank=extra_rank + index if config.plant_lookalikes else None,
            planted_sources=frozenset(o.rel for o in by_concept[name] if o.rel in sources),
            folder_sizes={folder: folder_sizes[folder] for folder in concept_folders[name]},
        )
        for index, name in enumerate(names)
    ]
    return _Plan(originals, tasks, duplicates, bad_files)


# -- drawing: one concept at a time -----------------------------------------------------------------------------------


def _derive(kind: str, data: bytes) -> bytes:
    """A planted duplicate of the JPEG `data`."""
    if kind in ("exact_bytes", "cross_concept_copy"):
        return data
    picture = _decode(data)
    if kind in ("exact_pixels", "cross_concept_pixel_copy"):
        return _png(picture)
    if kind == "reencode":
        return _jpeg(picture, quality=55)
    if kind == "resize":
        w, h = picture.size
        return _jpeg(picture.resize((w * 3 // 4, h * 3 // 4), Image.Resampling.LANCZOS))
    if kind == "brightness":
        return _jpeg(ImageEnhance.Brightness(picture).enhance(1.12))
    raise ValueError(f"unknown duplicate kind {kind!r}")


def _draw_concept(task: _ConceptTask) -> list[PlantedDuplicate]:
    """Draw and write one concept's originals, the duplicates planted in its folders and its look-alikes; returns
    the look-alikes. Holds this concept's bytes and features only, and drops them on return."""
    config, storage = task.config, Storage(task.root)
    lookalikes = task.lookalike_rank is not None
    check = _BandCheck(PerceptualTierConfig())  # calibrated against the default tier, the one the demo build runs
    encoded: dict[str, bytes] = {}  # this concept's originals, which its copies and look-alikes derive from
    with ThreadPoolExecutor(_WRITERS) as writers:
        written: list[Future[None]] = []

        def write(rel: str, data: bytes) -> None:
            written.append(writers.submit(storage.write_bytes, storage.path(rel), data))
            if lookalikes:  # look-alikes keep clear of every image of their concept
                check.add(rel, data)

        for original in task.originals:
            encoded[original.rel] = data = _draw_original(config, original)
            write(original.rel, data)
        for copy in task.copies:
            # A cross-concept copy's source belongs to another concept's worker: redraw it from its recipe.
            data = encoded.get(copy.source.rel) or _draw_original(config, copy.source)
            write(copy.rel, _derive(copy.kind, data))

        planted: list[PlantedDuplicate] = []
        if task.lookalike_rank is not None:
            folder_sizes = Counter(task.folder_sizes)
            recipes = {o.rel: (o.key, o.label) for o in task.originals}
            # Sources with no planted copy (so one queue row per look-alike), in a seeded order.
            candidates = [o.rel for o in task.originals if o.rel not in task.planted_sources]
            concept_key = task.originals[0].rel.split("/")[1]
            order = _rng(config.seed, "lookalike", concept_key).permutation(len(candidates))
            candidates = [candidates[k] for k in order.tolist()]
            for kind in LOOKALIKE_KINDS:
                # The least crowded folders first: the searcher keeps a query's top 10 only (paper §3.2.1).
                ranked = sorted(candidates, key=lambda r: folder_sizes[r.rsplit("/", 1)[0]])
                for source in ranked[:_SOURCES_TRIED]:
                    variant = _calibrated_lookalike(kind, source, config, encoded[source], recipes[source], check)
                    if variant is None:
                        continue
                    folder = source.rsplit("/", 1)[0]
                    rel = f"{folder}/{task.lookalike_rank:02d}_lookalike_{kind}.jpg"
                    write(rel, variant)
                    folder_sizes[folder] += 1
                    planted.append(PlantedDuplicate(path=rel, duplicate_of=source, kind=kind))
                    candidates.remove(source)
                    break
        for future in written:
            future.result()  # a failed write fails the corpus
    return planted


def _default_workers(originals: int) -> int:
    if originals < _POOL_MIN_ORIGINALS:
        return 1
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def generate_demo_corpus(
    config: DemoCorpusConfig,
    root: str,
    progress: Callable[[str, int, int], None] | None = None,
    workers: int | None = None,
    *,
    pack: ReferencePack,
) -> GroundTruth:
    """Write the corpus under `root` (an fsspec URL) and return what was planted. Every file goes through the
    workspace's atomic writer, so a crash mid-generation never leaves a half-written picture under a final name.

    `progress(stage, done, total)` is told of each concept drawn, in files (a look-alike kind counts once, planted
    or not). `workers`: processes drawing concepts (default: one per core for a large corpus, else none beyond
    this one); the corpus is the same whatever their number. They are spawned, so a script that starts them needs
    the usual `if __name__ == "__main__":` guard. `pack`: the reference pack naming the countries and concepts."""
    storage = Storage(root)
    plan = _plan(config, root, pack)
    total = len(plan.bad_files) + sum(task.units for task in plan.tasks)
    done = 0

    def advance(units: int) -> None:
        nonlocal done
        done += units
        if progress is not None:
            progress("demo_corpus", done, total)

    advance(0)
    for rel, (data, _) in plan.bad_files.items():
        storage.write_bytes(storage.path(rel), data)
    advance(len(plan.bad_files))

    lookalikes: list[list[PlantedDuplicate]] = [[] for _ in plan.tasks]
    count = min(len(plan.tasks), workers or _default_workers(len(plan.originals)))
    if count <= 1:
        for index, task in enumerate(plan.tasks):
            lookalikes[index] = _draw_concept(task)
            advance(task.units)
    else:
        # Spawned, not forked: the caller may hold threads (Prefect's) that a fork would copy mid-flight.
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(count, mp_context=context) as pool:
            futures = {pool.submit(_draw_concept, task): index for index, task in enumerate(plan.tasks)}
            try:
                for future in as_completed(futures):
                    index = futures[future]
                    lookalikes[index] = future.result()
                    advance(plan.tasks[index].units)
            except BaseException:
                pool.shutdown(cancel_futures=True)  # a failed concept fails the corpus: draw no more of it
                raise

    truth = GroundTruth(
        duplicates=plan.duplicates,
        lookalikes=[la for planted in lookalikes for la in planted],  # in concept order, whoever finished first
        bad_files={rel: error for rel, (_, error) in plan.bad_files.items()},
        originals=[o.rel for o in plan.originals],
    )
    storage.write_bytes(storage.path("ground_truth.json"), json.dumps(truth.model_dump(), indent=2).encode())
    return truth
