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
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from collectors.downloader import HttpDownloadConfig, download_hits
from collectors.optout import OPTED_OUT
from data.release import MANIFEST, hf_image_schema, to_release_jpeg
from data.release_3xcm import read_parquet_files
from data.schemas import STATUS_OK
from data.workspace import BlobStore, Storage

REPORT = "fetch_report.parquet"
#: A release's image config and its id column, per benchmark.
IMAGE_CONFIGS = {"3xcm": ("image_metadata", "image_id"), "mixcube": ("default", "sample_id")}
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
#: An image the release names by no URL (a local file's row): nothing to fetch.
NO_URL = {"status": "failed", "error": "no_url", "detail": "the release has no URL for this image", "sha256": None}


class FetchReleaseError(ValueError):
    """A folder that is not a URL-only release (the message says why)."""


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


def fetch_release(
    folder: Path, out: Path, config: HttpDownloadConfig | None = None, write_images: bool = False
) -> FetchSummary:
    """Fetch and verify every image `folder` (a URL-only release) names by URL; write the report (and the image
    table) under `out`."""
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        raise FetchReleaseError(f"{folder} is not a release folder (no {MANIFEST})")
    manifest = json.loads(manifest_path.read_text())
    name, mode = manifest.get("name"), manifest.get("mode", "images")
    if name not in IMAGE_CONFIGS:
        raise FetchReleaseError(f"{folder}: unknown benchmark {name!r} in {MANIFEST}")
    if mode != "urls":
        raise FetchReleaseError(f"{folder} is a release with its images (mode {mode!r}), not a URL-only one")
    config_name, id_column = IMAGE_CONFIGS[name]
    files = sorted(p for p in (folder / config_name).glob("*.parquet") if p.is_file())
    if not files:
        raise FetchReleaseError(f"{folder} has no {config_name}/*.parquet")
    table = read_parquet_files(files).replace_schema_metadata(None)
    has_image = "image" in table.column_names
    meta_columns = [c for c in table.column_names if c != "image"]
    rows = table.select(meta_columns).to_pylist()
    embedded = [bool(v and v.get("bytes")) for v in table["image"].to_pylist()] if has_image else [False] * len(rows)
    wanted = [i for i, done in enumerate(embedded) if not done]  # a MixCuBe swap carries its bytes

    out.mkdir(parents=True, exist_ok=True)
    config = config or HttpDownloadConfig()
    with tempfile.TemporaryDirectory(dir=out, prefix=".blobs-") as scratch:
        blobs = BlobStore(Storage(scratch), "blobs")  # the downloads, until they are checked and written
        with_url = [i for i in wanted if rows[i].get("url")]
        hits = [{"image_id": rows[i][id_column], "url": rows[i]["url"]} for i in with_url]
        fetched = dict(zip(with_url, download_hits(hits, blobs, config).to_pylist() if hits else [], strict=True))
        report = [_verdict(rows[i], id_column, fetched.get(i, NO_URL)) for i in wanted]
        report_path = out / REPORT
        pq.write_table(pa.Table.from_pylist(report, schema=FETCH_REPORT), report_path, compression="zstd")
        images_path = None
        if write_images:
            verified = {r["image_id"] for r in report if r["status"] == OK}
            images_path = _write_image_table(out / config_name, table, rows, id_column, embedded, verified, blobs)
    counts = Counter(r["status"] for r in report)
    return FetchSummary(name, manifest.get("version", "?"), dict(counts), str(report_path), images_path)


def _verdict(row: dict[str, Any], id_column: str, got: dict[str, Any]) -> dict[str, Any]:
    out = {"image_id": row[id_column], "url": row["url"], "sha256": row["sha256"], "fetched_sha256": None}
    if got["status"] == STATUS_OK:
        out["fetched_sha256"] = got["sha256"]
        if got["sha256"] == row["sha256"]:
            return {**out, "status": OK, "error": None, "detail": None}
        detail = f"sha256 {got['sha256']}, released {row['sha256']}"
        return {**out, "status": CHANGED, "error": None, "detail": detail}
    status = OPTED_OUT if got["error"] == OPTED_OUT else GONE
    return {**out, "status": status, "error": got["error"], "detail": got["detail"]}


def _write_image_table(
    folder: Path,
    table: pa.Table,
    rows: list[dict[str, Any]],
    id_column: str,
    embedded: list[bool],
    verified: set[str],
    blobs: BlobStore,
) -> str:
    """The release's image table with an HF `Image` column: the released bytes (MixCuBe swaps), the verified
    downloads (JPEG as released), null for the rest."""
    schema = hf_image_schema(pa.schema([f for f in table.schema if f.name != "image"]))
    images = table["image"].to_pylist() if "image" in table.column_names else [None] * len(rows)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "train-00000-of-00001.parquet"
    with pq.ParquetWriter(path, schema, compression="zstd") as writer:
        for start in range(0, len(rows), ROW_GROUP):
            records = []
            for i in range(start, min(len(rows), start + ROW_GROUP)):
                row, key = rows[i], rows[i][id_column]
                if embedded[i]:
                    image = images[i]
                elif key in verified:
                    data = to_release_jpeg(blobs.get(row["sha256"]), row.get("format") or _format(blobs, row))
                    image = {"bytes": data, "path": f"{key}.jpg"}
                else:
                    image = None
                records.append({**row, "image": image})
            writer.write_table(pa.Table.from_pylist(records, schema=schema))
    return str(path)


def _format(blobs: BlobStore, row: dict[str, Any]) -> str:
    """A MixCuBe row has no `format`: JPEG by its signature, else converted."""
    return "JPEG" if blobs.get(row["sha256"])[:3] == b"\xff\xd8\xff" else "PNG"
