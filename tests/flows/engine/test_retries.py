"""A stage is retried for exactly the errors it was retried for when the engine listed them itself
(`(ConnectionError, TimeoutError, LabelStudioUnavailable)`); now the backends register theirs
(`data/transient_errors.py`) and the engine names none."""

from __future__ import annotations

from typing import Any

import pytest

from annotation.label_studio import LabelStudioUnavailable
from data.transient_errors import is_transient, register_transient, transient_errors
from flows import benchmarks
from flows.engine.retries import transient_failure

#: What flows/engine/retries.py listed before the registry.
RETRIED_BEFORE: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError, LabelStudioUnavailable)


class Failed:
    """A Prefect state whose result raises `exc`, as a failed task's does."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def result(self) -> Any:
        raise self.exc


def _every_exception_class() -> list[type[BaseException]]:
    seen: dict[type[BaseException], None] = {}
    stack: list[type[BaseException]] = [BaseException]
    while stack:
        cls = stack.pop()
        if cls not in seen:
            seen[cls] = None
            stack += cls.__subclasses__()
    return list(seen)


def test_the_registry_holds_what_the_engine_listed_before_and_nothing_else() -> None:
    benchmarks.all_benchmarks()  # every stage and backend a build process loads
    assert set(transient_errors()) == set(RETRIED_BEFORE)


def test_every_loaded_exception_class_is_retried_as_it_was_before() -> None:
    benchmarks.all_benchmarks()
    compared = 0
    for cls in _every_exception_class():
        try:
            exc = cls.__new__(cls)
        except Exception:  # a class that cannot be made without its arguments: its subclasses still are compared
            continue
        assert transient_failure(None, None, Failed(exc)) is isinstance(exc, RETRIED_BEFORE), cls
        assert is_transient(exc) is isinstance(exc, RETRIED_BEFORE), cls
        compared += 1
    assert compared > 200, "too few exception classes were compared: is the project loaded?"
    assert transient_failure(None, None, Failed(LabelStudioUnavailable("down"))) is True
    assert transient_failure(None, None, Failed(ConnectionRefusedError())) is True  # a subclass of one
    assert transient_failure(None, None, Failed(ValueError("bad input"))) is False


def test_only_exception_classes_can_be_registered() -> None:
    before = transient_errors()
    with pytest.raises(TypeError, match="exception classes"):
        register_transient(ValueError("an instance"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="exception classes"):
        register_transient(int)  # type: ignore[arg-type]
    register_transient(ConnectionError)  # registering again changes nothing
    assert transient_errors() == before
