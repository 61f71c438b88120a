"""A release older than a takedown still holds the images taken down after it: versions are immutable, so the patch
that removed them is a new version beside it (`data/takedown/denylist.py`).

Every command that reads a release's images (`export`, `fetch-release`, `reassemble`, `evaluate`) asks here first:
the release's root denylist (`<root>/<name>/denylist.json`, where the release lies in a release root) is matched
against the release's image table as builds match theirs (sha256, pixel hash, URL, final URL). A release holding a
taken-down image is refused in one line naming how many, the denylist and the newest version beside it, which leaves
them out; none of its images is read, requested or exported. `validate` keeps its own rule (`denylist`): an older
release was valid when published, a later one that holds such an image is not.
"""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa

from data.publish.format import IMAGE_CONFIGS, MANIFEST, SEMVER, ReleaseReadError
from data.publish.reader import read_parquet_parts
from data.takedown.denylist import denylist_location, read_denylist
from data.takedown.patch import DENYLIST_HASHES, DENYLIST_URLS, is_later

NAMED = 3  # ids a refusal names; the count says the rest


class TakenDownError(ReleaseReadError):
    """A release holding images its root's denylist took down: the message names the count and the newest version."""


def newest_version(folder: Path) -> str:
    """The latest version beside `folder` (itself included) that holds a manifest, by semver precedence."""
    versions = [
        p.name
        for p in folder.parent.iterdir()
        if p.is_dir() and re.fullmatch(SEMVER, p.name) and (p / MANIFEST).is_file()
    ]
    newest = folder.name
    for version in versions:
        if re.fullmatch(SEMVER, newest) is None or is_later(version, newest):
            newest = version
    return newest


def taken_down(folder: Path, name: str, table: pa.Table | None = None) -> list[str]:
    """The ids of `folder`'s images (a release of benchmark `name`) that its root's denylist names; [] outside a
    release root or without entries. `table`: the image table, read already (with its hash and URL columns)."""
    images = IMAGE_CONFIGS.get(name)
    if images is None or folder.parent.name != name:
        return []
    root = str(folder.parent.parent)
    denylist = read_denylist(root, name)
    if not denylist.entries:
        return []
    if table is None:
        table = read_parquet_parts(folder / images.config)
        if table is None:
            return []
    wanted = [c for c in (images.key, *DENYLIST_HASHES, *DENYLIST_URLS) if c in table.column_names]
    table = table.select(wanted)
    hit = denylist.matching(table, DENYLIST_HASHES, DENYLIST_URLS)
    return [str(i) for i in table.filter(hit)[images.key].to_pylist()]


def refuse_taken_down(folder: Path, name: str, what: str, table: pa.Table | None = None) -> None:
    """TakenDownError when `folder` holds an image its root's denylist took down; `what`: the command's verb
    ("export", "evaluate"), for the line's advice."""
    ids = taken_down(folder, name, table)
    if not ids:
        return
    where = denylist_location(str(folder.parent.parent), name)
    shown = ", ".join(repr(i) for i in ids[:NAMED]) + (f" and {len(ids) - NAMED} more" if len(ids) > NAMED else "")
    newest = newest_version(folder)
    advice = (
        f"{what} {folder.parent / newest}, the newest version, which leaves them out"
        if newest != folder.name
        else f"no later version leaves them out: take them down (culturebench takedown {folder}) and {what} the patch"
    )
    raise TakenDownError(
        f"{folder}: {len(ids)} of its images were taken down after it was published ({shown}; {where}); {advice}"
    )
