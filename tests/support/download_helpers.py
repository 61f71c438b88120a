"""Helpers shared by the downloader tests: a fast HTTP download config, unique tags and rows by image id."""

from __future__ import annotations

import uuid

import pyarrow as pa

from collectors.downloader import HttpDownloadConfig
from collectors.image_check import ImageLimits
from data.clients.retry import RetryPolicy


def download_config(**overrides: object) -> HttpDownloadConfig:
    """Small timeouts and quick backoffs keep the modules fast; loopback is allowed unless a test says not."""
    base: dict = {
        "allow_private_addresses": True,
        "connect_timeout_s": 2.0,
        "read_timeout_s": 0.4,
        "request_timeout_s": 10.0,
        "limits": ImageLimits(min_side=32, max_bytes=256 * 1024),
        "retry": RetryPolicy(max_attempts=3, base_delay_s=0.01, max_delay_s=0.05),
    }
    base.update(overrides)
    return HttpDownloadConfig(**base)


def tag() -> str:
    return uuid.uuid4().hex[:8]


def by_id(table: pa.Table) -> dict[str, dict]:
    return {row["image_id"]: row for row in table.to_pylist()}
