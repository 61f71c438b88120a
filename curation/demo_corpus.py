"""Generate the labelled demo corpus: real photos cannot be shipped, so the offline demo draws its own.

The corpus is laid out for the local-folder searcher (`<country>/<concept>/<eng|nav>/<NN>_<name>.<ext>`; the
searcher ranks a folder's files from 1 in name order) and holds, on purpose, what a web crawl holds:
near-duplicates (byte copies, the same pixels re-saved as PNG, JPEG re-encodes, resizes, brightness shifts) and
bad files (HTML saved as .jpg, truncated and corrupt JPEGs, a tiny image, a decompression bomb).
`ground_truth.json` lists every planted case so tests can check the curation.

It also holds look-alikes: the same scene from another viewpoint, or at night. The 3XCM annotation guideline
(paper App. J) keeps such pairs when the change is meaningful, so they are the cases no threshold can settle and
people must review: each is calibrated against the default perceptual tier to land in its review band.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw, ImageEnhance
from pydantic import BaseModel, ConfigDict, Field

from curation.image_align import AlignedScorer
from curation.image_dedup import PerceptualTierConfig
from curation.image_hashing import dhash_bulk, phash_bulk
from curation.image_thumbnails import thumbnails
from data import reference
from data.workspace import Storage

DEMO_COUNTRIES = ["USA", "UK", "Spain", "Argentina", "Japan", "Thailand", "Kenya", "Saudi Arabia"]
DEMO_CONCEPTS = ["train", "food", "wedding", "school", "market", "dance"]


class DemoCorpusConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    countries: list[str] = Field(default_factory=lambda: list(DEMO_COUNTRIES))
    concepts: list[str] = Field(default_factory=lambda: list(DEMO_CONCEPTS))
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
    draw.text((6, height - 18), label, fill=(255, 255, 255))
    return image


def night_scene(picture: Image.Image, strength: float, rng: np.random.Generator) -> Image.Image:
    """The same scene at night (`strength` 0..1): a blue cast, darker, the sky darkest, and a few warm lamps lit.

    None of it is a plain change of brightness, which pHash and correlation ignore (and rightly merge): the cast
    moves each colour's grey level by a different amount, and the gamma, the sky and the lamps change the
    picture's structure."""
    w, h = picture.size
    pixels = np.asarray(picture, dtype=np.float32) / 255
    cast = np.array((1 - 0.9 * strength, 1 - 0.6 * strength, 1.0), dtype=np.float32)
    sky = np.linspace(1 - 0.6 * strength, 1.0, h, dtype=np.float32)[:, None, None]  # darkest at the top
    pixels = pixels ** (1 + 0.3 * strength) * (1 - 0.4 * strength) * cast * sky
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


@dataclass(frozen=True)
class BandScores:
    """What the perceptual tier of curation/image_dedup.py sees of a pair."""

    phash: int
    dhash: int
    plain: float  # unaligned thumbnail correlation (the prefilter)
    aligned: float  # ECC correlation after alignment


class _BandCheck:
    """Scores pairs as the image dedup stage will (same thumbnails, hashes and alignment), to calibrate look-alikes
    into the review band of `tier` and keep them clear of every other image of their concept."""

    def __init__(self, tier: PerceptualTierConfig, images: dict[str, bytes]) -> None:
        self.tier = tier
        self._features: dict[str, tuple[int, int, np.ndarray]] = {}
        for rel, data in images.items():
            self.add(rel, data)

    def add(self, rel: str, data: bytes) -> None:
        self._features[rel] = self.features(data)

    @staticmethod
    def features(data: bytes) -> tuple[int, int, np.ndarray]:
        thumbs = thumbnails(data)
        phash = int(phash_bulk(thumbs.phash_input[None])[0])
        dhash = int(dhash_bulk(thumbs.dhash_input[None])[0])
        return phash, dhash, thumbs.align_input

    def scores(self, rel: str, candidate: tuple[int, int, np.ndarray]) -> BandScores:
        phash, dhash, thumb = self._features[rel]
        pair = (np.array([0]), np.array([1]))
        with AlignedScorer(lambda row: (thumb, candidate[2])[row]) as scorer:
            plain = float(scorer.plain_correlation(*pair)[0])
            aligned = float(scorer.aligned_correlation(*pair)[0])
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

    def clear_of_others(self, candidate: tuple[int, int, np.ndarray], source: str, concept_key: str) -> bool:
        """The tier records no pair (merge or review) between the candidate and any other image of the concept."""
        t = self.tier
        for rel, (phash, dhash, _) in self._features.items():
            if rel == source or rel.split("/")[1] != concept_key:
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


def lookalike_candidates(
    kind: str, config: DemoCorpusConfig, picture: Image.Image, recipe: tuple[tuple[object, ...], str]
) -> Iterator[bytes]:
    """The candidate look-alikes of an original, mildest first, as JPEG bytes; `recipe` is the original's rng key
    and caption.

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
        shot = reframe(picture, _NIGHT_REFRAME_ZOOM, sign * _NIGHT_REFRAME_DEGREES, (sign * 0.02, 0.01))
        for step in _NIGHT_STEPS:  # the same lamps at every step
            yield _jpeg(night_scene(shot, step, _rng(config.seed, "lamps", *key)))
    else:
        raise ValueError(f"unknown look-alike kind {kind!r}")


def _calibrated_lookalike(
    kind: str,
    source: str,
    config: DemoCorpusConfig,
    picture: Image.Image,
    recipe: tuple[tuple[object, ...], str],
    check: _BandCheck,
) -> bytes | None:
    """The candidate whose pair with `source` sits nearest the middle of the review band, clear of every other
    image of the concept; None if none does."""
    tier = check.tier
    centre = (tier.align_review_min + tier.align_merge_min) / 2
    best: tuple[float, bytes] | None = None
    for data in lookalike_candidates(kind, config, picture, recipe):
        features = check.features(data)
        scores = check.scores(source, features)
        if scores.plain < tier.align_prefilter_min or scores.aligned < tier.align_review_min:
            break  # past the band: stronger candidates only move further away
        if not check.in_review_band(scores):
            continue
        gap = abs(scores.aligned - centre)
        if (best is None or gap < best[0]) and check.clear_of_others(features, source, source.split("/")[1]):
            best = (gap, data)
    return None if best is None else best[1]


def country_folder(country: reference.Country) -> str:
    """A country's corpus folder: its slug with `_` for a space (`saudi_arabia`), so no corpus path holds a space;
    the local searcher matches either form."""
    return country.slug.replace(" ", "_")


def generate_demo_corpus(config: DemoCorpusConfig, root: str) -> GroundTruth:
    """Write the corpus under `root` (an fsspec URL) and return what was planted. Every file goes through the
    workspace's atomic writer, so a crash mid-generation never leaves a half-written picture under a final name."""
    storage = Storage(root)
    truth = GroundTruth()
    countries = [reference.resolve_country(c) for c in config.countries]
    # In name order, and pictures seeded by name: the corpus does not move when concepts are renumbered.
    concepts = sorted((c for c in reference.concepts() if c.concept in config.concepts), key=lambda c: c.concept)
    if len(concepts) != len(set(config.concepts)):
        known = {c.concept for c in concepts}
        raise ValueError(f"unknown demo concepts: {sorted(set(config.concepts) - known)}")

    folder_sizes: Counter[str] = Counter()
    images: dict[str, bytes] = {}  # every decodable image written, by relative path: look-alikes keep clear of them

    def write(rel: str, data: bytes) -> str:
        storage.write_bytes(storage.path(rel), data)
        folder_sizes[rel.rsplit("/", 1)[0]] += 1
        return rel

    # Originals, and the decoded pictures we derive the duplicates from.
    pictures: dict[str, Image.Image] = {}
    recipes: dict[str, tuple[tuple[object, ...], str]] = {}  # original -> (its rng key, its caption), to redraw it
    folders: list[tuple[str, str, str]] = []
    for country in countries:
        langs = ["eng"] if country.language_code == reference.ENGLISH else ["eng", "nav"]
        for concept in concepts:
            for lang in langs:
                folder = f"{country_folder(country)}/{concept.concept.replace(' ', '_')}/{lang}"
                folders.append((folder, country.slug, concept.concept))
                # File names count from 00; the searcher ranks a folder's files in name order from 1.
                for rank in range(config.images_per_query):
                    key = (country_folder(country), concept.concept, lang, rank)
                    label = f"{concept.concept} / {country.name} / {lang} #{rank}"
                    image = draw_scene(_rng(config.seed, *key), config.width, config.height, label)
                    data = _jpeg(image)
                    rel = write(f"{folder}/{rank:02d}_{concept.concept.replace(' ', '_')}.jpg", data)
                    pictures[rel] = Image.open(io.BytesIO(data)).convert("RGB")
                    images[rel], recipes[rel] = data, (key, label)
                    truth.originals.append(rel)

    rng = _rng(config.seed, "plant")
    extra_rank = config.images_per_query  # planted files sort after the originals of their folder
    if config.plant_duplicates:
        by_concept: dict[str, list[str]] = {}
        for rel in truth.originals:
            by_concept.setdefault(rel.split("/")[1], []).append(rel)
        kinds = ["exact_bytes", "exact_pixels", "reencode", "resize", "brightness"]
        for concept_key, rels in sorted(by_concept.items()):
            concept_folders = [f for f, _, c in folders if c.replace(" ", "_") == concept_key]
            for kind in kinds:
                source = rels[int(rng.integers(len(rels)))]
                target_folder = concept_folders[int(rng.integers(len(concept_folders)))]
                picture = pictures[source]
                if kind == "exact_bytes":
                    data, ext = images[source], "jpg"
                elif kind == "exact_pixels":
                    data, ext = _png(picture), "png"
                elif kind == "reencode":
                    data, ext = _jpeg(picture, quality=55), "jpg"
                elif kind == "resize":
                    w, h = picture.size
                    data, ext = (
                        _jpeg(picture.resize((w * 3 // 4, h * 3 // 4), Image.Resampling.LANCZOS)),
                        "jpg",
                    )
                else:
                    data, ext = _jpeg(ImageEnhance.Brightness(picture).enhance(1.12)), "jpg"
                rel = write(f"{target_folder}/{extra_rank:02d}_dup_{kind}.{ext}", data)
                images[rel] = data
                truth.duplicates.append(PlantedDuplicate(path=rel, duplicate_of=source, kind=kind))
                extra_rank += 1
        # The same picture under another concept must NOT be merged (dedup is scoped within a concept), but it
        # shows both concepts: the build gives each copy the other's concept (curation/copies.py). One byte copy,
        # and one copy of the same pixels re-saved as PNG.
        if len(by_concept) > 1:
            names = sorted(by_concept)
            copies = [
                ("cross_concept_copy", by_concept[names[0]][0], names[1], "jpg"),
                ("cross_concept_pixel_copy", by_concept[names[0]][1], names[-1], "png"),
            ]
            for kind, source, target_concept, ext in copies:
                target_folder = next(f for f, _, c in folders if c.replace(" ", "_") == target_concept)
                data = images[source] if ext == "jpg" else _png(pictures[source])
                rel = write(f"{target_folder}/{extra_rank:02d}_{kind.replace('_copy', '')}.{ext}", data)
                images[rel] = data
                truth.duplicates.append(PlantedDuplicate(path=rel, duplicate_of=source, kind=kind))
                extra_rank += 1

    if config.plant_bad_files:
        sample = images[truth.originals[0]]
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
        for index, (name, (data, error)) in enumerate(sorted(bad.items())):
            folder = folders[(index * 7) % len(folders)][0]
            rel = write(f"{folder}/{extra_rank + index:02d}_{name}", data)
            truth.bad_files[rel] = error
        extra_rank += len(bad)

    if config.plant_lookalikes:
        # Planted last, each in its source's folder, so every file above keeps its name, its bytes and its rank.
        # Calibrated against the default tier, the one the demo build runs.
        sources = {d.duplicate_of for d in truth.duplicates}
        check = _BandCheck(PerceptualTierConfig(), images)
        for concept_key in sorted({rel.split("/")[1] for rel in truth.originals}):
            # Sources with no planted copy (so one queue row per look-alike), in a seeded order.
            candidates = [r for r in truth.originals if r.split("/")[1] == concept_key and r not in sources]
            order = _rng(config.seed, "lookalike", concept_key).permutation(len(candidates))
            candidates = [candidates[k] for k in order.tolist()]
            for kind in LOOKALIKE_KINDS:
                # The least crowded folders first: the searcher keeps a query's top 10 only (paper §3.2.1).
                ranked = sorted(candidates, key=lambda r: folder_sizes[r.rsplit("/", 1)[0]])
                for source in ranked[:_SOURCES_TRIED]:
                    variant = _calibrated_lookalike(kind, source, config, pictures[source], recipes[source], check)
                    if variant is None:
                        continue
                    folder = source.rsplit("/", 1)[0]
                    rel = write(f"{folder}/{extra_rank:02d}_lookalike_{kind}.jpg", variant)
                    images[rel] = variant
                    check.add(rel, variant)
                    truth.lookalikes.append(PlantedDuplicate(path=rel, duplicate_of=source, kind=kind))
                    candidates.remove(source)
                    break
            extra_rank += 1

    write("ground_truth.json", json.dumps(truth.model_dump(), indent=2).encode())
    return truth
