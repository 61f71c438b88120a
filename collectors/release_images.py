"""Download and verify the images of a URL-only release (`release.mode: urls`; `culturebench fetch-release`).

Each image the release names by URL (3XCM: every `image_metadata` row; MixCuBe: every original, whose `image` is
null) is fetched by the HTTP downloader (`collectors.downloader`: the SSRF guard, opt-outs, limits and retries) and
checked against its released `sha256`. The report has one row per image:

- `ok`: the bytes hash to the released sha256;
- `changed`: an image came back, with other bytes (`detail` names both hashes);
- `opted_out`: the source now refuses us (robots.txt, TDMRep, `X-Robots-Tag`, `tdm-reservation`; `detail` names
  the rule);
- `gone`: no image (`error` is the downloader's class: `http_404`, `dns`, `not_an_image`, ...).

With `write_images`, the release's image table is written again under `out` with the verified images' bytes in its
HF `Image` column (converted to JPEG as an images-mode release would), so `datasets.load_dataset` reads it.

The release is untrusted input, read before anything is fetched or written: its manifest strictly
(`data.publish.integrity.read_manifest`: `name` and `version` are plain tokens, so the default output
`fetched/<name>/<version>` stays where it says), its image config's Parquet files against the manifest's sha256,
and each part's columns (`url`, `sha256` and the id as text, `image` an image struct), ids (none null, none
twice) and sha256s (each 64 lowercase hex digits). The output may be neither the release, nor inside it, nor
inside any release or result folder (`data.output_paths.check_output`).

Crash safety: the downloads go to `<out>/.fetch-state/` (`blobs/`, content-addressed, and `journal/`, the
downloader's own `DownloadJournal`), so a killed run resumes where it stopped: a rerun with the same `out` requests
only the URLs the journal does not hold yet (the journal's reuse rules apply: a download config with other limits or
another opt-out policy fetches again). A complete run removes `.fetch-state/`, so the next run into the same `out`
checks every URL afresh. The report and the image table are written atomically (temporary sibling, fsync, rename):
a crash never leaves a partial file under either name, nor replaces a complete one from an earlier run. One fetch
per output folder at a time.
"""

from __future__ import annotations

import re
import shutil
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import pyarrow as pa
import pyarrow.parquet as pq

from collectors.downloader import DownloadJournal, HttpDownloadConfig, download_hits
from collectors.optout import OPTED_OUT
from data.output_paths import check_output
from data.publish.format import IMAGE_CONFIGS, MANIFEST, ReleaseReadError
from data.publish.integrity import Manifest, ReleaseIntegrityError, read_manifest, verify_files
from data.publish.manifest import SHA256, ReleaseManifest
from data.publish.reader import REFERENCE_DIR
from data.schemas import STATUS_OK, ImagesRow
from data.takedown.older_versions import refuse_taken_down
from data.workspace import BlobStore, Storage

REPORT = "fetch_report.parquet"
#: The image table `write_images` writes under `<out>/<config>/`.
IMAGE_PART = "train-00000-of-00001.parquet"
#: Under `out`: the blobs and the download journal of a fetch that has not completed (removed when it does).
STATE = ".fetch-state"
#: The progress stage the download reports (`progress(stage, done, total)`).
STAGE = "fetching images"
OK, GONE, CHANGED = "ok", "gone", "changed"
FETCH_REPORT = pa.schema(
    [
        pa.field("image_id", pa.string(), nullable=False),  # 3XCM image_id, MixCuBe sample_id
        pa.field("url", pa.string()),
        pa.field("status", pa.string(), nullable=False),  # ok | gone | changed | opted_out
        pa.field("error", pa.string()),  # the downloader's failure class (gone, opted_out)
        pa.field("detail", pa.string()),
        pa.field("sha256", pa.string()),  # as released
        pa.field("fetched_sha256", pa.string()),  # of the bytes fetched now (ok, changed)
    ]
)
ROW_GROUP = 100


class Fetched(TypedDict):
    """What `_verdict` reads of a row's download: an IMAGES row, or NO_URL."""

    status: str
    error: str | None
    detail: str | None
    sha256: str | None


class FetchVerdict(TypedDict):
    """A FETCH_REPORT row."""

    image_id: str | None
    url: str | None
    sha256: str | None
    fetched_sha256: str | None
    status: str
    error: str | None
    detail: str | None


#: An image the release names by no URL (a local file's row): nothing to fetch.
NO_URL: Fetched = {
    "status": "failed",
    "error": "no_url",
    "detail": "the release has no URL for this image",
    "sha256": None,
}
#: The journal writes a batch this often (results, seconds): a kill loses at most one batch of downloads.
JOURNAL_FLUSH = (32, 1.0)
#: A temporary file `Storage.open_atomic` left behind when a run was killed while writing an output.
_STALE_TMP = re.compile(rf"^\.tmp-[0-9a-f]{{32}}-({re.escape(REPORT)}|{re.escape(IMAGE_PART)})$")

Progress = Callable[[str, int, int], None]


class FetchReleaseError(ReleaseReadError):
    """A folder that is not a URL-only release, or whose image table cannot be fetched (the message says why)."""


@dataclass
class FetchSummary:
    benchmark: str
    version: str
    counts: dict[str, int]
    report: str
    images: str | None  # the written image table, with --write-images

    def line(self) -> str:
        parts = ", ".join(f"{status} {self.counts.get(status, 0)}" for status in (OK, CHANGED, GONE, OPTED_OUT))
        return f"{self.benchmark} {self.version}: {sum(self.counts.values())} images: {parts}"


@dataclass
class ReleaseImages:
    """A URL-only release's image table, read and checked: one dict per row (without `image`)."""

    manifest: Manifest[ReleaseManifest]
    config: str  # the image config's folder: image_metadata (3XCM), default (MixCuBe)
    id_column: str
    table: pa.Table
    rows: list[Mapping[str, object]]  # the columns `_read_part` checked hold text: text_cell reads them
    embedded: list[bool]  # the row carries its bytes (a MixCuBe swap): nothing to fetch

    @property
    def wanted(self) -> list[int]:
        return [i for i, done in enumerate(self.embedded) if not done]


def default_out(manifest: Manifest[ReleaseManifest]) -> Path:
    """`fetched/<name>/<version>`, from the manifest's validated name and version (plain tokens, no separator)."""
    return Path("fetched") / manifest.name / manifest.version


def read_release(folder: Path, hf_features: bool = False) -> ReleaseImages:
    """The image table of the URL-only release `folder`; ReleaseReadError names the file and field that is wrong.
    `hf_features`: every column must also have an HF datasets feature (the image table is to be written)."""
    manifest = read_manifest(folder)
    mode = manifest.model.mode
    if manifest.name not in IMAGE_CONFIGS:
        known = ", ".join(IMAGE_CONFIGS)
        raise FetchReleaseError(f"{folder / MANIFEST}: unknown benchmark {manifest.name!r} (known: {known})")
    if mode != "urls":
        raise FetchReleaseError(f"{folder} is a release with its images (mode {mode!r}), not a URL-only one")
    config, id_column = IMAGE_CONFIGS[manifest.name]
    # The reference pack too: a fetched image table is read with the release's own countries and cultures.
    problems = verify_files(manifest, [config, REFERENCE_DIR])
    if problems:
        raise ReleaseIntegrityError(folder, problems)
    files = sorted(p for p in (folder / config).glob("*.parquet") if p.is_file())
    if not files:
        raise FetchReleaseError(f"{folder} has no {config}/*.parquet")
    parts = [_read_part(file, manifest.name, id_column, hf_features) for file in files]
    _check_ids(files, parts, id_column)
    try:
        table = pa.concat_tables(parts, promote_options="permissive").replace_schema_metadata(None)
    except pa.ArrowException as exc:
        raise FetchReleaseError(f"{folder / config}: parts with different schemas ({_one_line(exc)})") from None
    # An older version's images taken down since: none is requested (the newest version leaves them out).
    refuse_taken_down(folder, manifest.name, "fetch", table)
    has_image = "image" in table.column_names
    rows = table.select([c for c in table.column_names if c != "image"]).to_pylist()
    embedded = [bool(v and v.get("bytes")) for v in table["image"].to_pylist()] if has_image else [False] * len(rows)
    return ReleaseImages(manifest, config, id_column, table, rows, embedded)


def _read_part(path: Path, benchmark: str, id_column: str, hf_features: bool) -> pa.Table:
    # ParquetFile, not pq.read_table: that goes through pyarrow.dataset, which imports pandas.
    try:
        reader = pq.ParquetFile(path)
        schema = reader.schema_arrow
    except (pa.ArrowException, OSError) as exc:
        raise FetchReleaseError(f"{path}: not a readable Parquet file ({_one_line(exc)})") from None
    for column in (id_column, "url", "sha256"):
        if column not in schema.names:
            raise FetchReleaseError(
                f"{path}: no column {column!r} (a URL-only {benchmark} table has {id_column}, url and sha256)"
            )
    for column in (id_column, "url", "sha256", "format"):
        if column in schema.names and not _is_text(schema.field(column).type):
            raise FetchReleaseError(f"{path}: column {column!r} holds {schema.field(column).type}, not text")
    if "image" in schema.names and not _is_image(schema.field("image").type):
        raise FetchReleaseError(
            f"{path}: column 'image' holds {schema.field('image').type}, not an image (struct of bytes and path)"
        )
    if hf_features:
        _check_hf_features(path, schema)
    try:
        return reader.read()
    except (pa.ArrowException, OSError) as exc:
        raise FetchReleaseError(f"{path}: not a readable Parquet file ({_one_line(exc)})") from None


def _check_hf_features(path: Path, schema: pa.Schema) -> None:
    """Each column (but `image`) has an HF datasets feature, so the image table can be written."""
    from datasets import Features

    for field in schema:
        if field.name == "image":
            continue
        try:
            Features.from_arrow_schema(pa.schema([field]))
        except (ValueError, TypeError, KeyError, NotImplementedError) as exc:
            raise FetchReleaseError(
                f"{path}: column {field.name!r} holds {field.type}, which an HF datasets table cannot hold "
                f"({_one_line(exc)}); fetch without --write-images"
            ) from None


def _is_text(kind: pa.DataType) -> bool:
    text: bool = pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_null(kind)
    return text


def _is_image(kind: pa.DataType) -> bool:
    if pa.types.is_null(kind):
        return True
    if not pa.types.is_struct(kind) or kind.get_field_index("bytes") < 0:
        return False
    data = kind.field("bytes").type
    binary: bool = pa.types.is_binary(data) or pa.types.is_large_binary(data) or pa.types.is_null(data)
    return binary


def _check_ids(files: list[Path], parts: list[pa.Table], id_column: str) -> None:
    """Every row has an id, and no id is on two rows: the report and the image table name each image by it. Every
    row's `sha256` is 64 lowercase hex digits: a download is checked against it, and a null or malformed one would
    make every download `changed`, the release's fault reported as the source's."""
    seen: dict[str, tuple[Path, int]] = {}
    for file, part in zip(files, parts, strict=True):
        hashes = part["sha256"].to_pylist()
        for row, key in enumerate(part[id_column].to_pylist(), start=1):
            if key is None:
                raise FetchReleaseError(f"{file}: row {row} has a null {id_column!r}; every image needs an id")
            sha = hashes[row - 1]
            if not isinstance(sha, str) or not SHA256.fullmatch(sha):
                raise FetchReleaseError(
                    f"{file}: column 'sha256' in row {row} ({id_column} {key!r}) is {_shown(sha)}, not the sha256 of "
                    "an image (64 lowercase hex digits); the release cannot say whether a download is its image"
                )
            if key in seen:
                first, at = seen[key]
                where = f"rows {at} and {row}" if first == file else f"row {row}, and on {first} row {at}"
                raise FetchReleaseError(f"{file}: {id_column} {key!r} is on {where}; each image needs an id of its own")
            seen[key] = (file, row)


def _shown(value: object) -> str:
    return "null" if value is None else repr(value)[:80]


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]


def fetch_release(
    folder: Path,
    out: Path | None = None,
    config: HttpDownloadConfig | None = None,
    write_images: bool = False,
    progress: Progress | None = None,
) -> FetchSummary:
    """Fetch and verify every image `folder` (a URL-only release) names by URL; write the report (and the image
    table) under `out` (default `fetched/<name>/<version>`). Everything is checked before the first request."""
    release = read_release(folder, hf_features=write_images)
    schema = _image_schema(release) if write_images else None
    option = "--out" if out is not None else "the default --out"
    out = out if out is not None else default_out(release.manifest)
    target = check_output(out, inputs=[folder], option=option)
    rows, id_column, wanted = release.rows, release.id_column, release.wanted

    for stale in target.glob(".blobs-*"):  # the scratch folders of fetches before .fetch-state
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale)
    target.mkdir(parents=True, exist_ok=True)
    storage = Storage(str(target))
    for parent in (target, target / release.config):  # what a run killed while writing left behind
        for path in parent.glob(".tmp-*") if parent.is_dir() else []:
            if _STALE_TMP.match(path.name) and path.is_file():
                path.unlink(missing_ok=True)
    blobs = BlobStore(storage, f"{STATE}/blobs")  # kept until the run completes: a rerun resumes from them
    journal = DownloadJournal(storage, f"{STATE}/journal", *JOURNAL_FLUSH)

    with_url = [i for i in wanted if rows[i].get("url")]
    hits = [{"image_id": rows[i][id_column], "url": rows[i]["url"]} for i in with_url]
    fetched: dict[int, ImagesRow] = {}
    if hits:
        on_item = None
        if progress is not None:
            progress(STAGE, 0, len(hits))
            on_item = lambda done, total: progress(STAGE, done, total)  # noqa: E731
        table = download_hits(hits, blobs, config or HttpDownloadConfig(), journal=journal, on_item=on_item)
        fetched = dict(zip(with_url, table.to_pylist(), strict=True))
    report = [_verdict(rows[i], id_column, fetched.get(i, NO_URL)) for i in wanted]

    images_path = None
    if write_images:
        # By row, not by id: each row's image is the blob fetched for that row.
        verified = {
            i: sha
            for i, got in zip(wanted, report, strict=True)
            if got["status"] == OK and (sha := fetched[i]["sha256"]) is not None  # an ok download has its blob
        }
        _write_image_table(storage, storage.path(release.config, IMAGE_PART), release, schema, verified, blobs)
        _copy_reference(folder, storage)
        images_path = str(out / release.config / IMAGE_PART)
    storage.write_parquet(storage.path(REPORT), pa.Table.from_pylist(report, schema=FETCH_REPORT))
    storage.rm(storage.path(STATE))  # complete: the next run checks every URL afresh
    counts = Counter(r["status"] for r in report)
    return FetchSummary(release.manifest.name, release.manifest.version, dict(counts), str(out / REPORT), images_path)


def _copy_reference(folder: Path, storage: Storage) -> None:
    """The release's reference pack beside the fetched image table (checked against the manifest already)."""
    source = folder / REFERENCE_DIR
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        storage.write_bytes(storage.path(REFERENCE_DIR, path.relative_to(source).as_posix()), path.read_bytes())


def text_cell(row: Mapping[str, object], column: str) -> str | None:
    """A cell of a text column (`_read_part` checked it holds text or nulls), None where the row lacks it."""
    value = row.get(column)
    if value is not None and not isinstance(value, str):
        raise TypeError(f"column {column!r} holds {value!r}, not text")
    return value


def _verdict(row: Mapping[str, object], id_column: str, got: Fetched) -> FetchVerdict:
    image_id, url, sha256 = text_cell(row, id_column), text_cell(row, "url"), text_cell(row, "sha256")
    if got["status"] == STATUS_OK:
        status, error, detail = OK, None, None
        if got["sha256"] != sha256:
            status, detail = CHANGED, f"sha256 {got['sha256']}, released {sha256}"
    else:
        status = OPTED_OUT if got["error"] == OPTED_OUT else GONE
        error, detail = got["error"], got["detail"]
    return {
        "image_id": image_id,
        "url": url,
        "sha256": sha256,
        "fetched_sha256": got["sha256"] if got["status"] == STATUS_OK else None,
        "status": status,
        "error": error,
        "detail": detail,
    }


def _image_schema(release: ReleaseImages) -> pa.Schema:
    """The written image table's schema: the release's columns and an HF `Image` column (before any download)."""
    from data.publish.image_tables import hf_image_schema  # datasets: only with --write-images

    try:
        return hf_image_schema(pa.schema([f for f in release.table.schema if f.name != "image"]))
    except (ValueError, TypeError, KeyError, NotImplementedError) as exc:
        where = release.manifest.folder / release.config
        raise FetchReleaseError(f"{where}: no HF datasets schema for its columns ({_one_line(exc)})") from None


def _write_image_table(
    storage: Storage,
    path: str,
    release: ReleaseImages,
    schema: pa.Schema,
    verified: dict[int, str],
    blobs: BlobStore,
) -> None:
    """The release's image table with an HF `Image` column: the released bytes (MixCuBe swaps), the verified
    downloads (JPEG as released), null for the rest; `verified` maps a row's position to its fetched blob. Written
    atomically: a failure leaves an earlier table as it was."""
    from data.publish.image_tables import to_release_jpeg

    table, rows = release.table, release.rows
    images = table["image"].to_pylist() if "image" in table.column_names else [None] * len(rows)
    with storage.open_atomic(path) as handle, pq.ParquetWriter(handle, schema, compression="zstd") as writer:
        for start in range(0, len(rows), ROW_GROUP):
            records = []
            for i in range(start, min(len(rows), start + ROW_GROUP)):
                row, key = rows[i], rows[i][release.id_column]
                if release.embedded[i]:
                    image = images[i]
                elif i in verified:
                    data = blobs.get(verified[i])
                    fmt = text_cell(row, "format") or ("JPEG" if data[:3] == b"\xff\xd8\xff" else "PNG")
                    image = {"bytes": to_release_jpeg(data, fmt), "path": f"{key}.jpg"}
                else:
                    image = None
                records.append({**row, "image": image})
            writer.write_table(pa.Table.from_pylist(records, schema=schema))
