"""The contact sheet of merged clusters: one PNG, one row per cluster, kept image first in a green frame."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from PIL import Image

from curation.contact_sheet import (
    BACKGROUND,
    DROPPED_COLOUR,
    KEPT_COLOUR,
    UNREADABLE_COLOUR,
    SheetLayout,
    write_contact_sheet,
)
from data.schemas import IMAGE_DEDUP, blank_row, from_rows

COLOURS = {
    "blue": (0, 0, 255),
    "yellow": (255, 255, 0),
    "cyan": (0, 255, 255),
    "magenta": (255, 0, 255),
    "orange": (255, 128, 0),
    "black": (0, 0, 0),
    "purple": (128, 0, 128),
}


def solid_png(folder: Path, name: str, colour: tuple[int, int, int], size: tuple[int, int] = (24, 24)) -> None:
    Image.new("RGB", size, colour).save(folder / f"{name}.png")


def decision(
    image_id: str, concept_id: int, cluster_id: str, size: int, method: str | None = None, score: float | None = None
) -> dict:
    keep = image_id == cluster_id
    return blank_row(
        IMAGE_DEDUP,
        image_id=image_id,
        concept_id=concept_id,
        cluster_id=cluster_id,
        cluster_size=size,
        keep=keep,
        duplicate_of=None if keep else cluster_id,
        method=method,
        score=score,
        reason=None if keep else "near_duplicate",
    )


def loader(folder: Path):  # -> Callable[[str], bytes]
    return lambda image_id: (folder / f"{image_id}.png").read_bytes()


def pixel(sheet: Image.Image, xy: tuple[int, int]) -> tuple[int, int, int]:
    return sheet.getpixel(xy)[:3]


def centre(box: tuple[int, int, int, int]) -> tuple[int, int]:
    return (box[0] + box[2]) // 2, (box[1] + box[3]) // 2


@pytest.fixture
def images(tmp_path: Path) -> Path:
    folder = tmp_path / "images"
    folder.mkdir()
    for name, colour in COLOURS.items():
        solid_png(folder, name, colour)
    return folder


def clusters_table() -> pa.Table:
    """Concept 1: a cluster of 3 kept 'blue'; concept 2: a cluster of 2 kept 'cyan'; plus two singletons.
    Rows are shuffled so that the sheet's order cannot come from the input order."""
    rows = [
        decision("orange", 3, "orange", 1),
        decision("magenta", 2, "cyan", 2, "phash", 4.0),
        decision("yellow", 1, "blue", 3, "embedding", 0.9731),
        decision("blue", 1, "blue", 3),
        decision("purple", 1, "purple", 1),
        decision("cyan", 2, "cyan", 2),
        decision("black", 1, "blue", 3, "exact_bytes", 0.0),
    ]
    return from_rows(rows, IMAGE_DEDUP)


def test_sheet_shows_largest_clusters_kept_first(tmp_path: Path, images: Path) -> None:
    out = tmp_path / "sheets" / "contact.png"
    thumb = 40
    assert write_contact_sheet(clusters_table(), loader(images), str(out), thumb_px=thumb) == str(out)
    sheet = Image.open(out)
    sheet.load()
    layout = SheetLayout(thumb)
    # Two clusters of size >= 2 (singletons are left out); the widest has 3 members.
    assert sheet.size == layout.size(2, 3)
    # Row 0 is the larger cluster: kept 'blue' first (green frame), then the dropped ones by image id (red frames).
    expected_rows = [["blue", "black", "yellow"], ["cyan", "magenta"]]
    for row, names in enumerate(expected_rows):
        for col, name in enumerate(names):
            box = layout.frame_box(row, col)
            frame = KEPT_COLOUR if col == 0 else DROPPED_COLOUR
            assert pixel(sheet, (box[0] + 1, box[1] + 1)) == frame, (row, col)
            assert pixel(sheet, centre(box)) == COLOURS[name], (row, col)
    # The shorter row leaves its third cell empty.
    assert pixel(sheet, centre(layout.frame_box(1, 2))) == BACKGROUND


def test_limits_on_clusters_and_members(tmp_path: Path, images: Path) -> None:
    out = tmp_path / "limited.png"
    layout = SheetLayout(32)
    write_contact_sheet(clusters_table(), loader(images), str(out), max_clusters=1, max_per_cluster=2, thumb_px=32)
    sheet = Image.open(out)
    assert sheet.size == layout.size(1, 2)
    assert pixel(sheet, centre(layout.frame_box(0, 0))) == COLOURS["blue"]
    assert pixel(sheet, centre(layout.frame_box(0, 1))) == COLOURS["black"]


def test_ties_are_broken_by_cluster_id_not_input_order(tmp_path: Path, images: Path) -> None:
    rows = [
        decision("magenta", 2, "yellow", 2, "phash", 2.0),
        decision("yellow", 2, "yellow", 2),
        decision("black", 1, "blue", 2, "phash", 1.0),
        decision("blue", 1, "blue", 2),
    ]
    layout = SheetLayout(24)
    for order, name in ((rows, "a.png"), (rows[::-1], "b.png")):
        out = tmp_path / name
        write_contact_sheet(from_rows(order, IMAGE_DEDUP), loader(images), str(out), thumb_px=24)
        sheet = Image.open(out)
        assert pixel(sheet, centre(layout.frame_box(0, 0))) == COLOURS["blue"]  # "blue" < "yellow"
        assert pixel(sheet, centre(layout.frame_box(1, 0))) == COLOURS["yellow"]
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()


def test_no_cluster_gives_none_and_no_file(tmp_path: Path, images: Path) -> None:
    singles = from_rows([decision("blue", 1, "blue", 1), decision("cyan", 2, "cyan", 1)], IMAGE_DEDUP)
    out = tmp_path / "none.png"
    assert write_contact_sheet(singles, loader(images), str(out)) is None
    assert write_contact_sheet(IMAGE_DEDUP.empty_table(), loader(images), str(out)) is None
    assert not out.exists()


def test_unreadable_images_become_grey_tiles(tmp_path: Path, images: Path) -> None:
    (images / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    rows = [
        decision("blue", 1, "blue", 3),
        decision("broken", 1, "blue", 3, "phash", 3.0),
        decision("gone", 1, "blue", 3, "phash", 5.0),  # no file: the loader raises
    ]
    out = tmp_path / "broken.png"
    layout = SheetLayout(48)
    assert write_contact_sheet(from_rows(rows, IMAGE_DEDUP), loader(images), str(out), thumb_px=48) == str(out)
    sheet = Image.open(out)
    assert sheet.size == layout.size(1, 3)
    assert pixel(sheet, centre(layout.frame_box(0, 0))) == COLOURS["blue"]
    for col in (1, 2):
        box = layout.frame_box(0, col)
        assert pixel(sheet, (box[0] + 1, box[1] + 1)) == DROPPED_COLOUR
        inner = (box[0] + layout.border + 1, box[1] + layout.border + 1)
        assert pixel(sheet, inner) == UNREADABLE_COLOUR


def test_non_square_and_transparent_images_fit_their_tile(tmp_path: Path, images: Path) -> None:
    Image.new("RGBA", (60, 20), (0, 0, 255, 255)).save(images / "wide.png")
    Image.new("RGBA", (20, 20), (0, 0, 0, 0)).save(images / "clear.png")
    rows = [decision("wide", 1, "wide", 2), decision("clear", 1, "wide", 2, "phash", 0.0)]
    out = tmp_path / "shapes.png"
    layout = SheetLayout(60)
    write_contact_sheet(from_rows(rows, IMAGE_DEDUP), loader(images), str(out), thumb_px=60)
    sheet = Image.open(out)
    left, top, _, _ = layout.frame_box(0, 0)
    inner_left, inner_top = left + layout.border, top + layout.border
    assert pixel(sheet, (inner_left + 30, inner_top + 30)) == COLOURS["blue"]  # letterboxed, centred
    assert pixel(sheet, (inner_left + 30, inner_top + 2)) != COLOURS["blue"]  # band above the wide image
    # A fully transparent image shows the tile colour, not black.
    assert pixel(sheet, centre(layout.frame_box(0, 1))) != COLOURS["black"]


def test_fsspec_memory_path(images: Path, tmp_path: Path) -> None:
    import fsspec

    path = "memory://contact-sheet-test/sheet.png"
    assert write_contact_sheet(clusters_table(), loader(images), path, thumb_px=24) == path
    with fsspec.open(path, "rb") as handle:
        sheet = Image.open(handle)
        sheet.load()
    assert sheet.size == SheetLayout(24).size(2, 3)
    fsspec.filesystem("memory").rm("/contact-sheet-test", recursive=True)


def test_bad_limits_are_refused(tmp_path: Path, images: Path) -> None:
    with pytest.raises(ValueError):
        write_contact_sheet(clusters_table(), loader(images), str(tmp_path / "x.png"), max_clusters=0)
    with pytest.raises(ValueError):
        write_contact_sheet(clusters_table(), loader(images), str(tmp_path / "x.png"), thumb_px=4)
