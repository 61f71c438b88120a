"""Decide whether a byte string is a usable image, and classify it precisely when it is not.

Shared by the local importer and the downloader. The check never trusts a file name or a Content-Type: it reads
the magic bytes, the header (for a decompression bomb, before any pixel is decoded) and then decodes fully.
"""

from __future__ import annotations

import io
import struct
import warnings
from collections.abc import Callable
from typing import TypeVar

from PIL import Image, UnidentifiedImageError
from pydantic import BaseModel, ConfigDict, Field

Decoded = TypeVar("Decoded")


class ImageLimits(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    min_side: int = Field(default=64, ge=1, description="Smaller images are dropped as too_small.")
    min_bytes: int = Field(default=256, ge=0)
    max_bytes: int = Field(default=20 * 1024 * 1024, ge=1, description="Larger bodies are dropped as too_large.")
    max_pixels: int = Field(default=64_000_000, ge=1, description="Width x height above this is a decompression_bomb.")


class ImageInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    format: str
    width: int
    height: int
    mode: str


class ImageRejected(Exception):
    """`error` is the short failure class written to the `error` column."""

    def __init__(self, error: str, detail: str) -> None:
        super().__init__(f"{error}: {detail}")
        self.error = error
        self.detail = detail


_TEXT_SNIFFS = (
    (b"<!doctype html", "HTML page"),
    (b"<html", "HTML page"),
    (b"<?xml", "XML document"),
    (b"{", "JSON document"),
)


_IMAGE_MAGIC = (
    (b"\xff\xd8\xff", "JPEG"),
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
    (b"BM", "BMP"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
)


def sniff_image(data: bytes) -> str | None:
    """The image format named by the file signature, if any."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    for magic, name in _IMAGE_MAGIC:
        if data.startswith(magic):
            return name
    return None


def sniff_text(data: bytes) -> str | None:
    head = data[:512].lstrip().lower()
    for prefix, what in _TEXT_SNIFFS:
        if head.startswith(prefix):
            return what
    return None


def inspect_image(data: bytes, limits: ImageLimits) -> ImageInfo:
    """Return the decoded image's facts or raise `ImageRejected`."""
    image, info = _open_checked(data, limits)
    with image:
        # A JPEG is checked at 1/8 scale (DCT-scaled draft decoding): libjpeg still parses every coefficient of the
        # stream, so truncated and corrupt files fail as they do in full, at a fraction of the cost.
        image.draft(image.mode, (1, 1))
        try:
            image.load()
        except OSError as exc:
            message = str(exc)
            kind = "truncated" if "truncated" in message.lower() else "corrupt"
            raise ImageRejected(kind, f"{info.format}: {message}") from None
        except (SyntaxError, ValueError) as exc:  # PIL raises these for malformed chunks
            raise ImageRejected("corrupt", f"{info.format}: {exc}") from None
    return info


def examine_image(data: bytes, limits: ImageLimits, decode: Callable[[bytes], Decoded]) -> tuple[ImageInfo, Decoded]:
    """`inspect_image`'s verdict with one decode instead of two: `decode` (the image pass's reduced decode,
    `curation.image_thumbnails.thumbnails`) decodes every coefficient of a JPEG and every pixel of other formats,
    so it stands in for the check's own decode. Only when it fails does the check decode, to classify the file as
    it always has (truncated, corrupt); a file the check passes keeps its row, and the decode's error is raised to
    the caller as `DecodeFailed`, so the image is stored with the hashing's error, as before the pass."""
    image, info = _open_checked(data, limits)
    image.close()
    try:
        return info, decode(data)
    except Exception as exc:  # any decoder failure: the check says whether the file is at fault
        inspect_image(data, limits)  # raises ImageRejected when it is
        raise DecodeFailed(info, exc) from exc


class DecodeFailed(Exception):
    """A file the check passes whose reduced decode failed: stored, its hashes an error row (`error`)."""

    def __init__(self, info: ImageInfo, error: BaseException) -> None:
        super().__init__(str(error))
        self.info = info
        self.error = error


def _open_checked(data: bytes, limits: ImageLimits) -> tuple[Image.Image, ImageInfo]:
    """The opened image and its facts, once everything but the pixels has passed; raises `ImageRejected`."""
    if len(data) > limits.max_bytes:
        raise ImageRejected("too_large", f"{len(data)} bytes > max_bytes {limits.max_bytes}")
    # Content first: an error page served as an image is not an image, however short it is.
    what = None if sniff_image(data) else sniff_text(data)
    if what:
        raise ImageRejected("not_an_image", f"{what} served as an image")
    if len(data) < limits.min_bytes:
        raise ImageRejected("too_small", f"{len(data)} bytes < min_bytes {limits.min_bytes}")
    try:
        with warnings.catch_warnings():
            # Our own max_pixels check below decides; PIL still raises past twice its own limit.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
    except UnidentifiedImageError:
        signature = sniff_image(data)
        if signature:
            raise ImageRejected("corrupt", f"{signature} signature but the header cannot be parsed") from None
        what = sniff_text(data)
        raise ImageRejected(
            "not_an_image", f"{what} served as an image" if what else "unknown file signature"
        ) from None
    except Image.DecompressionBombError as exc:
        raise ImageRejected("decompression_bomb", str(exc)) from None
    except (OSError, SyntaxError, ValueError, EOFError, IndexError, struct.error) as exc:
        # A header Pillow cannot read to its end (a JPEG cut inside a marker segment raises "Truncated File Read"):
        # the file's fault, not the disk's or the network's.
        kind = "truncated" if "truncated" in str(exc).lower() else "corrupt"
        raise ImageRejected(kind, f"{sniff_image(data) or 'unknown'} header: {exc}") from None
    width, height = image.size
    try:
        if width * height > limits.max_pixels:
            raise ImageRejected("decompression_bomb", f"{width}x{height} px > max_pixels {limits.max_pixels}")
        if min(width, height) < limits.min_side:
            raise ImageRejected("too_small", f"{width}x{height} px, min_side {limits.min_side}")
    except ImageRejected:
        image.close()
        raise
    return image, ImageInfo(format=image.format or "unknown", width=width, height=height, mode=image.mode)
