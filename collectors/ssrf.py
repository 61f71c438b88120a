"""The SSRF guard the downloader, the opt-out checker, the local importer and the local searcher use.

It lives in `data.ssrf` (the shared layer), so that the readers in `data/` (a reference pack's URL, the Hub
endpoint) are held by the same guard; this module names it for the collectors.
"""

from __future__ import annotations

from data.ssrf import (
    ALLOWED_SCHEMES,
    MAX_URL_CHARS,
    STORAGE_PROTOCOLS,
    AddressPolicy,
    BlockedAddressError,
    GuardedResolver,
    UrlRefused,
    check_url,
    is_loopback_host,
    parse_ip_host,
    storage_refusal,
)

__all__ = [
    "ALLOWED_SCHEMES",
    "MAX_URL_CHARS",
    "STORAGE_PROTOCOLS",
    "AddressPolicy",
    "BlockedAddressError",
    "GuardedResolver",
    "UrlRefused",
    "check_url",
    "is_loopback_host",
    "parse_ip_host",
    "storage_refusal",
]
