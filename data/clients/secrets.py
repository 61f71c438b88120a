"""Where every backend finds its secret: a Prefect Secret block when one is named, else environment variables.

Configs hold only these names, never the value, so no dump of a config can leak it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from pydantic import JsonValue


def resolve_secret(secret_block: str | None, env_names: Sequence[str], what: str, error: type[Exception]) -> str:
    """The value of the Secret block `secret_block`, else of the first set variable in `env_names`.

    Raises `error` naming where it looked (never a value)."""
    if secret_block:
        from prefect.blocks.system import Secret

        try:
            # Called outside any event loop, load returns the block (its type also allows the coroutine it
            # returns inside one).
            block = cast("Secret[JsonValue]", Secret.load(secret_block))
            value = block.get()
        except Exception as exc:  # the block API raises several types; the name is all the caller needs
            raise error(f"cannot load the Prefect Secret block {secret_block!r}: {type(exc).__name__}") from None
        if not isinstance(value, str) or not value.strip():
            raise error(f"the Prefect Secret block {secret_block!r} holds no {what}")
        return value.strip()
    names = list(dict.fromkeys(env_names))
    for name in names:
        value = os.environ.get(name, "").strip()
        if value:
            return value
    alternatives = f"{names[0]}" + (f" (or {', '.join(names[1:])})" if len(names) > 1 else "")
    raise error(f"no {what}: set {alternatives}, or name a Prefect Secret block in the config")
