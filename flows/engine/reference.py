"""A build's copy of its reference pack: taken into the workspace before the first stage, so every stage, every
process (Dask workers included) and the release read the same pack, whatever happens to the source folder
meanwhile; drafts a build makes of what its pack lacks (a Gemini translation backend) go into this copy, never into
the source.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from data.reference import PackErrors, ReferencePack, load_pack
from data.reference_files import PackFiles
from data.workspace import Workspace

#: Where the copy lies in the workspace, and the record of the source it was copied from.
SNAPSHOT = "reference"
SOURCE_RECORD = "reference.source.json"


class PackedConfig(Protocol):
    def pack(self) -> ReferencePack: ...


def snapshot_url(ws: Workspace) -> str:
    return str(ws.storage.fs.unstrip_protocol(ws.file_path(SNAPSHOT)))


def workspace_pack(ws: Workspace) -> ReferencePack:
    """The build's copy of its pack; a build whose copy is missing was not prepared (`prepare_pack`)."""
    try:
        return load_pack(snapshot_url(ws))
    except PackErrors as exc:
        raise FileNotFoundError(
            f"the workspace {ws.url} holds no usable copy of its reference pack ({exc.errors[0]}); run the build "
            "again to take one"
        ) from None


def prepare_pack(
    config: PackedConfig, ws: Workspace, complete: Callable[[ReferencePack, str], Any] | None = None
) -> ReferencePack:
    """Copy the config's pack into the workspace unless the copy there was taken from the same source; then let
    `complete(pack, snapshot_url)` check it for the build (and draft what it lacks into the copy)."""
    source = config.pack()
    storage = ws.storage
    record_path = ws.file_path(SOURCE_RECORD)
    record = storage.read_json(record_path) if storage.exists(record_path) else {}
    if record.get("source") != source.digest or not storage.exists(ws.file_path(SNAPSHOT, "pack.json")):
        storage.rm(record_path)  # first: a copy cut short is never taken for a whole one
        storage.rm(ws.file_path(SNAPSHOT))
        _write(storage, ws.file_path(SNAPSHOT), source.files)
        storage.write_json(record_path, {"source": source.digest, "name": source.info.name})
    if complete is not None:
        complete(workspace_pack(ws), snapshot_url(ws))
    return workspace_pack(ws)


def _write(storage: Any, folder: str, files: PackFiles) -> None:
    for name, data in sorted(files.files.items()):
        storage.write_bytes(f"{folder}/{name}", data)
