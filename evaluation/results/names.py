"""A model's short display name: what a table, a plot's axis or a page shows of it (its full id stays beside it, on
hover and in the JSON). A long model id (`lmms-eval--tmp--…--demo-random-vlm`) would take a page's width."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

#: The most characters a display name takes.
WIDTH = 28


def short(name: str, width: int = WIDTH) -> str:
    """`name` on one line, cut to `width` characters with its middle elided: a model id's ends tell models apart
    (its backend at the start; its weights' tag or seed at the end)."""
    name = " ".join(name.split())
    if len(name) <= width:
        return name
    keep = width - 1
    return name[: (keep + 1) // 2] + "\u2026" + name[len(name) - keep // 2 :]


def display_name(model: Mapping[str, object]) -> str:
    """A result's model (metrics.json's `model`) by its `display_name` (`--name`) where given, else its configured
    `name`, else its `model_id`; shortened."""
    for key in ("display_name", "name", "model_id"):
        value = model.get(key)
        if isinstance(value, str) and value.strip():
            return short(value)
    return "model"


def unique(names: Sequence[str]) -> list[str]:
    """The names in order, a repeated one numbered from its second use ("x", "x #2"), so that no two rows of a
    table or bars of a plot read the same."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name} #{seen[name]}")
    return out
