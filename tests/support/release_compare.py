"""Compare two release folders byte for byte, except the manifest's `code_version` (the commit that built each).

    python tests/support/release_compare.py BEFORE AFTER [BEFORE AFTER ...]

Prints one line per pair and a final JSON line; exits 1 when any pair differs. A refactor that must leave every
release unchanged is checked with it: build before and after, then compare.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def without_code_version(manifest: bytes) -> dict[str, Any]:
    data = json.loads(manifest)
    data.pop("code_version", None)
    return data


def differences(before: Path, after: Path) -> list[str]:
    """Files that differ (or exist on one side only); the manifest is compared without its `code_version`."""
    a, b = files(before), files(after)
    out = [f"{name} (only in {before})" for name in sorted(set(a) - set(b))]
    out += [f"{name} (only in {after})" for name in sorted(set(b) - set(a))]
    for name in sorted(set(a) & set(b)):
        if Path(name).name == MANIFEST and name.count("/") == 0:
            if without_code_version(a[name]) != without_code_version(b[name]):
                out.append(f"{name} (beyond code_version)")
        elif a[name] != b[name]:
            out.append(name)
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 2 or len(argv) % 2:
        print(__doc__, file=sys.stderr)
        return 2
    report = {}
    for before, after in zip(argv[::2], argv[1::2], strict=True):
        diff = differences(Path(before), Path(after))
        count = len(files(Path(before)))
        print(f"{before} vs {after}: {count} files, {'identical' if not diff else f'{len(diff)} differ: {diff[:10]}'}")
        report[after] = {"files": count, "differing": diff}
    print(json.dumps(report))
    return 1 if any(r["differing"] for r in report.values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
