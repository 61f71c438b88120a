"""The errors a later attempt of a stage can outlive: a service that stayed down through the per-request retries, a
dropped connection, a timeout. The engine retries a stage (or a shard) that failed with one (`flows/engine/retries.py`),
and fails at once on anything else (bad input, bugs).

The engine names no backend: each module that owns such an error registers it where it defines it
(`register_transient(LabelStudioUnavailable)`), so the class is registered in every process that can raise it.
A subclass of a registered class is transient too.
"""

from __future__ import annotations

import threading

# A dropped connection or a timeout, whoever raised it.
_BUILTIN: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError)

_registered: dict[type[BaseException], None] = dict.fromkeys(_BUILTIN)  # ordered, without duplicates
_lock = threading.Lock()


def register_transient(*exc_types: type[BaseException]) -> None:
    """Declare `exc_types` (and their subclasses) transient: a stage that fails with one is retried."""
    for exc_type in exc_types:
        if not (isinstance(exc_type, type) and issubclass(exc_type, BaseException)):
            raise TypeError(f"register_transient takes exception classes, not {exc_type!r}")
    with _lock:
        _registered.update(dict.fromkeys(exc_types))


def transient_errors() -> tuple[type[BaseException], ...]:
    """Every class registered so far, in the order registered."""
    with _lock:
        return tuple(_registered)


def is_transient(exc: BaseException) -> bool:
    """`exc` is an instance of a registered class: a later attempt may outlive it."""
    return isinstance(exc, transient_errors())
