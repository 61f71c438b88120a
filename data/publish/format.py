"""What makes a folder a release, in names only (no heavy imports: readers of untrusted folders start here).

A release (or an evaluation result) is a folder holding `manifest.json`, whose `version` is a semantic version;
`ReleaseReadError` is how every reader names a folder or table it cannot read; `ImageConfig` says which config of a
release holds its images, and by what key.
"""

from __future__ import annotations

from typing import NamedTuple

MANIFEST = "manifest.json"
# semver.org 2.0.0: dot-separated pre-release identifiers, each non-empty and numeric ones without leading zeros.
_PRERELEASE_ID = r"(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)"
_BUILD_ID = r"[0-9A-Za-z-]+"
SEMVER = (
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    rf"(?:-{_PRERELEASE_ID}(?:\.{_PRERELEASE_ID})*)?(?:\+{_BUILD_ID}(?:\.{_BUILD_ID})*)?$"
)


class ReleaseReadError(ValueError):
    """A release folder's manifest or table that cannot be read: the message names the file."""


class ImageConfig(NamedTuple):
    """Where a release keeps its images: the config (folder) of its image rows and the column naming each row."""

    config: str
    key: str


#: The image config of each benchmark's releases, by the name its manifest gives, for readers that open a release
#: without its benchmark's code: `fetch-release` (collectors/ cannot import flows/, and the command stays light), and
#: a parent release opened without its benchmark record. The benchmark records name theirs (`Benchmark.image_config`),
#: which must agree with this table where it names the benchmark.
IMAGE_CONFIGS: dict[str, ImageConfig] = {
    "3xcm": ImageConfig("image_metadata", "image_id"),
    "mixcube": ImageConfig("default", "sample_id"),
}

#: Beside the tars: the `datasets` features of their samples. The `webdataset` builder otherwise guesses them from the
#: first five samples of the first shard and fails on a column that is null there and set later (datasets #7549):
#: `load_dataset("webdataset", data_files=..., features=Features.from_dict(json.load(open(WEBDATASET_FEATURES))))`.
WEBDATASET_FEATURES = "images/features.json"
