"""MixCuBe originals: photos per culture x category with their labels (MixCuBe §2, App. A.1-A.3).

Backends:
- `local`: a folder of images plus a labels CSV (`image_file,culture,category,food_label`), the way curators hand
  over a collection. The paper's collection criteria (App. A.3: cultural markers, variety, a visible person) are
  applied by those people; this stage records which checks each image passed (decodes, size, labels) and the
  face stage records the last one (at least one detectable face).
- `demo` (embedded default): labelled scenes composed offline from photos that ship inside scikit-image (the
  astronaut portrait carries a face the Haar cascade detects), on category backdrops. They are a pipeline
  demonstration, not the benchmark, and every row says so (`source=demo`).

Every row is an original or a failure with its reason; nothing is dropped silently.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from typing import Annotated, Literal

import fsspec
import numpy as np
import pyarrow as pa
from PIL import Image, ImageDraw, ImageOps
from pydantic import BaseModel, ConfigDict, Field

from data import reference, schemas
from data.schemas import STATUS_FAILED, STATUS_OK

MIN_SIDE = 128  # smaller images cannot carry a face the detectors and SAM can work with


class LocalOriginalsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: Literal["local"] = "local"
    root: str = Field(description="fsspec folder holding the images named in the labels CSV.")
    labels_csv: str = Field(description="CSV with image_file,culture,category[,food_label].")


class DemoOriginalsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: Literal["demo"] = "demo"
    per_cell: int = Field(default=2, ge=1, le=33, description="Originals per culture x category (paper: 33).")
    cultures: list[str] | None = Field(default=None, description="Culture names; default all five.")
    categories: list[str] | None = Field(default=None, description="Categories; default Food, Festival, Clothes.")
    seed: int = 0


OriginalsConfig = Annotated[LocalOriginalsConfig | DemoOriginalsConfig, Field(discriminator="backend")]


def culture_by_name(name: str) -> reference.MixCubeCulture:
    mix = reference.mixcube()
    for culture in mix.cultures:
        names = {culture.name, culture.adjective, culture.iso2, *culture.label_aliases}
        if name.strip().lower() in {n.lower() for n in names}:
            return culture
    raise ValueError(f"unknown MixCuBe culture {name!r}; known: {[c.name for c in mix.cultures]}")


def category_name(name: str) -> str:
    for category in reference.mixcube().categories:
        if name.strip().lower() == category.lower():
            return category
    raise ValueError(f"unknown MixCuBe category {name!r}; known: {reference.mixcube().categories}")


def original_row(**values: object) -> dict:
    """A MIXCUBE_ORIGINALS row: the values given, every other column empty."""
    return schemas.blank_row(schemas.MIXCUBE_ORIGINALS, **values)


def check_original(data: bytes) -> tuple[int, int, str]:
    """(width, height, format) of an image that can serve as an original; ValueError with the reason otherwise."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            width, height = ImageOps.exif_transpose(image).size
            fmt = image.format or "?"
    except Exception as exc:  # Pillow raises many types for bad files; the class is the reason
        raise ValueError(f"not_an_image: {type(exc).__name__}") from None
    if min(width, height) < MIN_SIDE:
        raise ValueError(f"too_small: {width}x{height} < {MIN_SIDE}")
    return width, height, fmt


def import_local(config: LocalOriginalsConfig, put_blob: Callable[[bytes], str]) -> pa.Table:
    with fsspec.open(config.labels_csv, "r", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    missing = {"image_file", "culture", "category"} - set(rows[0] if rows else {})
    if missing:
        raise ValueError(f"{config.labels_csv}: missing columns {sorted(missing)}")
    out = []
    for n, row in enumerate(rows):
        original_id = f"local-{n:05d}"
        base = {"original_id": original_id, "source": row["image_file"], "food_label": row.get("food_label") or None}
        try:
            culture, category = culture_by_name(row["culture"]), category_name(row["category"])
        except ValueError as exc:
            out.append(original_row(**base, status=STATUS_FAILED, error=f"bad_label: {exc}"))
            continue
        base |= {"culture": culture.name, "country": culture.adjective, "category": category}
        try:
            with fsspec.open(f"{config.root.rstrip('/')}/{row['image_file']}", "rb") as handle:
                data = handle.read()
            width, height, fmt = check_original(data)
        except FileNotFoundError:
            out.append(original_row(**base, status=STATUS_FAILED, error="missing_file"))
            continue
        except ValueError as exc:
            out.append(original_row(**base, status=STATUS_FAILED, error=str(exc)))
            continue
        sha = put_blob(data)
        out.append(original_row(**base, status=STATUS_OK, sha256=sha, width=width, height=height, format=fmt))
    return schemas.from_rows(out, schemas.MIXCUBE_ORIGINALS)


# -- the offline demo --------------------------------------------------------------------------------------------

BACKDROPS = {"Food": (214, 170, 110), "Festival": (120, 40, 90), "Clothes": (60, 110, 150)}


def _props(draw: ImageDraw.ImageDraw, category: str, rng: np.random.Generator, size: tuple[int, int]) -> None:
    """Category markers around the person: plates on a table, bunting, or patterned cloth."""
    width, height = size
    colour = tuple(int(c) for c in rng.integers(40, 230, 3))
    if category == "Food":
        draw.rectangle([0, int(height * 0.72), width, height], fill=(150, 100, 60))
        for k in range(3):
            cx = int(width * (0.2 + 0.3 * k))
            draw.ellipse(
                [cx - 40, int(height * 0.76), cx + 40, int(height * 0.9)], fill=(245, 245, 240), outline=colour
            )
            draw.ellipse([cx - 22, int(height * 0.79), cx + 22, int(height * 0.87)], fill=colour)
    elif category == "Festival":
        for k in range(12):
            x = int(width * k / 12)
            draw.polygon(
                [(x, 0), (x + width // 12, 0), (x + width // 24, 40)], fill=colour if k % 2 else (240, 200, 40)
            )
    else:
        for k in range(0, width, 24):
            draw.line([(k, int(height * 0.75)), (k + 24, height)], fill=colour, width=6)


def demo_scene(culture: reference.MixCubeCulture, category: str, index: int, seed: int) -> Image.Image:
    """The astronaut portrait placed on a category backdrop with markers and a caption, varied per index."""
    from skimage import data as skdata

    rng = np.random.default_rng([seed, index, sum(map(ord, culture.name + category))])
    width, height = 640, 480
    scene = Image.new("RGB", (width, height), BACKDROPS[category])
    portrait = Image.fromarray(skdata.astronaut()).resize((300, 300))
    scene.paste(portrait, (int(rng.integers(40, width - 340)), int(rng.integers(50, 130))))
    draw = ImageDraw.Draw(scene)
    _props(draw, category, rng, (width, height))  # in front of the person, as a table or a cloth would be
    draw.text((10, height - 20), f"{culture.adjective} {category.lower()} (demo #{index})", fill=(255, 255, 255))
    return scene


def cells(cultures: list[str] | None, categories: list[str] | None) -> list[tuple[reference.MixCubeCulture, str]]:
    """(culture, category) pairs of the named cultures and categories (all of either when None), in paper order."""
    mix = reference.mixcube()
    chosen = [culture_by_name(c) for c in cultures] if cultures else mix.cultures
    kinds = [category_name(c) for c in categories] if categories else mix.categories
    return [(culture, category) for culture in chosen for category in kinds]


def generate_demo(config: DemoOriginalsConfig, put_blob: Callable[[bytes], str]) -> pa.Table:
    mix = reference.mixcube()
    rows = []
    for culture, category in cells(config.cultures, config.categories):
        for index in range(config.per_cell):
            buffer = io.BytesIO()
            demo_scene(culture, category, index, config.seed).save(buffer, format="JPEG", quality=92)
            data = buffer.getvalue()
            width, height, fmt = check_original(data)
            food = mix.food_label_examples.get(culture.name) if category == "Food" else None
            rows.append(
                original_row(
                    original_id=f"demo-{culture.iso2.lower()}-{category.lower()}-{index:02d}",
                    culture=culture.name,
                    country=culture.adjective,
                    category=category,
                    food_label=food,
                    source="demo",
                    status=STATUS_OK,
                    sha256=put_blob(data),
                    width=width,
                    height=height,
                    format=fmt,
                )
            )
    return schemas.from_rows(rows, schemas.MIXCUBE_ORIGINALS)


def collect_originals(config: OriginalsConfig, put_blob: Callable[[bytes], str]) -> pa.Table:
    if isinstance(config, LocalOriginalsConfig):
        return import_local(config, put_blob)
    return generate_demo(config, put_blob)
