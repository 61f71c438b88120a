"""A JSON object read from a file someone handed us: bounded in size, UTF-8, valid JSON, an object.

One reader for every such file (a folder's `manifest.json`, an evaluation's `metrics.json`); each caller names its
error class and what the file is not when it is too big, so its messages stay its own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_json_object(
    path: Path, max_bytes: int, *, error: type[ValueError] = ValueError, too_big: str = "not a file we wrote"
) -> tuple[dict[str, Any], bytes]:
    """The object in `path` and its bytes as read; `error` (one line, naming `path`) when it cannot be read, is
    larger than `max_bytes` (`too_big` says what it then is not), is not UTF-8 or not JSON, or is no object."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(max_bytes + 1)  # one byte more: enough to know it is too big, never more
    except OSError as exc:
        raise error(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if len(raw) > max_bytes:
        raise error(f"{path}: larger than {max_bytes >> 20} MB; {too_big}")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise error(f"{path}: not UTF-8 text") from None
    except (ValueError, RecursionError) as exc:
        raise error(f"{path}: not valid JSON ({' '.join(str(exc).split())[:200]})") from None
    if not isinstance(data, dict):
        raise error(f"{path}: a JSON {type(data).__name__}, not an object")
    return data, raw
