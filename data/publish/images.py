"""A release's image bytes, read by key as released (which config holds them: `data.publish.format.ImageConfig`).

`ReleasedImages` serves every reader of released images: the evaluation (bytes to embed, and the sha256 of each
image's released bytes, which keys its cached vectors) and the takedown patches (the parent's bytes, written again
unchanged, and its images found by sha256).
"""

from __future__ import annotations

import hashlib
from functools import cached_property
from pathlib import Path
from typing import NamedTuple

import pyarrow.compute as pc
import pyarrow.parquet as pq

_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


class ImageLocation(NamedTuple):
    file: Path
    row_group: int
    row: int


class ReleasedImages:
    """The image bytes of one config of a release by key, as released (no conversion), read one Parquet row group
    at a time: the last group read is kept, so reading in table order reads each group once, and no more than one
    group of images is held in memory. A row without bytes (a URL-only release: a null `image`, or no `image`
    column) has none: `get` gives None, `load` refuses it."""

    def __init__(self, folder: Path, key: str, image_column: str = "image") -> None:
        self.files = sorted(p for p in folder.glob("*.parquet") if p.is_file())
        self.image_column = image_column
        self.locations: dict[str, ImageLocation] = {}  # in table order
        self.sha_where: dict[str, str] = {}  # a `sha256` column value -> the first key that has it
        self._with_bytes: set[Path] = set()  # the files that have an image column
        for file in self.files:
            reader = pq.ParquetFile(file)
            names = reader.schema_arrow.names
            if image_column in names:
                self._with_bytes.add(file)
            columns = [key, "sha256"] if "sha256" in names else [key]
            for group in range(reader.num_row_groups):
                part = reader.read_row_group(group, columns=columns).to_pydict()
                shas = part.get("sha256") or [None] * len(part[key])
                for row, (name, sha) in enumerate(zip(part[key], shas, strict=True)):
                    self.locations[str(name)] = ImageLocation(file, group, row)
                    if sha is not None:
                        self.sha_where.setdefault(sha, str(name))
        self._group: tuple[Path, int] | None = None
        self._bytes: list[bytes | None] = []

    def get(self, key: str) -> bytes | None:
        """The released bytes of `key`; None where the release has none (URL-only). KeyError for an unknown key."""
        where = self.locations.get(key)
        if where is None:
            raise KeyError(f"no image {key!r} in the release")
        if where.file not in self._with_bytes:
            return None
        if self._group != (where.file, where.row_group):
            column = pq.ParquetFile(where.file).read_row_group(where.row_group, columns=[self.image_column])
            self._bytes = pc.struct_field(column.column(0), "bytes").to_pylist()  # a null image: None
            self._group = (where.file, where.row_group)
        return self._bytes[where.row]

    def load(self, key: str) -> bytes:
        """The released bytes of `key`; ValueError where it has none."""
        data = self.get(key)
        if not data:
            raise ValueError(f"image {key!r} has no bytes in {self.locations[key].file} (a URL-only release?)")
        return data

    def by_sha256(self, sha: str) -> bytes | None:
        """The released bytes of the first image whose `sha256` column is `sha`."""
        return self.get(self.sha_where[sha])

    @cached_property
    def _digests(self) -> dict[str, str | None]:
        """key -> sha256 of its released bytes (None: no bytes), read once, in table order."""
        digests: dict[str, str | None] = {}
        for key in self.locations:
            data = self.get(key)
            digests[key] = None if data is None else hashlib.sha256(data).hexdigest()
        return digests

    def released_sha256(self) -> dict[str, str]:
        """key -> sha256 of the released file (a converted image's differs from its `sha256` column), for the
        images released with their bytes."""
        return {key: sha for key, sha in self._digests.items() if sha is not None}

    @cached_property
    def sha256(self) -> dict[str, str]:
        """key -> sha256 of its released bytes, `""` for an image without bytes: what a model sees, so what its
        cached vector is keyed by (a row's `sha256` column names the source file, which the release may have
        re-encoded)."""
        return {key: "" if sha in (None, _EMPTY_SHA256) else sha for key, sha in self._digests.items()}
