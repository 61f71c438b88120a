"""For tests that tamper with a release on purpose and want a rule, not the integrity check, to find it: the
manifest is brought in line with the files as they now are (what a careful forger would do)."""

from __future__ import annotations

import json
from pathlib import Path

from data.publish.integrity import file_digest


def rehash_manifest(folder: Path) -> None:
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["files"] = {
        p.relative_to(folder).as_posix(): {"sha256": file_digest(p), "bytes": p.stat().st_size}
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != "manifest.json"
    }
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True))
