"""MixCuBe originals: photos per culture x category with their labels (MixCuBe §2, App. A.1-A.3).

Backends:
- `local`: a folder of images plus a labels CSV (`image_file,culture,category,food_label`), the way curators hand
  over a collection. Optional provenance columns (`url`: the image's web URL, `source_page`, `license`,
  `retrieved_at`: ISO 8601, UTC when it has no offset) are carried to the release; without them the licence is
  `unknown` and the URLs and time are empty. The paper's collection criteria (App. A.3: cultural markers,
  variety, a visible person) are applied by those people; this stage records which checks each image passed
  (decodes, size, labels) and the face stage records the last one (at least one detectable face).
- `demo` (embedded default): labelled scenes composed offline from photos that ship inside scikit-image (the
  astronaut portrait carries a face the Haar cascade detects), on category backdrops. They are a pipeline
  demonstration, not the benchmark, and every row says so (`source=demo`).

Every row is an original or a failure with its reason; nothing is dropped silently. A labels row names a file
inside `root` (no absolute path, no `..` or link leading out): a bad row (its shape, labels or path) is a row with
its reason; a labels CSV that cannot be read at all is an `OriginalsInputError`.

Originals are stored upright: the EXIF orientation is applied once here, for every backend (the search backend's
downloaded bytes through `upright_fetched`), so every stage and the release see the same pixels; `received_sha256`
keeps the hash of the bytes as received.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Literal, NoReturn

import fsspec
import numpy as np
import pyarrow as pa
from fsspec.implementations.local import LocalFileSystem
from PIL import Image, ImageDraw, ImageOps
from pydantic import Field

from data import schemas
from data.image_sources import UNKNOWN_LICENSE, declared_license, utc_timestamp
from data.reference import MixCubeCulture, MixCubeReference
from data.row_errors import error_text
from data.schemas import STATUS_FAILED, STATUS_OK
from data.stage import BackendConfig

MIN_SIDE = 128  # smaller images cannot carry a face the detectors and SAM can work with


# The originals stage reads these settings itself (`collect_originals`): nothing to `build()`.
class LocalOriginalsConfig(BackendConfig[NoReturn]):
    backend: Literal["local"] = "local"
    root: str = Field(description="fsspec folder holding the images named in the labels CSV.")
    labels_csv: str = Field(
        description="CSV with image_file,culture,category[,food_label,url,source_page,license,retrieved_at]; the "
        "optional provenance columns reach the release (`license` empty or missing: `unknown`)."
    )

    @property
    def demo_seed(self) -> int | None:
        """The seed of generated originals, for provenance: None, these are curators' photos."""
        return None

    def wanted_cells(self, mix: MixCubeReference) -> list[tuple[MixCubeCulture, str]]:
        """The culture x category cells the build aims to fill: a labels CSV may name any, so every cell."""
        return cells(mix, None, None)


class DemoOriginalsConfig(BackendConfig[NoReturn]):
    backend: Literal["demo"] = "demo"
    per_cell: int = Field(default=2, ge=1, le=33, description="Originals per culture x category (paper: 33).")
    cultures: list[str] | None = Field(default=None, description="Culture names; default all five.")
    categories: list[str] | None = Field(default=None, description="Categories; default Food, Festival, Clothes.")
    seed: int = 0

    @property
    def demo_seed(self) -> int | None:
        """The seed the demo scenes are drawn with, for provenance."""
        return self.seed

    def wanted_cells(self, mix: MixCubeReference) -> list[tuple[MixCubeCulture, str]]:
        """The culture x category cells the build aims to fill: the configured ones."""
        return cells(mix, self.cultures, self.categories)


OriginalsConfig = Annotated[LocalOriginalsConfig | DemoOriginalsConfig, Field(discriminator="backend")]


def culture_by_name(mix: MixCubeReference, name: str) -> MixCubeCulture:
    for culture in mix.cultures:
        names = {culture.name, culture.adjective, culture.iso2, *culture.label_aliases, *culture.our_aliases}
        if name.strip().lower() in {n.lower() for n in names}:
            return culture
    raise ValueError(f"unknown MixCuBe culture {name!r}; known: {[c.name for c in mix.cultures]}")


def category_name(mix: MixCubeReference, name: str) -> str:
    for category in mix.categories:
        if name.strip().lower() == category.lower():
            return category
    raise ValueError(f"unknown MixCuBe category {name!r}; known: {mix.categories}")


def original_row(**values: object) -> dict[str, object]:
    """A MIXCUBE_ORIGINALS row: the values given, every other column empty."""
    return schemas.blank_row(schemas.MIXCUBE_ORIGINALS, **values)


# -- orientation: applied once, here -----------------------------------------------------------------------------

ORIENTATION_TAG = 0x0112  # EXIF tag 274
TURNED = range(2, 9)  # orientations that ask a reader to flip or rotate the stored pixels (1: as stored)
REENCODE_JPEG_QUALITY = 95  # the quality of every JPEG the pipeline writes (syntheses, the release's conversions)
# Formats re-encoded as JPEG when turned: their pixels were lossy already. Others (PNG, WebP, TIFF...) become PNG.
LOSSY = {"JPEG", "MPO"}
PNG_MODES = {"1", "L", "LA", "I", "I;16", "P", "RGB", "RGBA"}


@dataclass(frozen=True)
class Ingested:
    """An original as every stage and the release see it: upright pixels, no orientation left to apply."""

    data: bytes  # the received bytes when no turn was needed, else the turned re-encode
    received_sha256: str  # sha256 of the bytes as received (provenance)
    width: int
    height: int
    format: str


def _orientation(image: Image.Image) -> int:
    try:
        value = image.getexif().get(ORIENTATION_TAG, 1)
    except Exception:  # a damaged EXIF block: Pillow cannot read a turn from it, so there is none to apply
        return 1
    return value if isinstance(value, int) else 1


def _encode_turned(image: Image.Image, source_format: str, icc: bytes | None) -> tuple[bytes, str]:
    """`image` (already turned) re-encoded without EXIF, so no reader can turn it a second time. A lossy source
    becomes JPEG q95 with full-resolution chroma: one more generation that no detector or filter can tell apart,
    the same bytes the release then passes through (the release converts every other format to JPEG q95 anyway),
    and the colour profile travels with them. A lossless source stays lossless (PNG)."""
    buffer = io.BytesIO()
    if source_format in LOSSY:
        if image.mode not in {"L", "RGB"}:
            if image.mode == "CMYK":
                icc = None  # the profile describes CMYK, not the converted RGB
            image = image.convert("RGB")
        image.save(buffer, format="JPEG", quality=REENCODE_JPEG_QUALITY, subsampling=0, icc_profile=icc)
        return buffer.getvalue(), "JPEG"
    if image.mode not in PNG_MODES:
        icc = None if image.mode == "CMYK" else icc
        image = image.convert("RGBA" if "A" in image.getbands() else "RGB")
    image.save(buffer, format="PNG", icc_profile=icc)
    return buffer.getvalue(), "PNG"


def upright(data: bytes) -> Ingested:
    """`data` with its EXIF orientation applied, or ValueError with the reason it cannot be an original.

    Bytes whose orientation is 1 (or absent) are kept exactly: an upright JPEG is published byte for byte. Others
    are turned once here, so the face detector, SAM, the inpainter, the CLIP filter, the QA tasks and the release
    all see the pixels an EXIF-aware viewer shows (phones store portrait shots sideways with orientation 6 or 8)."""
    received = hashlib.sha256(data).hexdigest()
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            fmt = image.format or "?"
            width, height = image.size
            if _orientation(image) in TURNED:
                turned = ImageOps.exif_transpose(image)
                width, height = turned.size
                data, fmt = _encode_turned(turned, fmt, image.info.get("icc_profile"))
    except Exception as exc:  # Pillow raises many types for bad files; the class is the reason
        raise ValueError(f"not_an_image: {type(exc).__name__}") from None
    if min(width, height) < MIN_SIDE:
        raise ValueError(f"too_small: {width}x{height} < {MIN_SIDE}")
    return Ingested(data, received, width, height, fmt)


def ingest(data: bytes, put_blob: Callable[[bytes], str]) -> dict[str, str | int]:
    """The MIXCUBE_ORIGINALS columns of a usable original, its upright bytes stored; ValueError otherwise."""
    original = upright(data)
    return {
        "sha256": put_blob(original.data),
        "received_sha256": original.received_sha256,
        "width": original.width,
        "height": original.height,
        "format": original.format,
    }


def upright_fetched(table: pa.Table, get_blob: Callable[[str], bytes], put_blob: Callable[[bytes], str]) -> pa.Table:
    """MIXCUBE_ORIGINALS rows whose `sha256` is the blob of the bytes as fetched (the search backend's downloader
    stores what it received), turned upright as `ingest` does; the received bytes stay in the store under
    `received_sha256`."""
    rows = []
    for row in table.to_pylist():
        if row["status"] == STATUS_OK:
            try:
                row = {**row, **ingest(get_blob(row["sha256"]), put_blob)}
            except ValueError as exc:
                row = {**row, "status": STATUS_FAILED, "error": str(exc), "received_sha256": row["sha256"]}
                row["sha256"] = row["width"] = row["height"] = row["format"] = None
        rows.append(row)
    return schemas.from_rows(rows, schemas.MIXCUBE_ORIGINALS)


# -- the labelled folder ----------------------------------------------------------------------------------------


class OriginalsInputError(ValueError):
    """The originals' input as a whole cannot be used: the labels CSV is missing, not UTF-8, or lacks its columns, or
    the folder does not exist. A config or input error to print, not a row (a bad line of the CSV is a row)."""


class _Rejected(Exception):
    """One labels row that cannot become an original; the message (`kind: detail`) is its row's error."""

    def __init__(self, kind: str, detail: str = "") -> None:
        super().__init__(f"{kind}: {detail}" if detail else kind)


REQUIRED_COLUMNS = ("image_file", "culture", "category")


def _read_labels(path: str) -> list[list[str]]:
    """The CSV's rows (header first); OriginalsInputError naming the file when it cannot be read as a whole."""
    where = f"labels CSV {path!r} (originals.labels_csv)"
    try:
        with fsspec.open(path, "rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        raise OriginalsInputError(f"{where} does not exist") from None
    except IsADirectoryError:
        raise OriginalsInputError(f"{where} is a folder, not a CSV file") from None
    except OSError as exc:
        raise OriginalsInputError(f"{where} cannot be read: {error_text(exc)}") from None
    try:
        text = raw.decode("utf-8-sig")  # a byte order mark (Excel's "CSV UTF-8") is not part of the header
    except UnicodeDecodeError as exc:
        raise OriginalsInputError(
            f"{where} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); save it as UTF-8"
        ) from None
    try:
        rows = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as exc:
        raise OriginalsInputError(f"{where} is not a readable CSV: {exc}") from None
    header = [name.strip() for name in rows[0]] if rows else []
    missing = set(REQUIRED_COLUMNS) - set(header)
    if missing:
        raise OriginalsInputError(f"{where}: missing columns {sorted(missing)}")
    return [header, *rows[1:]]


def _relative(image_file: str) -> str:
    """`image_file` as a path inside the root ("a/b.jpg"), or _Rejected. Backslashes separate folders too (a CSV
    written on Windows), so `..\\x` cannot slip past the check."""
    if not image_file:
        raise _Rejected("empty_path", "image_file is empty")
    if "\0" in image_file:
        raise _Rejected("bad_path", "image_file holds a NUL character")
    if "://" in image_file or image_file.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", image_file):
        raise _Rejected("path_outside_root", "an absolute path or URL; image_file is relative to the root")
    parts: list[str] = []
    for part in re.split(r"[\\/]", image_file):
        if part == "..":
            if not parts:
                raise _Rejected("path_outside_root", "'..' leads out of the root")
            parts.pop()
        elif part not in {"", "."}:
            parts.append(part)
    if not parts:
        raise _Rejected("not_a_file", "names the root folder itself")
    return "/".join(parts)


def _read_inside(fs: fsspec.AbstractFileSystem, root: str, image_file: str) -> bytes:
    """The bytes of the regular file `image_file` names inside `root`, or _Rejected with the reason."""
    path = f"{root.rstrip('/')}/{_relative(image_file)}"
    if isinstance(fs, LocalFileSystem):
        # The lexical check cannot see links: resolve them and check again, then read what was checked.
        real_root, real = os.path.realpath(root), os.path.realpath(path)
        if os.path.commonpath([real_root, real]) != real_root:
            raise _Rejected("path_outside_root", "a symbolic link leads out of the root")
        try:
            mode = os.stat(real).st_mode
        except FileNotFoundError:
            raise _Rejected("missing_file") from None
        if not stat.S_ISREG(mode):  # a folder, or a pipe or device that would block or never end
            raise _Rejected("not_a_file", "a folder" if stat.S_ISDIR(mode) else "not a regular file")
        path = real
    else:
        try:
            info = fs.info(path)
        except FileNotFoundError:
            raise _Rejected("missing_file") from None
        if info.get("type") != "file":
            raise _Rejected("not_a_file", str(info.get("type")))
    try:
        with fs.open(path, "rb") as handle:
            data: bytes = handle.read()
            return data
    except FileNotFoundError:
        raise _Rejected("missing_file") from None
    except OSError as exc:
        raise _Rejected("read_error", error_text(exc)) from None


def import_local(config: LocalOriginalsConfig, put_blob: Callable[[bytes], str], mix: MixCubeReference) -> pa.Table:
    """A row per labels row: the original, or why there is none (bad row shape, label, path or file)."""
    header, *lines = _read_labels(config.labels_csv)
    fs, root = fsspec.core.url_to_fs(config.root)
    if not fs.isdir(root):
        raise OriginalsInputError(f"originals folder {config.root!r} (originals.root) does not exist or is no folder")
    column = {name: k for k, name in enumerate(header)}
    needed = max(column[name] for name in REQUIRED_COLUMNS) + 1
    out = []
    for n, line in enumerate(line for line in lines if line):  # csv yields [] for a blank line: not a row
        fields = dict(zip(header, line, strict=False))
        base = {
            "original_id": f"local-{n:05d}",
            "source": fields.get("image_file", ""),
            "food_label": (fields.get("food_label") or "").strip() or None,
            **_declared_source(fields),
        }
        try:
            if len(line) < needed:
                raise _Rejected("short_row", f"{len(line)} fields, the header has {len(header)}")
            if len(line) > len(header) and any(value.strip() for value in line[len(header) :]):
                # An unquoted comma shifts every later field: the labels of this row cannot be trusted.
                raise _Rejected("long_row", f"{len(line)} fields, the header has {len(header)}")
            try:
                culture, category = culture_by_name(mix, fields["culture"]), category_name(mix, fields["category"])
            except ValueError as exc:
                raise _Rejected("bad_label", str(exc)) from None
            base |= {"culture": culture.name, "country": culture.adjective, "category": category}
            try:
                base["retrieved_at"] = utc_timestamp(fields.get("retrieved_at"))
            except ValueError as exc:
                raise _Rejected("bad_retrieved_at", str(exc)) from None
            data = _read_inside(fs, root, fields["image_file"].strip())
        except _Rejected as exc:
            out.append(original_row(**base, status=STATUS_FAILED, error=str(exc)))
            continue
        try:
            stored = ingest(data, put_blob)
        except ValueError as exc:
            received = hashlib.sha256(data).hexdigest()
            out.append(original_row(**base, status=STATUS_FAILED, error=str(exc), received_sha256=received))
            continue
        out.append(original_row(**base, status=STATUS_OK, **stored))
    return schemas.from_rows(out, schemas.MIXCUBE_ORIGINALS)


def _declared_source(fields: dict[str, str]) -> dict[str, str | None]:
    """The provenance a labels row declares (its optional columns); the licence is `unknown` when it names none."""
    return {
        "url": (fields.get("url") or "").strip() or None,
        "source_page": (fields.get("source_page") or "").strip() or None,
        "license": declared_license(fields.get("license")),
    }


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


def demo_scene(culture: MixCubeCulture, category: str, index: int, seed: int) -> Image.Image:
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


def cells(
    mix: MixCubeReference, cultures: list[str] | None, categories: list[str] | None
) -> list[tuple[MixCubeCulture, str]]:
    """(culture, category) pairs of the named cultures and categories (all of either when None), in the pack's
    order (the paper's, for the default pack)."""
    chosen = [culture_by_name(mix, c) for c in cultures] if cultures else mix.cultures
    kinds = [category_name(mix, c) for c in categories] if categories else mix.categories
    return [(culture, category) for culture in chosen for category in kinds]


def generate_demo(config: DemoOriginalsConfig, put_blob: Callable[[bytes], str], mix: MixCubeReference) -> pa.Table:
    rows = []
    for culture, category in cells(mix, config.cultures, config.categories):
        for index in range(config.per_cell):
            buffer = io.BytesIO()
            demo_scene(culture, category, index, config.seed).save(buffer, format="JPEG", quality=92)
            stored = ingest(buffer.getvalue(), put_blob)
            food = mix.food_label_examples.get(culture.name) if category == "Food" else None
            rows.append(
                original_row(
                    original_id=f"demo-{culture.iso2.lower()}-{category.lower()}-{index:02d}",
                    culture=culture.name,
                    country=culture.adjective,
                    category=category,
                    food_label=food,
                    source="demo",
                    license=UNKNOWN_LICENSE,
                    status=STATUS_OK,
                    **stored,
                )
            )
    return schemas.from_rows(rows, schemas.MIXCUBE_ORIGINALS)


def collect_originals(config: OriginalsConfig, put_blob: Callable[[bytes], str], mix: MixCubeReference) -> pa.Table:
    """The originals of the cultures and categories of `mix` (the build's reference pack's MixCuBe part)."""
    if isinstance(config, LocalOriginalsConfig):
        return import_local(config, put_blob, mix)
    return generate_demo(config, put_blob, mix)
