"""A model's display name: the short human name a result shows (`culturebench evaluate ... --name`, a config's
`display_name`), beside the identity that says exactly which model it is.

It is metadata only: it lands in metrics.json as `model.display_name` and never in a `model_id`, a result folder's
name or a cache key. One line of printable text, at most `MAX_DISPLAY_NAME` characters, no surrounding spaces: it
goes into tables and pages as it is written."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, Field

#: A display name is a short label (a leaderboard's row, a figure's legend), never a description.
MAX_DISPLAY_NAME = 64


def display_name_problem(value: str) -> str | None:
    """Why `value` cannot be a display name (one line, printable, at most `MAX_DISPLAY_NAME` characters, no leading
    or trailing spaces), or None when it can. The reason quotes none of the value (it may not be printable)."""
    if not value.strip():
        return "is empty"
    if len(value) > MAX_DISPLAY_NAME:
        return f"is {len(value)} characters long, more than {MAX_DISPLAY_NAME}"
    if not value.isprintable():  # newlines, tabs, control and format characters, lone surrogates (non-UTF-8 argv)
        odd = next(c for c in value if not c.isprintable())
        return f"holds a character that is not printable (U+{ord(odd):04X}, character {value.index(odd) + 1})"
    if value != value.strip():
        return "starts or ends with a space"
    return None


def check_display_name(value: str) -> str:
    problem = display_name_problem(value)
    if problem is not None:
        raise ValueError(
            f"the display name {problem}: give one line of printable text, at most {MAX_DISPLAY_NAME} characters"
        )
    return value


DisplayName = Annotated[str, AfterValidator(check_display_name)]


def absent(value: object) -> bool:
    """`exclude_if` of an optional identity field: a field that is None is left out of the dump, so identities and
    results written before the field existed keep their bytes."""
    return value is None


def display_name_field() -> Any:
    """The `display_name` field of a model's identity (encoders' and VLMs' alike): optional, and left out of the dump
    when not given."""
    return Field(
        default=None,
        exclude_if=absent,
        description="A short human name (`--name`), for tables and pages; never part of model_id. Left out of the "
        "dump when not given.",
    )
