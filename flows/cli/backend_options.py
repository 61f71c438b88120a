"""Command-line options derived from a stage's discriminated union of backend configs (`evaluation.models.encoders.
EncoderConfig`, `evaluation.models.vlm.VlmConfig`), so the CLI keeps no second list of backends or of their fields.

`--model-backend` takes the union's `backend` names; every scalar field of any backend becomes one option
(`model_name` -> `--model-name`), typed as the field is (a `Literal` becomes a choice), whose help names the backends
that read it and the field's own description. Options left out are not set: the config's defaults apply, or a
`--config` file's values.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

if TYPE_CHECKING:  # imported when the options are made (a model command is named), not when the CLI starts
    from pydantic import BaseModel

SCALARS = (str, int, float, bool)


def backends_of(union: Any) -> list[type[BaseModel]]:
    """The config classes of an `Annotated[A | B | ..., Field(discriminator="backend")]` union."""
    from pydantic import BaseModel

    members = typing.get_args(typing.get_args(union)[0]) if typing.get_origin(union) is Annotated else ()
    return [m for m in members if isinstance(m, type) and issubclass(m, BaseModel)] or [union]


def backend_name(config: type[BaseModel]) -> str:
    return str(config.model_fields["backend"].default)


def str_enum(name: str, values: Iterable[str]) -> type[StrEnum]:
    """An enum of `values` (member names with _ for -), for a choice option. Made by the functional API, which the
    type checker reads as making an instance: hence the cast."""
    return cast(type[StrEnum], StrEnum(name, {v.replace("-", "_"): v for v in values}))


def backend_choice(name: str, *unions: Any) -> type[StrEnum]:
    """An enum of the unions' backend names, for `--model-backend`."""
    names = [backend_name(config) for union in unions for config in backends_of(union)]
    return str_enum(name, list(dict.fromkeys(names)))


def _scalar(annotation: Any) -> type | tuple[str, ...] | None:
    """The option type of a field: str, int, float, bool, or a Literal's choices; None for anything else."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        annotation = args[0]
    if typing.get_origin(annotation) is typing.Literal:
        return tuple(str(v) for v in typing.get_args(annotation))
    return annotation if annotation in SCALARS else None


def field_options(*unions: Any, skip: Iterable[str] = ()) -> dict[str, object]:
    """`field -> Annotated[type | None, typer.Option(help=...)]` for every scalar field of every backend of the
    unions, in the order the backends declare them (the backend names before the first field that reads it). A field
    two unions share is one option; a choice there offers the choices of both."""
    readers: dict[str, list[str]] = {}
    kinds: dict[str, type | tuple[str, ...]] = {}
    helps: dict[str, str] = {}
    for config in [config for union in unions for config in backends_of(union)]:
        for field, info in config.model_fields.items():
            kind = _scalar(info.annotation)
            if field == "backend" or field in skip or kind is None:
                continue
            if backend_name(config) not in readers.setdefault(field, []):
                readers[field].append(backend_name(config))
            known = kinds.setdefault(field, kind)
            if isinstance(known, tuple) and isinstance(kind, tuple):
                kinds[field] = tuple(dict.fromkeys(known + kind))
            helps.setdefault(field, " ".join((info.description or "").split()))
    options: dict[str, object] = {}
    for field, kind in kinds.items():
        option_type = str_enum(f"{field}_choice", kind) if isinstance(kind, tuple) else kind
        help_text = f"{', '.join(readers[field])}: {helps[field]}".rstrip(": ")
        options[field] = Annotated[option_type | None, typer.Option(help=help_text, show_default=False)]
    return options


def plain(values: Mapping[str, str | int | float | bool | StrEnum | None]) -> dict[str, str | int | float | bool]:
    """The options given (not None), enums as their values: config fields."""
    return {k: v.value if isinstance(v, StrEnum) else v for k, v in values.items() if v is not None}


def with_options(command: Callable[..., Any], options: Mapping[str, object], before: str) -> Callable[..., Any]:
    """`command`, whose `**model_options` receives `options`, with a signature that lists them (Typer reads it),
    inserted before the parameter named `before`."""
    signature = inspect.signature(command, eval_str=True)
    params = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    at = next(i for i, p in enumerate(params) if p.name == before)
    taken = {p.name for p in params}
    added = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation)
        for name, annotation in options.items()
        if name not in taken
    ]
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params]
    new_signature = signature.replace(parameters=params[:at] + added + params[at:])
    command.__signature__ = new_signature  # type: ignore[attr-defined]  # read by inspect.signature; not declared
    return command
