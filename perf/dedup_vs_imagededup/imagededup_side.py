"""Runs INSIDE perf/.venv-imagededup (imagededup 0.3.3): only the standard library and imagededup.

    python imagededup_side.py IMAGE_DIR     # prints {"pairs": [[a, b], ...], "seconds": s, "files": n}
    python imagededup_side.py --check       # exits 0 when imagededup's PHash imports

The JSON object is the last line of stdout. `seconds` times `find_duplicates` alone, which hashes every image and
then searches, so neither the interpreter start nor the import of imagededup (which imports torch) is counted.
"""

from __future__ import annotations

import json
import sys
import time
import types
from pathlib import Path


def _import_phash() -> type:
    """imagededup.methods imports its CNN module, whose class body downloads MobileNetV3 weights from the torch
    hub at import time; offline that import fails. PHash never uses it, so a placeholder stands in for it."""
    placeholder = types.ModuleType("imagededup.methods.cnn")

    class CNN:
        def __init__(self, *args: object, **kwargs: object) -> None:
            raise RuntimeError("imagededup's CNN is not available in this benchmark")

    placeholder.CNN = CNN  # type: ignore[attr-defined]
    sys.modules.setdefault("imagededup.methods.cnn", placeholder)
    from imagededup.methods import PHash

    return PHash


def main(image_dir: str) -> None:
    phash = _import_phash()
    hasher = phash()  # imagededup 0.3 defaults throughout, with its default threshold written out below
    start = time.perf_counter()
    duplicates = hasher.find_duplicates(image_dir=image_dir, max_distance_threshold=10, scores=False)
    seconds = time.perf_counter() - start
    # The answer maps each file to its neighbours, so every pair appears twice; keep one unordered copy.
    pairs = sorted({tuple(sorted((Path(a).name, Path(b).name))) for a, near in duplicates.items() for b in near})
    print(json.dumps({"pairs": pairs, "seconds": seconds, "files": len(duplicates)}), flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        _import_phash()
    else:
        main(sys.argv[1])
