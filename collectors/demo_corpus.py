"""Generate the labelled demo corpus: real photos cannot be shipped, so the offline demo draws its own.

The corpus is laid out for the local-folder searcher (`<country>/<concept>/<eng|nav>/<rank>_<name>.<ext>`) and
holds, on purpose, what a web crawl holds: near-duplicates (byte copies, the same pixels re-saved as PNG, JPEG
re-encodes, resizes, brightness shifts) and bad files (HTML saved as .jpg, truncated and corrupt JPEGs, a tiny
image, a decompression bomb). `ground_truth.json` lists every planted case so tests can check the curation.
"""

from __future__ import annotations

import hashlib
import io
import json

import fsspec
import numpy as np
from PIL import Image, ImageDraw, ImageEnhance
from pydantic import BaseModel, ConfigDict, Field

from data import reference

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


class PlantedDuplicate(BaseModel):
    path: str
    duplicate_of: str
    kind: str  # exact_bytes | exact_pixels | reencode | resize | brightness | cross_concept_copy


class GroundTruth(BaseModel):
    duplicates: list[PlantedDuplicate] = Field(default_factory=list)
    bad_files: dict[str, str] = Field(default_factory=dict)  # relative path -> expected error class
    originals: list[str] = Field(default_factory=list)


def _rng(seed: int, *key: object) -> np.random.Generator:
    digest = hashlib.sha256(repr((seed, *key)).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def draw_scene(rng: np.random.Generator, width: int, height: int, label: str) -> Image.Image:
    """A distinct picture: a smooth random colour field, a few shapes and a caption."""
    field = rng.integers(0, 256, size=(6, 8, 3), dtype=np.uint8)
    image = Image.fromarray(field, "RGB").resize((width, height), Image.Resampling.BICUBIC)
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(3, 7))):
        x0, y0 = int(rng.integers(0, width - 40)), int(rng.integers(0, height - 40))
        x1, y1 = x0 + int(rng.integers(20, width // 2)), y0 + int(rng.integers(20, height // 2))
        colour = tuple(int(v) for v in rng.integers(0, 256, size=3))
        if rng.random() < 0.5:
            draw.ellipse((x0, y0, x1, y1), fill=colour)
        else:
            draw.rectangle((x0, y0, x1, y1), fill=colour)
    draw.rectangle((0, height - 22, width, height), fill=(0, 0, 0))
    draw.text((6, height - 18), label, fill=(255, 255, 255))
    return image


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


def generate_demo_corpus(config: DemoCorpusConfig, root: str) -> GroundTruth:
    """Write the corpus under `root` (an fsspec URL) and return what was planted."""
    fs, base = fsspec.core.url_to_fs(root)
    truth = GroundTruth()
    countries = [reference.resolve_country(c) for c in config.countries]
    concepts = [c for c in reference.concepts() if c.concept in config.concepts]
    if len(concepts) != len(set(config.concepts)):
        known = {c.concept for c in concepts}
        raise ValueError(f"unknown demo concepts: {sorted(set(config.concepts) - known)}")

    def write(rel: str, data: bytes) -> str:
        path = f"{base}/{rel}"
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        with fs.open(path, "wb") as handle:
            handle.write(data)
        return rel

    # Originals, and the decoded pictures we derive the duplicates from.
    pictures: dict[str, Image.Image] = {}
    folders: list[tuple[str, str, str]] = []
    for country in countries:
        langs = ["eng"] if country.language_code == reference.ENGLISH else ["eng", "nav"]
        for concept in concepts:
            for lang in langs:
                folder = f"{country.slug}/{concept.concept.replace(' ', '_')}/{lang}"
                folders.append((folder, country.slug, concept.concept))
                for rank in range(config.images_per_query):
                    rng = _rng(config.seed, country.slug, concept.concept_id, lang, rank)
                    label = f"{concept.concept} / {country.name} / {lang} #{rank}"
                    image = draw_scene(rng, config.width, config.height, label)
                    rel = write(f"{folder}/{rank:02d}_{concept.concept.replace(' ', '_')}.jpg", _jpeg(image))
                    pictures[rel] = Image.open(io.BytesIO(_jpeg(image))).convert("RGB")
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
                    data, ext = fs.cat_file(f"{base}/{source}"), "jpg"
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
                truth.duplicates.append(PlantedDuplicate(path=rel, duplicate_of=source, kind=kind))
            extra_rank += 1
        # The same picture under another concept must NOT be merged: dedup is scoped within a concept.
        if len(by_concept) > 1:
            first, second = sorted(by_concept)[:2]
            source = by_concept[first][0]
            target_folder = next(f for f, _, c in folders if c.replace(" ", "_") == second)
            rel = write(f"{target_folder}/{extra_rank:02d}_cross_concept.jpg", fs.cat_file(f"{base}/{source}"))
            truth.duplicates.append(PlantedDuplicate(path=rel, duplicate_of=source, kind="cross_concept_copy"))
            extra_rank += 1

    if config.plant_bad_files:
        sample = fs.cat_file(f"{base}/{truth.originals[0]}")
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

    write("ground_truth.json", json.dumps(truth.model_dump(), indent=2).encode())
    return truth
