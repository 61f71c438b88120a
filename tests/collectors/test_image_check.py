"""Image checks: every kind of bad input gets its own precise failure class."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from collectors.image_check import ImageLimits, ImageRejected, inspect_image

LIMITS = ImageLimits(min_side=64, min_bytes=100, max_bytes=2_000_000, max_pixels=20_000_000)


def encode(image: Image.Image, fmt: str = "JPEG") -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt)
    return buffer.getvalue()


def noise(width: int = 200, height: int = 150) -> Image.Image:
    return Image.effect_noise((width, height), 60).convert("RGB")


def rejected(data: bytes, limits: ImageLimits = LIMITS) -> ImageRejected:
    with pytest.raises(ImageRejected) as info:
        inspect_image(data, limits)
    return info.value


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP", "GIF", "BMP"])
def test_good_images_pass_with_their_facts(fmt: str) -> None:
    info = inspect_image(encode(noise(), fmt), LIMITS)
    assert (info.format, info.width, info.height) == (fmt, 200, 150)


def test_html_served_as_an_image() -> None:
    error = rejected(b"<!DOCTYPE html><html><body>Access denied</body></html>" * 5)
    assert error.error == "not_an_image" and "HTML" in error.detail


@pytest.mark.parametrize(
    "body", [b"<html><body>403</body></html>", b"<!doctype html><title>x</title>", b'{"error": "gone"}', b"<?xml?>"]
)
def test_a_tiny_error_page_is_not_an_image_rather_than_too_small(body: bytes) -> None:
    """Below min_bytes, what the bytes are decides first: a short HTML/JSON/XML body is no image at all."""
    assert len(body) < ImageLimits().min_bytes
    error = rejected(body)
    assert error.error == "not_an_image" and "served as an image" in error.detail
    # A short body that starts like an image is still too small, not mistaken for text.
    assert rejected(b"\x89PNG\r\n\x1a\n" + b"{" * 10).error == "too_small"


def test_unknown_bytes_are_not_an_image() -> None:
    assert rejected(bytes(range(256)) * 4).error == "not_an_image"


def test_truncated_jpeg() -> None:
    data = encode(noise(400, 300))
    assert rejected(data[: len(data) // 2]).error == "truncated"


def test_a_jpeg_cut_inside_a_header_segment_is_truncated_not_a_crash() -> None:
    """Pillow raises a bare OSError ("Truncated File Read") from `Image.open` when a marker segment runs past the end
    of the bytes; the downloader would read an OSError as a network failure."""
    buffer = io.BytesIO()
    noise().save(buffer, format="JPEG", comment=b"x" * 4000)
    data = buffer.getvalue()
    start = data.index(b"\xff\xfe")  # the COM segment
    error = rejected(data[: start + 2000])
    assert error.error == "truncated" and error.detail.startswith("JPEG header")


def full_decode_outcome(data: bytes) -> str:
    """An independent reference: what a full decode (no draft scaling) says of the bytes."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
    except OSError as exc:
        return "truncated" if "truncated" in str(exc).lower() else "corrupt"
    except (SyntaxError, ValueError):
        return "corrupt"
    return "ok"


@pytest.mark.parametrize(("mode", "progressive"), [("RGB", False), ("RGB", True), ("L", False), ("CMYK", True)])
def test_the_reduced_check_of_a_jpeg_agrees_with_a_full_decode(mode: str, progressive: bool) -> None:
    """The check decodes JPEGs at 1/8 scale; libjpeg still reads every coefficient, so cut and damaged files fail
    as a full decode fails them."""
    buffer = io.BytesIO()
    noise(320, 240).convert(mode).save(buffer, format="JPEG", quality=80, progressive=progressive)
    data = buffer.getvalue()
    variants = [data] + [data[: len(data) * k // 10] for k in range(3, 10)]
    damaged = bytearray(data)
    damaged[len(data) // 2 : len(data) // 2 + 64] = b"\xff\xd9" * 32  # an end marker in the middle of the scan
    variants.append(bytes(damaged))
    for variant in variants:
        try:
            ours = "ok" if inspect_image(variant, LIMITS) else "?"
        except ImageRejected as exc:
            ours = exc.error
        assert ours == full_decode_outcome(variant), len(variant)
    assert {full_decode_outcome(v) for v in variants} >= {"ok", "truncated"}


def test_image_signature_with_a_broken_header_is_corrupt() -> None:
    data = encode(noise())
    error = rejected(data[:150] + b"\x00" * 400)
    assert error.error == "corrupt" and "JPEG" in error.detail


def test_too_small_by_pixels_and_by_bytes() -> None:
    assert rejected(encode(noise(50, 300))).error == "too_small"
    assert rejected(b"\xff\xd8\xff" + b"\x00" * 20).error == "too_small"


def test_too_large_body() -> None:
    limits = LIMITS.model_copy(update={"max_bytes": 1000})
    assert rejected(encode(noise()), limits).error == "too_large"


def test_decompression_bomb_is_caught_from_the_header() -> None:
    bomb = encode(Image.new("1", (6000, 6000)), "PNG")  # 36 MP in a few kB
    assert len(bomb) < 100_000
    error = rejected(bomb)
    assert error.error == "decompression_bomb" and "6000x6000" in error.detail
