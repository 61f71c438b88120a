"""How a failed item names its reason in a row (no imports: the hashing path uses it)."""

from __future__ import annotations


def error_text(exc: BaseException, limit: int = 300) -> str:
    """`ErrorClass: detail`, cut to `limit` characters: how a failed item names its reason in a row."""
    return f"{type(exc).__name__}: {exc}"[:limit]
