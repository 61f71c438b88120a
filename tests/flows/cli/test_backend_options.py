"""The evaluate commands' backends and model options come from the backend unions (`flows/cli/backend_options.py`):
a backend or a field added to a config is an option without touching the CLI, and no second list can drift."""

from __future__ import annotations

import re
import typing
from typing import Annotated, Literal

from pydantic import BaseModel, Field
from typer.testing import CliRunner

import flows.cli
from evaluation.models.encoders import EncoderConfig
from evaluation.models.vlm import VlmConfig
from flows.cli import app
from flows.cli.backend_options import backend_choice, backends_of, field_options, plain


class Alpha(BaseModel):
    backend: Literal["alpha"] = "alpha"
    model: str = Field(description="Which model.")
    device: Literal["cpu", "cuda"] = "cpu"
    layers: list[int] = []  # not a scalar: no option


class Beta(BaseModel):
    backend: Literal["beta-two"] = "beta-two"
    model: str = Field(description="Its model.")
    temperature: float | None = None


Union = Annotated[Alpha | Beta, Field(discriminator="backend")]


def test_options_are_the_union_fields() -> None:
    assert [c.__name__ for c in backends_of(Union)] == ["Alpha", "Beta"]
    assert [m.value for m in backend_choice("Choice", Union)] == ["alpha", "beta-two"]
    options = field_options(Union)
    assert list(options) == ["model", "device", "temperature"]
    model_help = typing.get_args(options["model"])[1].help
    assert model_help == "alpha, beta-two: Which model."  # the backends that read it, the first description
    device_type = typing.get_args(typing.get_args(options["device"])[0])[0]
    assert [m.value for m in device_type] == ["cpu", "cuda"]
    assert plain({"model": "m", "device": device_type("cuda"), "temperature": None}) == {"model": "m", "device": "cuda"}


def _options(help_text: str) -> set[str]:
    return set(re.findall(r"(--[a-z][a-z-]*)", help_text))


def test_the_evaluate_commands_offer_every_backend_and_field(monkeypatch) -> None:
    monkeypatch.setattr(flows.cli.console, "width", 1000)
    for command, union in (("3xcm", EncoderConfig), ("mixcube", VlmConfig)):
        result = CliRunner().invoke(app, ["evaluate", command, "--help"], terminal_width=400, env={"COLUMNS": "400"})
        assert result.exit_code == 0, result.output
        offered = _options(result.output)
        for config in backends_of(union):
            assert str(config.model_fields["backend"].default) in result.output
        expected = {"--" + name.replace("_", "-") for name in field_options(union)}
        assert expected <= offered, expected - offered
