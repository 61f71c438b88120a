"""The denylist of a benchmark's release root: images taken down, which no later build may release again.

`culturebench takedown` writes `<release root>/<benchmark>/denylist.json` next to the version folders, merging its
entries with those already there. Each entry names one removed image by its bytes (`sha256`, and `pixel_sha256`
when the release knows it) and its addresses (`url`, `final_url`), with the takedown's reason, UTC date, the patch
version that removed it and the version it was removed from.

Builds read the denylist of their `release.root` (each benchmark's `flows/<benchmark>/takedown.py`):
- 3XCM drops a matching image where images become catalog rows (the `image_metadata` stage). That is after the
  near-duplicate dedup, which still sees the image, so its re-encodes and resizes stay merged into it and leave with
  it instead of taking its place.
- MixCuBe marks a matching original `error="taken_down"` in the `originals` stage; its search backend never requests
  a denylisted URL.
The denylist's digest is part of those stages' fingerprints (nothing changes while there is no denylist), so a
rebuild of the same config redoes them and everything after.

Takedowns on one release root may run at the same time: each holds an exclusive lock, `denylist.json.lock` next to
the denylist (created with O_EXCL on a local disk, with exclusive create `xb` on an object store, as
`ReleaseWriter._publish` does), from reading the denylist (`locked_denylist`) through deriving and writing its patch
to merging its own entries, so takedowns of one root run one after the other and each patch applies every entry
merged before it (`flows/operations/takedown.py`); `write_denylist` alone reads the denylist again under the lock and
merges. A lock left by a crashed takedown is not broken by age or pid (neither is reliable across machines and
object stores, and a live holder may be slow): a writer waits `LOCK_TIMEOUT_S` and then fails with a line naming
the lock and saying to delete it if no takedown is running.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, ValidationError

from data.schemas import IMAGES, STATUS_FAILED, fetched_url, from_rows, images_row, str_cell
from data.workspace import BlobStore, Storage

FILE = "denylist.json"
LOCK = f"{FILE}.lock"
#: How long a takedown waits for another one's lock on the denylist before it gives up (a merge of a 20 MB denylist
#: takes a few seconds; a lock older than this is most likely a crashed takedown's).
LOCK_TIMEOUT_S = 60.0
TAKEN_DOWN = "taken_down"  # the `error` of a denylisted image in a build, the `reason` of a dropped query


class DenylistError(ValueError):
    """A denylist file that cannot be read: the message names it."""


class DenylistLockError(RuntimeError):
    """The denylist's lock stayed taken for `LOCK_TIMEOUT_S`: the message names the lock file."""


class DenylistEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    image_id: str  # its id in the release it was removed from (3XCM image_id, MixCuBe sample_id)
    sha256: str | None = None
    pixel_sha256: str | None = None
    url: str | None = None
    final_url: str | None = None
    reason: str
    date: str  # UTC, YYYY-MM-DD
    version: str  # the patch release that removed it
    removed_from: str  # the release it was removed from

    def key(self) -> tuple[str | None, ...]:
        return (self.image_id, self.sha256, self.pixel_sha256, self.url, self.final_url, self.version)


class Denylist(BaseModel):
    model_config = ConfigDict(extra="forbid")

    benchmark: str
    entries: list[DenylistEntry] = []

    @property
    def sha256s(self) -> frozenset[str]:
        return frozenset(h for e in self.entries for h in (e.sha256, e.pixel_sha256) if h)

    @property
    def urls(self) -> frozenset[str]:
        return frozenset(u for e in self.entries for u in (e.url, e.final_url) if u)

    def digest(self) -> str | None:
        """What decides the matches (hashes and URLs), hashed; None for an empty denylist."""
        if not self.entries:
            return None
        keys = json.dumps([sorted(self.sha256s), sorted(self.urls)], separators=(",", ":"))
        return hashlib.sha256(keys.encode()).hexdigest()

    def merged(self, new: Iterable[DenylistEntry]) -> Denylist:
        """These entries, then the new ones not already here (an identical entry is kept once)."""
        seen = {e.key() for e in self.entries}
        added: list[DenylistEntry] = []
        for entry in new:
            if entry.key() not in seen:
                seen.add(entry.key())
                added.append(entry)
        return Denylist(benchmark=self.benchmark, entries=[*self.entries, *added])

    def matching(self, table: pa.Table, hash_columns: Sequence[str], url_columns: Sequence[str]) -> pa.Array:
        """A boolean mask: the rows whose hash columns or URL columns hold a denylisted value."""
        mask = pa.array([False] * table.num_rows, pa.bool_())
        for columns, values in ((hash_columns, self.sha256s), (url_columns, self.urls)):
            wanted = pa.array(sorted(values), pa.string())
            for column in columns:
                if column in table.column_names:
                    hit = pc.fill_null(pc.is_in(table[column], value_set=wanted), False)
                    mask = pc.or_(mask, hit)
        return mask


def denylist_path(storage: Storage, benchmark: str) -> str:
    return storage.path(benchmark, FILE)


def denylist_location(root: str, benchmark: str) -> str:
    """How messages name the denylist of `<root>/<benchmark>/`."""
    storage = Storage(root)
    return storage.display(denylist_path(storage, benchmark))


def read_denylist(root: str, benchmark: str) -> Denylist:
    """The denylist of `<root>/<benchmark>/`, empty when there is none."""
    storage = Storage(root)
    path = denylist_path(storage, benchmark)
    if not storage.exists(path):
        return Denylist(benchmark=benchmark)
    try:
        denylist = Denylist.model_validate(storage.read_json(path))
    except (ValueError, ValidationError, RecursionError) as exc:
        reason = " ".join(str(exc).split())[:300]
        raise DenylistError(f"{storage.display(path)}: not a culturebench denylist ({reason})") from None
    if denylist.benchmark != benchmark:
        raise DenylistError(f"{storage.display(path)} is the denylist of {denylist.benchmark!r}, not {benchmark!r}")
    return denylist


def write_denylist(root: str, benchmark: str, entries: Iterable[DenylistEntry]) -> tuple[str, Denylist]:
    """Merge `entries` into the denylist of `<root>/<benchmark>/` (atomically, under its lock, reading it again
    there: a concurrent takedown's entries are kept); returns its path and content."""
    with locked_denylist(root, benchmark) as held:
        return held.merge(entries)


class HeldDenylist:
    """The denylist of a release root while its lock is held (`locked_denylist`): what it holds now, and a merge
    that writes it without taking the lock again."""

    def __init__(self, root: str, benchmark: str) -> None:
        self.root, self.benchmark = root, benchmark
        self.denylist = read_denylist(root, benchmark)  # read again under the lock: a concurrent merge is seen

    def merge(self, entries: Iterable[DenylistEntry]) -> tuple[str, Denylist]:
        """Merge `entries` (atomically); returns the denylist's path and content."""
        storage = Storage(self.root)
        path = denylist_path(storage, self.benchmark)
        merged = read_denylist(self.root, self.benchmark).merged(list(entries))
        storage.write_json(path, merged.model_dump(mode="json"))
        self.denylist = merged
        return storage.display(path), merged


@contextmanager
def locked_denylist(root: str, benchmark: str) -> Iterator[HeldDenylist]:
    """Hold the lock of the denylist of `<root>/<benchmark>/` while the block runs, the denylist read under it.
    A takedown holds it from reading the denylist to merging its own entries, so that every patch is derived with
    every entry merged before it (`flows/operations/takedown.py`). DenylistLockError after `LOCK_TIMEOUT_S`."""
    storage = Storage(root)
    with _locked(storage, storage.path(benchmark, LOCK), denylist_path(storage, benchmark)):
        yield HeldDenylist(root, benchmark)


@contextmanager
def _locked(storage: Storage, lock: str, path: str) -> Iterator[None]:
    """Hold `lock` (created exclusively) while the block runs; wait for another holder at most `LOCK_TIMEOUT_S`."""
    storage.fs.makedirs(lock.rsplit("/", 1)[0], exist_ok=True)
    holder = f"pid {os.getpid()} on {socket.gethostname()} since {datetime.now(UTC).isoformat(timespec='seconds')}\n"
    deadline = time.monotonic() + LOCK_TIMEOUT_S
    pause = 0.01
    while not _try_lock(storage, lock, holder.encode()):
        if time.monotonic() >= deadline:
            raise DenylistLockError(
                f"{storage.display(lock)} exists{_held_by(storage, lock)}: another takedown is updating "
                f"{storage.display(path)}, or one crashed while it held the lock; waited {LOCK_TIMEOUT_S:g} s. If no "
                f"takedown is running, delete {storage.display(lock)} and rerun"
            )
        time.sleep(pause)
        pause = min(pause * 2, 0.25)
    try:
        yield
    finally:
        if storage.local:
            with suppress(FileNotFoundError):
                os.remove(lock)
        else:
            storage.rm(lock)


def _try_lock(storage: Storage, lock: str, holder: bytes) -> bool:
    """Create `lock` exclusively; False when it exists."""
    if storage.local:
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        try:
            with suppress(OSError):  # who holds it is for a message only: a full disk must not leave a lock behind
                os.write(fd, holder)
        finally:
            os.close(fd)
        return True
    try:
        with storage.fs.open(lock, "xb") as handle:
            handle.write(holder)
    except FileExistsError:
        return False
    return True


def _held_by(storage: Storage, lock: str) -> str:
    """` (held by <what its holder wrote>)`, best effort, one line."""
    try:
        with storage.fs.open(lock, "rb") as handle:
            text = handle.read(200).decode("utf-8", "replace")
    except OSError:
        return ""
    text = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return f" (held by {text})" if text else ""


# -- what builds do with it -------------------------------------------------------------------------------------------


def denylist_settings(root: str, benchmark: str) -> dict[str, str] | None:
    """A stage's share of the denylist in its fingerprint: None (no change) without entries."""
    digest = read_denylist(root, benchmark).digest()
    return None if digest is None else {"denylist_sha256": digest}


def with_denylist(settings: Any, root: str, benchmark: str) -> Any:
    """`settings` as it was without a denylist, else paired with the denylist's digest."""
    share = denylist_settings(root, benchmark)
    return settings if share is None else (settings, share)


def drop_from_catalog(catalog: pa.Table, denylist: Denylist) -> tuple[pa.Table, list[str]]:
    """The image table without denylisted rows (by sha256, pixel hash, URL or final URL), `index_in_dataset`
    renumbered 0..n-1; and the image ids dropped."""
    if not denylist.entries:
        return catalog, []
    hit = denylist.matching(catalog, ("sha256", "pixel_sha256"), ("url", "final_url"))
    dropped = catalog.filter(hit)["image_id"].to_pylist()
    if not dropped:
        return catalog, []
    kept = catalog.filter(pc.invert(hit))
    at = kept.schema.get_field_index("index_in_dataset")
    field = kept.schema.field(at)
    return kept.set_column(at, field, pa.array(range(kept.num_rows), field.type)), dropped


def mark_taken_down(
    table: pa.Table, denylist: Denylist, hash_columns: Sequence[str], url_columns: Sequence[str]
) -> pa.Table:
    """A collection table (`status`, `error`) with each denylisted row failed as `taken_down`."""
    if not denylist.entries:
        return table
    hit = denylist.matching(table, hash_columns, url_columns)
    if not pc.any(hit).as_py():
        return table
    for column, value in (("status", STATUS_FAILED), ("error", TAKEN_DOWN)):
        at = table.schema.get_field_index(column)
        field = table.schema.field(at)
        table = table.set_column(at, field, pc.if_else(hit, pa.scalar(value, field.type), table[column]))
    return table


class DenylistFetcher:
    """A fetcher (`fetch(hits, blobs)` -> IMAGES rows) that never requests a denylisted URL: such a hit is a failed
    row, `error="taken_down"`, in its place."""

    def __init__(self, fetcher: Any, denylist: Denylist) -> None:
        self.fetcher = fetcher
        self.urls = denylist.urls

    def fetch(self, hits: Sequence[Mapping[str, object]], blobs: BlobStore) -> pa.Table:
        refused = [h["url"] in self.urls for h in hits]
        if not any(refused):
            return self.fetcher.fetch(hits, blobs)
        wanted = [h for h, no in zip(hits, refused, strict=True) if not no]
        fetched = iter(self.fetcher.fetch(wanted, blobs).to_pylist() if wanted else [])
        rows = [
            images_row(str_cell(h, "image_id"), fetched_url(str_cell(h, "url"), STATUS_FAILED, attempts=0,
                       error=TAKEN_DOWN, detail="the URL is on the release root's denylist"))
            if no else next(fetched)
            for h, no in zip(hits, refused, strict=True)
        ]  # fmt: skip
        return from_rows(rows, IMAGES)

    def __getattr__(self, name: str) -> Any:  # anything else the wrapped fetcher offers
        return getattr(self.fetcher, name)
