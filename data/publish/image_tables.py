"""Image tables in an immutable folder: HF Parquet shards (an HF `Image` column, row groups of a fixed size) and
WebDataset tars of the same samples, written in one pass over the image bytes.

Shards are planned from the rows' `num_bytes` (a released JPEG is close to its original's size). Images are loaded
one row group at a time, and each shard, Parquet or tar, is streamed into its staged file: no shard is held in memory
(a Parquet shard is up to `max_shard_bytes`, 450 MB by default).
"""

from __future__ import annotations

import bisect
import io
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from types import TracebackType
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from data.progress import StepProgress
from data.publish.folder import ImmutableFolder
from data.publish.format import WEBDATASET_FEATURES
from data.publish.tables import hf_schema
from data.publish.tar_stream import TarStream
from data.table_rows import TableRows


class BlobSource(Protocol):
    """Where a writer reads image bytes by sha256: a build's blob store, or a parent release for a patch."""

    def get(self, sha256: str, /) -> bytes: ...


@dataclass
class ImageRow:
    """One image to materialise: metadata for the tables and the sample JSON, plus its released bytes."""

    key: str
    metadata: dict[str, Any]
    load: Callable[[], bytes]
    #: False: the row is published without its bytes (a URL-only release); its `image` is null.
    embed: bool = True


# The `ImageRow`s of an Arrow table, made a slice at a time when the writer reaches them: a list of every row's
# metadata as Python objects costs about 4 KB per image, 4 GB for a million.
TableImageRows = TableRows[ImageRow]


@dataclass(frozen=True)
class ShardLimits:
    row_group_size: int  # rows per Parquet row group
    max_shard_bytes: int  # upper bound per Parquet and tar shard
    max_shard_images: int  # images per WebDataset tar


def to_release_jpeg(data: bytes, source_format: str, quality: int = 95) -> bytes:
    """JPEG bytes for the release: originals already in JPEG pass unchanged, others are converted once."""
    if source_format == "JPEG":
        return data
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        rgb = image.convert("RGB")
        profile = image.info.get("icc_profile")  # colours mean what the original meant
    buffer = io.BytesIO()
    rgb.save(buffer, format="JPEG", quality=quality, optimize=False, icc_profile=profile)
    return buffer.getvalue()


def hf_image_schema(schema: pa.Schema, image_column: str = "image") -> pa.Schema:
    """Append the HF `Image` column (struct<bytes, path>) and the `huggingface` features metadata."""
    from datasets import Features  # heavy import, only when writing a release
    from datasets import Image as HFImage

    features = Features.from_arrow_schema(schema)
    features[image_column] = HFImage()
    return features.arrow_schema


def sidecar_fields(schema: pa.Schema) -> list[str]:
    """The columns a tar sample's JSON holds: those the table's schema declares never null, the image's key among
    them. `datasets`' `webdataset` builder types each column from the first samples of the first shard, so a column
    null there and set later fails to cast (`Couldn't cast array of type string to null`, datasets issue #7549); the
    nullable columns live in the Parquet table only, joined by the key, and the bare `load_dataset("webdataset",
    data_files=...)` loads without `features=` and without turning null into ""."""
    return [f.name for f in schema if not f.nullable and f.name != "image"]


def webdataset_features(schema: pa.Schema) -> dict[str, Any]:
    """The features of a tar sample as the `webdataset` builder yields it: its key and shard, the JPEG, and the
    sidecar JSON (the row's never-null columns, `sidecar_fields`), as `Features.to_dict()` writes them."""
    from datasets import Features, Value
    from datasets import Image as HFImage

    sidecar = Features.from_arrow_schema(pa.schema([schema.field(name) for name in sidecar_fields(schema)]))
    features = Features({"__key__": Value("string"), "__url__": Value("string"), "jpg": HFImage(), "json": sidecar})
    as_dict: dict[str, Any] = features.to_dict()
    return as_dict


def write_image_shards(
    folder: ImmutableFolder,
    config_name: str,
    rows: Sequence[ImageRow],
    schema: pa.Schema,
    limits: ShardLimits,
    split: str = "train",
    *,
    image_column: bool = True,
    tars: bool = True,
    progress: StepProgress | None = None,
    workers: int = 1,
) -> dict[str, list[str]]:
    """The Parquet shards `<config>/<split>-NNNNN-of-NNNNN.parquet` and the tars `images/NNNNN.tar`; returns the
    paths of each; `progress` counts the rows written. A URL-only release writes no tars, and either no `image`
    column (`image_column=False`) or a null `image` for each row that is not `embed`ded.

    With `workers` > 1 and more than one Parquet shard, each Parquet shard and the tars that start among its rows are
    written by one of `workers` worker processes (`data/process_pool.py`): the same files, byte for byte, on every
    core. A tar that runs past its Parquet shard reads the rest of its images itself."""
    job = _ShardJob(
        folder,
        config_name,
        split,
        hf_image_schema(schema) if image_column else hf_schema(schema),
        limits.row_group_size,
        image_column,
        sidecar_fields(schema),
    )
    sizes = [int(r.metadata.get("num_bytes") or 0) if image_column and r.embed else 0 for r in rows]
    plan = list(_plan_shards(sizes, limits.max_shard_bytes))
    # No tars at all without the images' bytes: then no segment owns a tar or reads past its Parquet shard.
    tar_plan = (
        list(_plan_shards(sizes, limits.max_shard_bytes, limits.max_shard_images)) if image_column and tars else []
    )
    segments = _segments(plan, tar_plan, apart=workers > 1 and len(plan) > 1)
    if len(segments) == 1:
        written = [job.write(segments[0], rows, 0, progress)]
    else:
        written = _write_apart(job, segments, rows, workers, progress)
    for done in written:  # the files a worker wrote, recorded here as if written here
        folder.files.update(done.files)
        folder.sizes.update(done.sizes)
    tar_files = [rel for done in written for rel in done.tars]
    if tar_files:
        features = json.dumps(webdataset_features(schema), indent=2, ensure_ascii=False) + "\n"
        folder.write_bytes(WEBDATASET_FEATURES, features.encode())
    return {"parquet": [rel for done in written for rel in done.parquet], "webdataset": tar_files}


@dataclass(frozen=True)
class _Segment:
    """Parquet shards and the tars that start among their rows, (number, start, stop) each: what one process
    writes. Its rows run from its first Parquet row to the end of its last Parquet shard or tar."""

    parquet: list[tuple[int, int, int]]
    tars: list[tuple[int, int, int]]
    count: int  # the Parquet shards of the whole plan, for the file names

    @property
    def start(self) -> int:
        return self.parquet[0][1]

    @property
    def stop(self) -> int:
        return max([self.parquet[-1][2], *(stop for _, _, stop in self.tars)])

    @property
    def rows(self) -> int:
        return self.parquet[-1][2] - self.parquet[0][1]


def _segments(plan: list[tuple[int, int]], tar_plan: list[tuple[int, int]], apart: bool) -> list[_Segment]:
    """One segment of every shard, or (`apart`) one per Parquet shard, each owning the tars that start in it."""
    parquet = [(number, start, stop) for number, (start, stop) in enumerate(plan)]
    numbered = [(number, start, stop) for number, (start, stop) in enumerate(tar_plan)]
    groups = [[shard] for shard in parquet] if apart else [parquet]
    return [_Segment(group, [t for t in numbered if group[0][1] <= t[1] < group[-1][2]], len(plan)) for group in groups]


@dataclass(frozen=True)
class _Written:
    """What a segment wrote: its files' paths, and the sha256 and size of each."""

    parquet: list[str]
    tars: list[str]
    files: dict[str, str]
    sizes: dict[str, int]


@dataclass(frozen=True)
class _ShardJob:
    """Everything a segment's writer needs but its rows; it pickles, so that a worker process writes a segment."""

    folder: ImmutableFolder
    config_name: str
    split: str
    schema: pa.Schema  # with the image column, or without (`image_column`)
    row_group_size: int
    image_column: bool
    fields: list[str]  # the tars' sidecar JSON columns

    def write(
        self, segment: _Segment, rows: Sequence[ImageRow], offset: int, progress: StepProgress | None = None
    ) -> _Written:
        """Write `segment`, whose rows are `rows[position - offset]`: each image loaded once, for its Parquet shard
        and its tar alike."""
        parquet_files = []
        with _TarShards(self.folder, segment.tars, self.fields) as tar_shards:
            for shard, start, stop in segment.parquet:
                rel = f"{self.config_name}/{self.split}-{shard:05d}-of-{segment.count:05d}.parquet"
                with (
                    self.folder.open_write(rel) as sink,
                    pq.ParquetWriter(sink, self.schema, compression="zstd") as writer,
                ):
                    for group_start in range(start, stop, self.row_group_size):
                        group_stop = min(stop, group_start + self.row_group_size)
                        group = rows[group_start - offset : group_stop - offset]
                        records = [
                            self._record(position, row, tar_shards)
                            for position, row in enumerate(group, start=group_start)
                        ]
                        writer.write_table(pa.Table.from_pylist(records, schema=self.schema))
                        if progress is not None:
                            progress(group_stop, len(rows))
                parquet_files.append(rel)
            # The rest of the last tar, past the last Parquet shard: another segment's rows, read again here.
            end = segment.parquet[-1][2]
            for position, row in enumerate(rows[end - offset : segment.stop - offset], start=end):
                if row.embed:
                    tar_shards.add(position, row.key, row.load(), row.metadata)
        rels = [*parquet_files, *tar_shards.written]
        return _Written(
            parquet_files,
            tar_shards.written,
            {rel: self.folder.files[rel] for rel in rels},
            {rel: self.folder.sizes[rel] for rel in rels},
        )

    def _record(self, position: int, row: ImageRow, tar_shards: _TarShards) -> dict[str, Any]:
        if not self.image_column:
            return row.metadata
        if not row.embed:
            return {**row.metadata, "image": None}
        data = row.load()
        if tar_shards.owns(position):
            tar_shards.add(position, row.key, data, row.metadata)
        return {**row.metadata, "image": {"bytes": data, "path": f"{row.key}.jpg"}}

    def write_apart(self, item: tuple[_Segment, Sequence[ImageRow]]) -> _Written:
        segment, rows = item
        return self.write(segment, rows, segment.start)


def _write_apart(
    job: _ShardJob,
    segments: list[_Segment],
    rows: Sequence[ImageRow],
    workers: int,
    progress: StepProgress | None,
) -> list[_Written]:
    """The segments in worker processes, each sent its own rows only; every segment finishes (or fails) before a
    failure is raised, so that no worker still writes into a staging folder its caller removes."""
    from data.process_pool import Failed, run_in_processes

    items = [(segment, _window(rows, segment.start, segment.stop)) for segment in segments]
    written: list[_Written | None] = [None] * len(segments)
    failures: list[BaseException] = []
    done = 0
    describe = partial(_describe_segment, job)
    for position, outcome in run_in_processes(job.write_apart, items, workers, describe):
        if isinstance(outcome, Failed):
            failures.append(outcome.error)
            continue
        written[position] = outcome
        done += segments[position].rows
        if progress is not None:
            progress(done, len(rows))
    if failures:
        raise failures[0]
    return [w for w in written if w is not None]


def _describe_segment(job: _ShardJob, item: tuple[_Segment, Sequence[ImageRow]]) -> str:
    shard = item[0].parquet[0][0]
    return f"{job.config_name} shard {shard} of {item[0].count}"


def _window(rows: Sequence[ImageRow], start: int, stop: int) -> Sequence[ImageRow]:
    """`rows[start:stop]` as the rows a worker is sent: a table's window pickles only its own rows."""
    if isinstance(rows, TableRows):
        return rows.window(start, stop)
    return list(rows[start:stop])


@dataclass
class _TarShards:
    """The WebDataset tars of a plan, each streamed into its staged file as its images arrive; a context manager,
    so that a tar cut short by an error is dropped, not published."""

    folder: ImmutableFolder
    plan: list[tuple[int, int, int]]  # (tar number, start, stop), sorted and contiguous
    fields: list[str]  # the sidecar JSON's columns (`sidecar_fields`)
    written: list[str] = field(default_factory=list)
    _current: TarStream | None = None
    _file: ExitStack = field(default_factory=ExitStack)
    _shard: int = -1
    _starts: list[int] = field(init=False)

    def __post_init__(self) -> None:
        self._starts = [start for _, start, _ in self.plan]

    def __enter__(self) -> _TarShards:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if kind is None:
            self._flush()
            return
        if self._current is not None:  # end the tar into the file about to be dropped, not at garbage collection
            self._current.close()
            self._current = None
        self._file.__exit__(kind, error, trace)  # the staged file is removed, not renamed into place

    def _find(self, position: int) -> int:
        """The plan's index of the tar holding `position`, or -1. The plan's ranges are contiguous and sorted: a
        bisection, not a scan of every shard per image (a million-image release has a thousand tars)."""
        index = bisect.bisect_right(self._starts, position) - 1
        return index if self.plan and index >= 0 and position < self.plan[index][2] else -1

    def owns(self, position: int) -> bool:
        return self._find(position) >= 0

    def add(self, position: int, key: str, data: bytes, metadata: dict[str, Any]) -> None:
        index = self._find(position)
        if index < 0:
            raise ValueError(f"image position {position} is in no tar of the plan")
        shard = self.plan[index][0]
        if "." in key:
            raise ValueError(f"WebDataset keys may not contain dots: {key!r}")
        if shard != self._shard or self._current is None:
            self._flush()
            sink = self._file.enter_context(self.folder.open_write(f"images/{shard:05d}.tar"))
            self._shard = shard
            self._current = TarStream(sink, user="culturebench", group="culturebench")
        sidecar = {name: metadata.get(name) for name in self.fields}
        sample_json = json.dumps(sidecar, sort_keys=True, ensure_ascii=False, default=str).encode()
        self._current.write_sample(key, {"jpg": data, "json": sample_json})

    def _flush(self) -> None:
        if self._current is None:
            return
        self._current.close()  # the tar's end blocks; the stream it was given stays open
        self._file.close()  # the staged file is complete: renamed into place, its sha256 recorded
        self.written.append(f"images/{self._shard:05d}.tar")
        self._current = None


def _plan_shards(sizes: list[int], max_bytes: int, max_count: int | None = None) -> Iterator[tuple[int, int]]:
    """Contiguous [start, stop) ranges whose summed size stays under max_bytes (and count under max_count)."""
    start, total = 0, 0
    for index, size in enumerate(sizes):
        full = (total + size > max_bytes) or (max_count is not None and index - start >= max_count)
        if index > start and full:
            yield start, index
            start, total = index, 0
        total += size
    yield start, len(sizes)
