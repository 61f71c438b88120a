"""The typed build config of `build-3xcm`: one section per stage, each naming its backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from annotation.backends import LabelStudioFilesReviewConfig, ReviewConfig
from collectors.concepts import ConceptsConfig, ShippedConceptsConfig
from collectors.demo_corpus import DEMO_CONCEPTS, DEMO_COUNTRIES, DemoCorpusConfig
from collectors.fetch import FetchConfig, web_hits_problem
from collectors.importer import ImportConfig
from collectors.search import LocalFolderSearchConfig, SearchConfig
from collectors.translations import ShippedTranslationsConfig, TranslationsConfig
from curation.assemble import AssemblyConfig
from curation.concept_dedup import ConceptDedupConfig, LexicalConceptDedupConfig
from curation.image_dedup import ImageDedupConfig
from curation.tagging import OwnConceptTaggingConfig, TaggingConfig
from data import reference
from data.provenance import portable_paths, redact
from data.release import ReleaseConfig
from data.workspace import fingerprint
from flows.task_runner_config import DefaultTaskRunnerConfig, TaskRunnerConfig

BUILD_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"
ConfigT = TypeVar("ConfigT", bound=BaseModel)


class BuildConfigBase(BaseModel):
    """What every build config has: where its workspace is, and an id that is a hash of what it builds."""

    model_config = ConfigDict(extra="forbid")
    build_prefix: ClassVar[str]
    # Fields that do not change what is collected or drawn: changing them continues the same build.
    outside_build_id: ClassVar[frozenset[str]] = frozenset({"build_id", "workspace_root", "release", "task_runner"})

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

    def released_config(self) -> dict[str, Any]:
        """The config as a release's manifest records it: secrets redacted, without where the build ran (its
        workspace, its task runner, its release root), and with local paths (models, corpora) as their names plus
        the sha256 of a file, so the same config releases the same bytes wherever it ran and no machine path is
        published."""
        where = {"workspace_root": True, "task_runner": True, "release": {"root"}}
        return portable_paths(redact(self.model_dump(mode="json", exclude=where)))

    def resolved_build_id(self) -> str:
        if self.build_id:
            return self.build_id
        content = self.model_dump(mode="json", exclude=set(self.outside_build_id))
        return f"{self.build_prefix}-{fingerprint(content)[:12]}"


class Build3XCMConfig(BuildConfigBase):
    """Everything that decides a 3XCM build. The same config always resolves to the same build id."""

    build_prefix: ClassVar[str] = "3xcm"
    # How the review is reached does not change what is collected: adding a completed review export continues the
    # same build (the review stage's fingerprint redoes it).
    outside_build_id: ClassVar[frozenset[str]] = BuildConfigBase.outside_build_id | {
        "review",
        "gpu_concurrency_limit",
    }

    countries: list[str] = Field(
        default_factory=lambda: [c.name for c in reference.countries()],
        min_length=2,
        description="Countries to build (names, slugs or ISO codes); the paper uses all 16.",
    )
    demo_corpus: DemoCorpusConfig | None = Field(
        default=None, description="Generate the offline demo corpus into the workspace and search it."
    )
    concepts: ConceptsConfig = Field(default_factory=ShippedConceptsConfig)
    concept_dedup: ConceptDedupConfig = Field(default_factory=LexicalConceptDedupConfig)
    translations: TranslationsConfig = Field(default_factory=ShippedTranslationsConfig)
    search: SearchConfig = Field(default_factory=LocalFolderSearchConfig)
    download: FetchConfig = Field(
        default_factory=ImportConfig, description="How hits are fetched: local fsspec import or the HTTP downloader."
    )
    image_dedup: ImageDedupConfig = Field(default_factory=ImageDedupConfig)
    review: ReviewConfig = Field(
        default_factory=LabelStudioFilesReviewConfig,
        description="Human review of the ambiguous near-duplicate pairs (Label Studio server, files, or auto-accept).",
    )
    tagging: TaggingConfig = Field(default_factory=OwnConceptTaggingConfig)
    assembly: AssemblyConfig = Field(default_factory=AssemblyConfig)
    release: ReleaseConfig = Field(default_factory=ReleaseConfig)
    gpu_concurrency_limit: str | None = Field(
        default="gpu",
        description="Prefect global concurrency limit that BGE-M3 and open_clip hold per call (or shard) inside a "
        "Prefect run, so builds sharing a GPU take turns; None, or a limit the server lacks, holds nothing.",
    )

    @field_validator("countries")
    @classmethod
    def _canonical_countries(cls, value: list[str]) -> list[str]:
        names = reference.country_names(value)
        if len(set(names)) != len(names):
            raise ValueError(f"countries repeat: {names}")
        order = {c.name: i for i, c in enumerate(reference.countries())}
        return sorted(names, key=order.__getitem__)

    @model_validator(mode="after")
    def _web_hits_need_the_http_downloader(self) -> Build3XCMConfig:
        # The local importer has no SSRF guard: a web search must not hand it URLs (it would refuse each one anyway).
        problem = web_hits_problem(self.search.backend, self.download.backend)
        if problem:
            raise ValueError(problem)
        return self

    @property
    def language_codes(self) -> list[str]:
        return sorted({reference.country_by_name()[c].language_code for c in self.countries})

    @classmethod
    def demo(cls, **overrides: Any) -> Build3XCMConfig:
        """The offline demo: a generated corpus of 6 concepts x 8 countries (6 language groups)."""
        base: dict[str, Any] = {
            "countries": list(DEMO_COUNTRIES),
            "demo_corpus": DemoCorpusConfig().model_dump(),
            "concepts": {"backend": "shipped", "include": list(DEMO_CONCEPTS)},
            # Nobody annotates a demo: its review files are written, and the auto-accept policy (stated first thing
            # in the release card) decides. Production configs wait for people.
            "review": {"backend": "label_studio_files", "when_unreviewed": "auto_accept"},
            "release": {"version": "0.1.0-demo"},
        }
        return cls.model_validate(merge(base, overrides))


def merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`overrides` on top of `base`, mappings merged key by key."""
    out = dict(base)
    for key, value in overrides.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


class ConfigError(ValueError):
    """An invalid config file, reported field by field."""


def load_config(
    path: str | Path,
    demo: bool = False,
    overrides: dict[str, Any] | None = None,
    model: type[ConfigT] = Build3XCMConfig,  # type: ignore[assignment]
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
    model: type[ConfigT] = Build3XCMConfig,
) -> ConfigT:
    """The config of `model` (3XCM or MixCuBe) from a mapping; `demo` starts from the model's demo config."""
    merged = merge(raw, overrides or {})
    try:
        return model.demo(**merged) if demo else model.model_validate(merged)  # type: ignore[attr-defined]
    except ValidationError as exc:
        lines = [f"invalid {source}:"]
        for error in exc.errors():
            where = ".".join(str(p) for p in error["loc"]) or "(root)"
            lines.append(f"  {where}: {error['msg']}")
        raise ConfigError("\n".join(lines)) from None
