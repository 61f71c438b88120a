"""A contact sheet of the largest near-duplicate clusters, so a person can see what was merged.

One PNG, one row per cluster: a header line (concept id, cluster size, kept image), then the kept image in a green
frame followed by the dropped ones in red frames, each captioned with the tail of its image id and, for a dropped
image, the method and score that linked it. Pillow only (ImageDraw and the default font). An image that cannot be
loaded or decoded becomes a grey "unreadable" tile instead of failing the sheet. The same decisions and bytes give
the same PNG bytes.
"""

from __future__ import annotations

import io
import posixpath
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from PIL import Image, ImageDraw, ImageFont, ImageOps

from data.workspace import Storage

KEPT_COLOUR = (0, 160, 60)
DROPPED_COLOUR = (210, 30, 30)
BACKGROUND = (255, 255, 255)
TILE_BACKGROUND = (235, 235, 235)  # behind a thumbnail that does not fill its square
UNREADABLE_COLOUR = (128, 128, 128)
TEXT_COLOUR = (20, 20, 20)
Font = ImageFont.ImageFont | ImageFont.FreeTypeFont  # what ImageFont.load_default gives, with or without FreeType


@dataclass(frozen=True)
class SheetLayout:
    """Pixel geometry of the sheet: a grid of framed square thumbnails, each row under a header line."""

    thumb_px: int
    margin: int = 8  # around the whole sheet
    gap: int = 8  # between cells and between rows
    border: int = 4  # the kept/dropped colour frame
    header_h: int = 16  # one text line above each row
    caption_h: int = 28  # two text lines under each thumbnail

    @property
    def frame_px(self) -> int:
        return self.thumb_px + 2 * self.border

    @property
    def row_h(self) -> int:
        return self.header_h + self.frame_px + self.caption_h

    def size(self, rows: int, cols: int) -> tuple[int, int]:
        """(width, height) of a sheet with `rows` clusters and `cols` thumbnails in the widest row."""
        width = 2 * self.margin + cols * self.frame_px + (cols - 1) * self.gap
        height = 2 * self.margin + rows * self.row_h + (rows - 1) * self.gap
        return width, height

    def row_top(self, row: int) -> int:
        return self.margin + row * (self.row_h + self.gap)

    def frame_box(self, row: int, col: int) -> tuple[int, int, int, int]:
        """(left, top, right, bottom), right/bottom exclusive, of the framed thumbnail at (row, col)."""
        left = self.margin + col * (self.frame_px + self.gap)
        top = self.row_top(row) + self.header_h
        return left, top, left + self.frame_px, top + self.frame_px


def write_contact_sheet(
    decisions: pa.Table,
    load_image: Callable[[str], bytes],
    out_path: str,
    max_clusters: int = 12,
    max_per_cluster: int = 8,
    thumb_px: int = 160,
) -> str | None:
    """Draw the `max_clusters` largest clusters (size >= 2) of an IMAGE_DEDUP decision table into one PNG.

    Clusters are ordered by size (largest first), then cluster_id, then concept_id; within a cluster the kept image
    comes first, then the dropped ones by image id, at most `max_per_cluster` in all. `load_image(image_id)` returns
    the stored bytes. Writes `out_path` (an fsspec path) and returns it, or returns None (writing nothing) when no
    cluster has two or more images.
    """
    if max_clusters < 1 or max_per_cluster < 1:
        raise ValueError("max_clusters and max_per_cluster must be >= 1")
    if thumb_px < 16:
        raise ValueError("thumb_px must be >= 16")
    clusters = _largest_clusters(decisions, max_clusters, max_per_cluster)
    if not clusters:
        return None
    layout = SheetLayout(thumb_px)
    cols = max(len(cluster.members) for cluster in clusters)
    sheet = Image.new("RGB", layout.size(len(clusters), cols), BACKGROUND)
    draw = ImageDraw.Draw(sheet)
    font = ImageFont.load_default()
    text_w = sheet.width - 2 * layout.margin
    for row, cluster in enumerate(clusters):
        shown = len(cluster.members)
        header = f"concept {cluster.concept_id} | {cluster.size} images | kept {cluster.cluster_id}"
        if shown < cluster.rows:
            header += f" | showing {shown} of {cluster.rows}"
        draw.text(
            (layout.margin, layout.row_top(row) + 2), _fit_head(draw, header, font, text_w), fill=TEXT_COLOUR, font=font
        )
        for col, member in enumerate(cluster.members):
            left, top, right, bottom = layout.frame_box(row, col)
            draw.rectangle((left, top, right - 1, bottom - 1), fill=KEPT_COLOUR if member.keep else DROPPED_COLOUR)
            tile = _thumbnail(load_image, member.image_id, thumb_px, font)
            sheet.paste(tile, (left + layout.border, top + layout.border))
            name = _fit_tail(draw, member.image_id, font, layout.frame_px)
            link = "kept" if member.keep else _link_text(member.method, member.score)
            draw.text((left, bottom + 2), name, fill=TEXT_COLOUR, font=font)
            draw.text((left, bottom + 15), _fit_head(draw, link, font, layout.frame_px), fill=TEXT_COLOUR, font=font)
    buffer = io.BytesIO()
    sheet.save(buffer, format="PNG")  # Pillow writes no timestamp: same pixels, same bytes
    folder, name = posixpath.split(out_path)
    storage = Storage(folder or ".")  # the workspace's writer: a temporary name, fsync, then the rename
    storage.write_bytes(storage.path(name), buffer.getvalue())
    return out_path


@dataclass(frozen=True)
class _Member:
    image_id: str
    keep: bool
    method: str | None
    score: float | None


@dataclass(frozen=True)
class _Cluster:
    concept_id: int
    cluster_id: str
    size: int  # the decision table's cluster_size
    rows: int  # members present in the table
    members: list[_Member]  # the ones drawn


def _largest_clusters(decisions: pa.Table, max_clusters: int, max_per_cluster: int) -> list[_Cluster]:
    """Pick clusters with Arrow group-by, so a million-row decision table is never turned into Python rows."""
    multi = decisions.filter(pc.greater_equal(decisions["cluster_size"], 2))
    if multi.num_rows == 0:
        return []
    groups = (
        multi.group_by(["concept_id", "cluster_id"])
        .aggregate([("cluster_size", "max"), ("image_id", "count")])
        .sort_by([("cluster_size_max", "descending"), ("cluster_id", "ascending"), ("concept_id", "ascending")])
        .slice(0, max_clusters)
    )
    chosen = multi.filter(pc.is_in(multi["cluster_id"], value_set=groups["cluster_id"]))
    columns = ["concept_id", "cluster_id", "image_id", "keep", "method", "score"]
    by_key: dict[tuple[int, str], list[_Member]] = {}
    for row in chosen.select(columns).to_pylist():
        by_key.setdefault((row["concept_id"], row["cluster_id"]), []).append(
            _Member(row["image_id"], bool(row["keep"]), row["method"], row["score"])
        )
    clusters = []
    for group in groups.to_pylist():
        members = by_key[(group["concept_id"], group["cluster_id"])]
        members.sort(key=lambda m: (not m.keep, m.image_id, m.method or "", -1.0 if m.score is None else m.score))
        clusters.append(
            _Cluster(
                concept_id=group["concept_id"],
                cluster_id=group["cluster_id"],
                size=group["cluster_size_max"],
                rows=len(members),
                members=members[:max_per_cluster],
            )
        )
    return clusters


def _thumbnail(load_image: Callable[[str], bytes], image_id: str, px: int, font: Font) -> Image.Image:
    """The image scaled to fit a px x px square, or a grey 'unreadable' tile when loading or decoding fails."""
    tile = Image.new("RGB", (px, px), TILE_BACKGROUND)
    try:
        with Image.open(io.BytesIO(load_image(image_id))) as opened:
            opened.draft("RGB", (px, px))  # JPEG: decode at a reduced scale, much faster for big photos
            image = ImageOps.exif_transpose(opened)
            image = image.convert("RGBA")  # transparency is shown over the tile colour, not as black
            image = ImageOps.contain(image, (px, px), Image.Resampling.LANCZOS)
    except Exception:  # any failure to read this one image (missing, truncated, not an image, too big)
        tile.paste(UNREADABLE_COLOUR, (0, 0, px, px))
        draw = ImageDraw.Draw(tile)
        draw.text((px / 2, px / 2), "unreadable", fill=BACKGROUND, font=font, anchor="mm")
        return tile
    offset = ((px - image.width) // 2, (px - image.height) // 2)
    tile.paste(image, offset, image)
    return tile


def _link_text(method: str | None, score: float | None) -> str:
    if method is None:
        return "dropped"
    return method if score is None else f"{method} {score:.4g}"


def _fit_head(draw: ImageDraw.ImageDraw, text: str, font: Font, width: int) -> str:
    """`text`, cut at the end with '..' if wider than `width`."""
    if draw.textlength(text, font=font) <= width:
        return text
    while text and draw.textlength(text + "..", font=font) > width:
        text = text[:-1]
    return text + ".."


def _fit_tail(draw: ImageDraw.ImageDraw, text: str, font: Font, width: int) -> str:
    """`text`, cut at the start: image ids ({slug}-{concept}-{rank}-{lang}) differ in their tail."""
    if draw.textlength(text, font=font) <= width:
        return text
    while text and draw.textlength(".." + text, font=font) > width:
        text = text[1:]
    return ".." + text
