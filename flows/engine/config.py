"""What every build config shares: the workspace, the build id derived from the config, and reading a config file
with every invalid field reported."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Self, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from data.provenance import portable_paths, redact
from data.reference import ReferencePack, load_pack, pack_or_default
from data.workspace import fingerprint
from flows.engine.task_runner import DefaultTaskRunnerConfig, TaskRunnerConfig

BUILD_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"


class BuildConfigBase(BaseModel):
    """What every build config has: where its workspace is, and an id that is a hash of what it builds."""

    model_config = ConfigDict(extra="forbid")
    build_prefix: ClassVar[str]
    # Fields that do not change what is collected or drawn: changing them continues the same build.
    # The reference pack counts by its content, not its path (`resolved_build_id`).
    outside_build_id: ClassVar[frozenset[str]] = frozenset(
        {"build_id", "workspace_root", "release", "task_runner", "reference"}
    )

    build_id: str | None = Field(
        default=None,
        pattern=BUILD_ID_PATTERN,
        description="Workspace name. Defaults to <benchmark>-<hash of the config>, so a rerun resumes the same build.",
    )
    workspace_root: str = Field(default="./workspace", description="fsspec URL holding one folder per build.")
    task_runner: TaskRunnerConfig = Field(
        default_factory=DefaultTaskRunnerConfig,
        description="Where a Prefect run's sharded stages run: in the flow's process, or on a Dask cluster.",
    )
    reference: str | None = Field(
        default=None,
        description="The reference pack (a folder path or fsspec URL) naming the countries, languages, concepts and "
        "cultures to build for; None for the shipped default pack (`culturebench reference init DIR` copies it).",
    )

    def pack(self) -> ReferencePack:
        """The reference pack this config names (checked; read once per process while its files are unchanged)."""
        return pack_or_default(self.reference)

    def released_config(self) -> dict[str, Any]:
        """The config as a release's manifest records it: secrets redacted, without where the build ran (its
        workspace, its task runner, its release root), and with local paths (models, corpora) as their names plus
        the sha256 of a file, so the same config releases the same bytes wherever it ran and no machine path is
        published."""
        # The pack is recorded by its name, version and sha256 (the manifest's `reference`), not its path.
        where: dict[str, bool | set[str]] = {
            "workspace_root": True,
            "task_runner": True,
            "release": {"root"},
            "reference": True,
        }
        released: dict[str, Any] = portable_paths(redact(self.model_dump(mode="json", exclude=where)))
        return released

    @classmethod
    def demo(cls, **overrides: Any) -> Self:
        """The benchmark's offline demo config, `overrides` on top; each benchmark's config defines it."""
        raise NotImplementedError(f"{cls.__name__} has no demo config")

    def resolved_build_id(self) -> str:
        if self.build_id:
            return self.build_id
        content = self.model_dump(mode="json", exclude=set(self.outside_build_id))
        pack = self.pack()
        if not pack.is_default:  # a build of the default pack keeps the id it had before packs existed
            content["reference"] = pack.digest
        return f"{self.build_prefix}-{fingerprint(content)[:12]}"


def merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`overrides` on top of `base`, mappings merged key by key."""
    out = dict(base)
    for key, value in overrides.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


ConfigT = TypeVar("ConfigT", bound=BuildConfigBase)


class ConfigError(ValueError):
    """An invalid config file, reported field by field."""


def load_config(
    path: str | Path,
    demo: bool = False,
    overrides: dict[str, Any] | None = None,
    *,
    model: type[ConfigT],
) -> ConfigT:
    """Read a YAML or JSON config file; report every invalid field with its location."""
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) if path else {}
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"cannot read config {path}: it is not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset "
            f"{exc.start}); save it as UTF-8"
        ) from None
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read config {path}: {exc}") from exc
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"config {path} must be a mapping, not {type(raw).__name__}")
    return build_config(raw, demo=demo, overrides=overrides, source=str(path), model=model)


def build_config(
    raw: dict[str, Any],
    demo: bool = False,
    overrides: dict[str, Any] | None = None,
    source: str = "config",
    *,
    model: type[ConfigT],
) -> ConfigT:
    """The config of `model` (3XCM or MixCuBe) from a mapping; `demo` starts from the model's demo config."""
    merged = merge(raw, overrides or {})
    if isinstance(merged.get("reference"), str) and merged["reference"]:
        # Checked here, not inside validation: each problem of the pack is its own line, naming its file and field.
        load_pack(merged["reference"])
    try:
        return model.demo(**merged) if demo else model.model_validate(merged)
    except ValidationError as exc:
        fields = []
        for error in exc.errors():
            where = ".".join(str(p) for p in error["loc"]) or "(root)"
            fields.append(f"{where}: {error['msg'].removeprefix('Value error, ')}")
        if len(fields) == 1:  # the usual case (a selection outside the pack): one line
            raise ConfigError(f"invalid {source}: {fields[0]}") from None
        raise ConfigError("\n".join([f"invalid {source}:", *(f"  {field}" for field in fields)])) from None
