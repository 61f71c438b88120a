"""One reduced decode per image, and the small thumbnails every near-duplicate tier works from.

JPEGs are decoded in DCT-scaled draft mode (libjpeg scales 1/2..1/8 while decoding) straight to YCbCr, so neither
the full-size pixels nor the colour conversion are ever materialised: the luma plane is exactly what a greyscale
draft decode gives, and the chroma planes come almost free (the entropy decoding, which dominates, reads them
anyway). Formats without a reduced decode (PNG, WebP, ...) are decoded in full. Plain 8-bit PNGs (RGB, RGBA,
grey) are decoded by libpng through imagecodecs, which releases the GIL and decodes about a quarter faster than
Pillow (perf/dedup_vs_imagededup, docs/performance.md); the pixels are the same, so every other PNG simply goes to
Pillow.

From that decode come: a 32x32 grey thumbnail for pHash, a 9x8 one for dHash, a 64x64 one for the aligned
correlation (curation/image_align.py) and a 2x32x32 chroma thumbnail (Cb, Cr) for the colour check of aligned
merges. Only Pillow and numpy are imported here: hashing a folder must not pay for OpenCV or pyarrow.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass

import imagecodecs
import numpy as np
import numpy.typing as npt
from PIL import Image, ImageOps

PHASH_SIDE = 32  # imagehash.phash: a 32x32 DCT, of which the top-left 8x8 is kept
HASH_SIDE = 8
ALIGN_SIDE = 64
CHROMA_SIDE = 32
#: The thumbnail is taken from a decode at least this large, so the reduction to 32x32 stays well filtered.
DRAFT_SIDE = 4 * PHASH_SIDE
_EXIF_ORIENTATION = 0x0112
_TRANSPOSED_ORIENTATIONS = {5, 6, 7, 8}  # EXIF orientations that swap width and height
#: ImageOps.exif_transpose's table, applied to an already decoded image.
_TRANSPOSE = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}


@dataclass(frozen=True)
class ReducedDecode:
    """An image decoded as cheaply as its format allows, orientation applied."""

    width: int  # the full size, after orientation
    height: int
    grey: Image.Image  # "L"; at draft scale for JPEGs, full size otherwise
    colour: Image.Image  # "YCbCr" (a JPEG's own planes) or "RGB", the same scale as `grey`
    draft_decoded: bool  # a JPEG decoded at reduced scale (its thumbnails differ a little from a full decode's)
    full_rgb: Image.Image | None  # the full-size RGB pixels, where the format had to decode them anyway
    # libpng's RGB(A) array, when it decoded the image (hashed in place)
    decoded_array: npt.NDArray[np.uint8] | None = None


#: Pillow modes of the PNGs libpng decodes to the same pixels: 8-bit RGB, RGBA and grey (16-bit and palette PNGs,
#: and 16-bit RGB, which Pillow also calls "RGB", go to Pillow; see `_plain_png`).
_PLAIN_PNG_MODES = {"RGB", "RGBA", "L"}


def _plain_png(image: Image.Image, data: bytes) -> npt.NDArray[np.uint8] | None:
    """The pixels of an 8-bit RGB/RGBA/grey PNG without EXIF (uint8, (H, W[, C])), decoded by libpng; None for
    every other image. Pillow's getexif() loads a whole PNG to look for a trailing eXIf chunk, so its absence is
    checked on the bytes instead (a false hit only sends the image to Pillow)."""
    if image.format != "PNG" or image.mode not in _PLAIN_PNG_MODES or getattr(image, "is_animated", False):
        return None
    if b"eXIf" in data:
        return None
    pixels = imagecodecs.png_decode(data)
    if pixels.dtype != np.uint8 or pixels.shape[:2] != (image.height, image.width):
        return None
    return pixels


def _from_pixels(pixels: npt.NDArray[np.uint8]) -> tuple[Image.Image, Image.Image]:
    """(grey, RGB) Pillow images of `_plain_png` pixels, converted as Pillow would convert its own decode."""
    if pixels.ndim == 2:
        grey = Image.fromarray(pixels, "L")
        return grey, grey.convert("RGB")
    rgb = Image.fromarray(np.ascontiguousarray(pixels[:, :, :3]), "RGB")
    return rgb.convert("L"), rgb


def decode_reduced(data: bytes) -> ReducedDecode:
    """The one decode hashing pays for; the perf benchmark's decode floor times exactly this."""
    with Image.open(io.BytesIO(data)) as image:
        width, height = image.size
        pixels = _plain_png(image, data)
        if pixels is not None:
            grey, rgb = _from_pixels(pixels)
            return ReducedDecode(width, height, grey, rgb, False, rgb, pixels if pixels.ndim == 3 else None)
        orientation = image.getexif().get(_EXIF_ORIENTATION, 1)
        draft_decoded = image.format == "JPEG"
        full_rgb = None
        if draft_decoded:
            image.draft("YCbCr", (DRAFT_SIDE, DRAFT_SIDE))  # 1/2..1/8 scale, never below DRAFT_SIDE
            image.load()
            if image.mode == "YCbCr":  # a colour JPEG: its luma is what a greyscale draft decode gives
                colour = image.copy()
                grey = colour.getchannel(0)
            else:  # greyscale or CMYK JPEGs
                grey = image.convert("L")
                colour = image.convert("RGB")
        else:
            full_rgb = colour = image.convert("RGB")
            grey = colour.convert("L")
    transpose = _TRANSPOSE.get(orientation)
    if transpose is not None:
        grey, colour = grey.transpose(transpose), colour.transpose(transpose)
        full_rgb = colour if full_rgb is not None else None
    if orientation in _TRANSPOSED_ORIENTATIONS:
        width, height = height, width
    return ReducedDecode(width, height, grey, colour, draft_decoded, full_rgb)


@dataclass(frozen=True)
class Thumbnails:
    """What one reduced decode yields: the normalised full size and the thumbnails."""

    width: int
    height: int
    phash_input: npt.NDArray[np.float32]  # (32, 32) float32
    dhash_input: npt.NDArray[np.float32]  # (8, 9) float32
    align_input: npt.NDArray[np.uint8]  # (64, 64) uint8, for the aligned-correlation check of curation/image_align.py
    chroma_input: npt.NDArray[np.int8]  # (2, 32, 32) int8: Cb and Cr minus 128
    draft_decoded: bool
    pixel_sha256: str | None  # when asked for and the format was decoded in full anyway


def _reduce_to_draft_scale(image: Image.Image) -> Image.Image:
    """A box reduction to about DRAFT_SIDE, so every format reaches the same intermediate scale as a draft."""
    factor = max(1, min(image.width, image.height) // DRAFT_SIDE)
    return image.reduce(factor) if factor > 1 else image


def chroma_thumbnail(colour: Image.Image) -> npt.NDArray[np.int8]:
    """(2, 32, 32) int8 Cb and Cr (minus 128) of an "RGB" or "YCbCr" image."""
    small = _reduce_to_draft_scale(colour).resize((CHROMA_SIDE, CHROMA_SIDE), Image.Resampling.BOX)
    if small.mode != "YCbCr":
        small = small.convert("YCbCr")
    planes = np.asarray(small, dtype=np.int16)[:, :, 1:] - 128
    return np.ascontiguousarray(planes.transpose(2, 0, 1)).astype(np.int8)


def thumbnails(data: bytes, pixel_hash: bool = False) -> Thumbnails:
    """Decode at reduced scale where the format allows it, normalise, and cut the thumbnails. With `pixel_hash`,
    a format decoded in full anyway also gives its pixel sha256 (JPEGs get theirs later, only when needed)."""
    decoded = decode_reduced(data)
    grey = _reduce_to_draft_scale(decoded.grey)

    # Pillow box-reduces to within twice the target before the Lanczos filter: 3.5x faster, and on the tuned corpus
    # of perf/dedup_vs_imagededup the pHash moves by 0.2 bits on average (at most 2).
    def lanczos(size: tuple[int, int]) -> Image.Image:
        return grey.resize(size, resample=Image.Resampling.LANCZOS, reducing_gap=2.0)

    phash_input = np.asarray(lanczos((PHASH_SIDE, PHASH_SIDE)), dtype=np.float32)
    dhash_input = np.asarray(lanczos((HASH_SIDE + 1, HASH_SIDE)), dtype=np.float32)
    align_input = np.asarray(grey.resize((ALIGN_SIDE, ALIGN_SIDE), Image.Resampling.BOX), dtype=np.uint8)
    pixels = None
    if pixel_hash and decoded.full_rgb is not None:
        pixels = _pixels_digest(decoded.full_rgb, decoded.decoded_array)
    return Thumbnails(
        decoded.width,
        decoded.height,
        phash_input,
        dhash_input,
        align_input,
        chroma_thumbnail(decoded.colour),
        decoded.draft_decoded,
        pixels,
    )


def decode_normalized(data: bytes) -> Image.Image:
    """Full decode, normalised: EXIF orientation applied, converted to RGB."""
    with Image.open(io.BytesIO(data)) as image:
        return ImageOps.exif_transpose(image).convert("RGB")


def pixel_sha256(data: bytes) -> str:
    """sha256 of the decoded, normalised pixels (with the mode and size, so equal bytes mean equal images)."""
    return _pixels_digest(decode_normalized(data))


def _pixels_digest(image: Image.Image, array: npt.NDArray[np.uint8] | None = None) -> str:
    """`array`, when given, holds the same pixels as `image` (RGB, or RGBA whose alpha is dropped); a contiguous
    RGB array is hashed in place, without Pillow's copy into bytes."""
    digest = hashlib.sha256(f"{image.mode}:{image.width}x{image.height}:".encode())
    if array is not None and image.mode == "RGB" and array.shape[2] == 3 and array.flags.c_contiguous:
        digest.update(array.data.cast("B"))
    else:
        digest.update(image.tobytes())
    return digest.hexdigest()
