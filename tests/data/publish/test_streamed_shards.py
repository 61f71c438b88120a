"""The release streams each Parquet and tar shard into its staged file (issue 43): a shard is never held in memory
whole, the manifest's sha256 and size are those of the bytes on disk, and a shard cut short by an error is never
renamed into place."""

from __future__ import annotations

import hashlib
import tarfile
import tracemalloc
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data.publish.folder import ImmutableFolder
from data.publish.image_tables import ImageRow, ShardLimits, write_image_shards

SCHEMA = pa.schema([pa.field("image_id", pa.string(), nullable=False), pa.field("num_bytes", pa.int64())])
IMAGE_BYTES = 1 << 20  # 1 MB per image: 40 of them make one 40 MB shard of each kind


def _rows(count: int, fail_at: int | None = None) -> list[ImageRow]:
    def load(k: int) -> bytes:
        if k == fail_at:
            raise OSError(f"image {k} unreadable")
        return bytes([k % 251]) * IMAGE_BYTES

    return [
        ImageRow(
            key=f"img{k:03d}", metadata={"image_id": f"img{k:03d}", "num_bytes": IMAGE_BYTES}, load=partial(load, k)
        )
        for k in range(count)
    ]


def _folder(tmp_path: Path) -> ImmutableFolder:
    return ImmutableFolder.at(str(tmp_path / "release"), "streamed", "0.1.0")


def test_a_shard_is_streamed_not_held_in_memory(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    limits = ShardLimits(row_group_size=2, max_shard_bytes=450_000_000, max_shard_images=1000)
    write_image_shards(_folder(tmp_path / "warm"), "images_config", _rows(1), SCHEMA, limits)  # imports outside
    tracemalloc.start()
    try:
        written = write_image_shards(folder, "images_config", _rows(40), SCHEMA, limits)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(written["parquet"]) == 1 and len(written["webdataset"]) == 1  # one 40 MB shard of each kind
    # A row group's images (2 MB) and the rows' records, not the 40 MB shard: a buffered shard peaks above 40 MB.
    assert peak < 12 * IMAGE_BYTES, f"peak {peak / IMAGE_BYTES:.1f} MB"
    for rel in (*written["parquet"], *written["webdataset"]):
        data = (Path(folder.staging) / rel).read_bytes()
        assert folder.files[rel] == hashlib.sha256(data).hexdigest()
        assert folder.sizes[rel] == len(data)
    table = pq.read_table(Path(folder.staging) / written["parquet"][0])
    assert table["image_id"].to_pylist() == [f"img{k:03d}" for k in range(40)]
    assert table["image"][7].as_py()["bytes"] == bytes([7]) * IMAGE_BYTES
    with tarfile.open(Path(folder.staging) / written["webdataset"][0]) as tar:
        names = tar.getnames()
        assert names[:2] == ["img000.jpg", "img000.json"] and len(names) == 80
        member = tar.extractfile("img039.jpg")
        assert member is not None and member.read() == bytes([39]) * IMAGE_BYTES


def test_an_existing_folder_is_hashed_as_the_stream_goes_without_writing(tmp_path: Path) -> None:
    """Writing an existing release again compares: the streamed shards are hashed, nothing is staged."""
    limits = ShardLimits(row_group_size=3, max_shard_bytes=8 * IMAGE_BYTES, max_shard_images=5)
    first = _folder(tmp_path)
    write_image_shards(first, "images_config", _rows(12), SCHEMA, limits)
    first.commit({"name": "streamed", "version": "0.1.0"})
    again = _folder(tmp_path)
    assert again.compare_only
    write_image_shards(again, "images_config", _rows(12), SCHEMA, limits)
    assert again.files == first.files and again.sizes == first.sizes
    assert not list(tmp_path.glob(".staging-*"))
    assert again.commit({"name": "streamed", "version": "0.1.0"}).status == "unchanged"


def test_a_shard_cut_short_is_not_renamed_into_place(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    limits = ShardLimits(row_group_size=2, max_shard_bytes=4 * IMAGE_BYTES, max_shard_images=3)
    with pytest.raises(OSError, match="image 9 unreadable"):
        write_image_shards(folder, "images_config", _rows(12, fail_at=9), SCHEMA, limits)
    staged = sorted(str(p.relative_to(folder.staging)) for p in Path(folder.staging).rglob("*") if p.is_file())
    # Parquet shards of 4 images ([0, 4) and [4, 8) complete) and tars of 3 ([0, 3) and [3, 6) complete; [6, 9) still
    # open, as a tar is closed when the next one starts): the shards being written are dropped, no temporary file left.
    assert staged == sorted(
        ["images_config/train-00000-of-00003.parquet", "images_config/train-00001-of-00003.parquet"]
        + [f"images/{k:05d}.tar" for k in range(2)]
    )
    assert set(folder.files) == set(staged)
    for rel in staged:
        assert folder.files[rel] == hashlib.sha256((Path(folder.staging) / rel).read_bytes()).hexdigest()
