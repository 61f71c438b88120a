"""How a model is named in results and caches: a filesystem-safe id, and one hash over a model folder's files."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from data.workspace import file_sha256

#: What a model id may hold: it names result and cache folders on any filesystem.
MODEL_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def slug(*parts: str) -> str:
    """A model id from its parts: `/` becomes `--` (as in the Hugging Face cache), anything else unsafe `-`."""
    cleaned = [_UNSAFE.sub("-", part.replace("/", "--")).strip("-.") or "x" for part in parts]
    text = "--".join(cleaned)
    if len(text) > 180:  # a folder name stays far below 255 bytes; the hash keeps long names apart
        text = f"{text[:160]}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    return text


def folder_sha256(folder: Path) -> str:
    """sha256 over every file's relative path and content hash, in path order: one file alone (a config) would not
    tell two fine-tunes with the same layout apart. Hidden entries (.cache, .git) are skipped, so a copy of the
    folder hashes the same; links (the hub cache's) are followed to their blobs."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if any(part.startswith(".") for part in rel.parts) or not path.is_file():
            continue
        digest.update(f"{rel.as_posix()}\0{file_sha256(path.resolve())}\n".encode())
    return digest.hexdigest()
