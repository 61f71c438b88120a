"""An immutable folder: a release, a patch, a reassembled benchmark or an evaluation result, written once.

The folder is staged in a hidden sibling (`.staging-<leaf>-<random>`) and renamed into place only when complete.
The rename is exclusive: on a local disk, renaming a folder onto a non-empty one fails, and on an object store a
lock object created with exclusive create (`xb`) lets one writer publish at a time. A folder is immutable: writing
it again succeeds only when every file on disk, hashed again, is byte-identical to what this writer would write
(the existing folder is then left untouched); otherwise it is refused, naming the files that differ. When the folder
exists already nothing is staged at all, so checking an identical rewrite needs no write access to its parent.

Every folder ends with `manifest.json`: what the caller states (name, version, provenance) and the sha256 and size
of every file written.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

from pydantic import BaseModel

from data.publish.format import MANIFEST
from data.publish.manifest import validated
from data.workspace import Storage, fsync_dir, sha256_bytes


class ReleaseExistsError(FileExistsError):
    pass


class ReleaseBusyError(FileExistsError):
    """Another writer is publishing the same version right now (or crashed while doing so)."""


@dataclass
class ReleaseResult:
    path: str
    version: str
    status: str  # created | unchanged
    manifest: dict[str, Any]


class ImmutableFolder:
    """Writes the folder `final` of `storage`; `name` and `version` are how messages and the result name it."""

    def __init__(
        self, storage: Storage, final: str, name: str, version: str, schema: type[BaseModel] | None = None
    ) -> None:
        self.storage = storage
        self.schema = schema  # the model its manifest must validate through before it is written
        self.final = final
        self.name = name
        self.version = version
        parent, _, leaf = final.rstrip("/").rpartition("/")
        self.staging = f"{parent}/.staging-{leaf}-{uuid.uuid4().hex[:8]}"
        self.files: dict[str, str] = {}  # relative path -> sha256
        self.sizes: dict[str, int] = {}
        # Files that say how, not what (a card naming the code version): an existing folder that differs only in
        # them is the same result, and is kept as it is.
        self.volatile: set[str] = set()
        # An existing folder is compared with, not written again: nothing needs staging.
        self.compare_only = self.storage.exists(self.final)
        # How a refusal names the folder and what to do instead; a command whose folder is not a version (an
        # export, a reassembled benchmark) words its own (`{where}`, `{count}`, `{examples}` are filled in).
        self.refusal = (
            f"release {name} {version} already exists at {{where}} with different content ({{count}} files differ, "
            "e.g. {examples}); versions are immutable, choose a new version"
        )

    @classmethod
    def at(cls, folder: str, name: str, version: str, schema: type[BaseModel] | None = None) -> ImmutableFolder:
        """Exactly the folder `folder` (a path or an fsspec URL)."""
        parent, _, leaf = folder.rstrip("/").rpartition("/")
        storage = Storage(parent or ".")
        return cls(storage, storage.path(leaf), name, version, schema)

    def write_bytes(self, rel: str, data: bytes) -> None:
        if not self.compare_only:
            self.storage.write_bytes(f"{self.staging}/{rel}", data)
        self.files[rel] = sha256_bytes(data)
        self.sizes[rel] = len(data)

    @contextmanager
    def open_write(self, rel: str) -> Iterator[io.RawIOBase]:
        """A file of the folder written as a stream: a Parquet shard of hundreds of MB is never held in memory. Its
        sha256 and size are taken on the way; the file is staged atomically, as `write_bytes` stages it."""
        digest = _DigestingWriter(None)
        if self.compare_only:
            yield digest
        else:
            with self.storage.open_atomic(f"{self.staging}/{rel}") as handle:
                digest.target = handle
                yield digest
        self.files[rel] = digest.sha256.hexdigest()
        self.sizes[rel] = digest.size

    def commit(self, manifest: Mapping[str, object]) -> ReleaseResult:
        """Write the manifest and move the staged folder into place, exclusively; or find the folder there already,
        identical on disk, and leave it untouched."""
        manifest = {
            **manifest,
            "files": {k: {"sha256": v, "bytes": self.sizes[k]} for k, v in sorted(self.files.items())},
        }
        if self.schema is not None:
            validated(self.schema, manifest)  # ManifestError: a malformed manifest is never published (nor compared)
        if not self.compare_only:
            self.storage.write_json(f"{self.staging}/{MANIFEST}", manifest)
            if self._publish():
                return ReleaseResult(path=self.final, version=self.version, status="created", manifest=manifest)
            self.abort()  # the folder appeared meanwhile: compare with it instead
        return self._same_as_existing()

    def abort(self) -> None:
        self.storage.rm(self.staging)

    def _publish(self) -> bool:
        """Rename the staging folder to the final one; False when that folder exists already (nothing is moved into
        it)."""
        if self.storage.local:
            try:
                os.rename(self.staging, self.final)  # fails on a non-empty target: an exclusive publish
            except OSError as exc:
                if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                    return False
                raise
            fsync_dir(self.final.rsplit("/", 1)[0])
            return True
        lock = f"{self.final}.publishing"
        try:
            with self.storage.fs.open(lock, "xb"):
                pass
        except FileExistsError:
            raise ReleaseBusyError(
                f"{self.storage.display(lock)} exists: another build is publishing {self.name} "
                f"{self.version} now; if none is (a crash), delete that object and rerun"
            ) from None
        try:
            if self.storage.exists(self.final):
                return False
            # Object stores have no folder rename: copy object by object, the manifest last, so a copy cut short
            # lacks its manifest and is never taken for a complete folder.
            fs, prefix = self.storage.fs, self.staging.rstrip("/") + "/"
            files = sorted(fs.find(self.staging), key=lambda path: path.endswith(f"/{MANIFEST}"))
            for path in files:
                fs.copy(path, f"{self.final}/{path[len(prefix) :]}")
            self.storage.rm(self.staging)
            return True
        finally:
            self.storage.rm(lock)

    def _same_as_existing(self) -> ReleaseResult:
        """The existing folder, hashed again file by file, against what this writer would write."""
        ours = {k: v for k, v in self.files.items() if k not in self.volatile}
        on_disk = {k: v for k, v in self._hash_existing().items() if k not in self.volatile}
        has_manifest = on_disk.pop(MANIFEST, None) == "present"  # a regular file, safe to read
        if ours == on_disk and has_manifest:
            existing = self.storage.read_json(f"{self.final}/{MANIFEST}")
            return ReleaseResult(path=self.final, version=self.version, status="unchanged", manifest=existing)
        differing = sorted(k for k in ours.keys() | on_disk.keys() if ours.get(k) != on_disk.get(k))
        differing += [] if has_manifest else [f"{MANIFEST} (missing)"]
        where = self.storage.display(self.final)
        raise ReleaseExistsError(self.refusal.format(where=where, count=len(differing), examples=differing[:5]))

    def _hash_existing(self) -> dict[str, str]:
        """Each file of the existing folder -> its sha256, read in chunks; only regular files of the size this
        writer's file has are read: another size, a link, a FIFO or a device differs without being opened (a FIFO
        would block, a device never end)."""
        prefix = self.final.rstrip("/") + "/"
        out: dict[str, str] = {}
        for path, info in sorted(self.storage.fs.find(self.final, detail=True).items()):
            rel = path[len(prefix) :]
            if info.get("type") != "file" or info.get("islink"):
                out[rel] = "not a regular file"
            elif rel == MANIFEST:
                out[rel] = "present"  # its content is what this writer states; only its presence is compared
            elif info.get("size") != self.sizes.get(rel):
                out[rel] = f"{info.get('size')} bytes"
            else:
                digest = hashlib.sha256()
                with self.storage.fs.open(path, "rb") as handle:
                    while chunk := handle.read(1 << 20):
                        digest.update(chunk)
                out[rel] = digest.hexdigest()
        return out


class _DigestingWriter(io.RawIOBase):
    """Passes writes on to `target` (none: only hashes them) and keeps their sha256 and size."""

    def __init__(self, target: IO[bytes] | None) -> None:
        super().__init__()
        self.target = target
        self.sha256 = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.sha256.update(view)
        if self.target is not None:
            self.target.write(view)
        self.size += len(view)
        return len(view)

    def tell(self) -> int:
        return self.size
