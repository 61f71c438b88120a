"""What defines a benchmark to the rest of the code: one record per benchmark, read by the CLI, the flows, the
sync-reviews deployment and the evaluation (`flows/benchmarks.py` lists them).

A record names the benchmark's config class, its stage graph, its human review (`data/review.py` `Review`: how
long a suspended build waits for it, and whether it is done, for `flows/sync_reviews.py`), the preflight that
checks the config before any stage runs, how it releases and what its release records, where its releases keep
their images, how a release folder is checked against its rules, and how a takedown is derived and written as a
patch release. The generic publishing steps (`flows/operations/takedown.py`, `flows/operations/validate.py`) ask the
record, never test the benchmark's name, and hand `data/publish/` what it names. The engine imports no benchmark and
no domain package (`tests/test_layers.py`): whatever of them it runs, the record hands it.
From these it makes its two ways to build: here, without Prefect (`build_locally`), and its Prefect flow (`flow`),
which the benchmark's module binds under the name its `entrypoint` gives, for `prefect.yaml` and the workers to find.

`run` is the one entry point for a build started here (the CLI): the preflight once, then the local build or a
flow run that does not check the config again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Literal

from prefect import Flow
from prefect import flow as prefect_flow
from prefect.artifacts import create_markdown_artifact
from prefect.logging import get_run_logger
from prefect.states import Failed
from prefect.utilities.hashing import file_hash

from data.publish.folder import ReleaseExistsError, ReleaseResult
from data.publish.format import IMAGE_CONFIGS, ImageConfig
from data.publish.manifest import Provenance
from data.publish.release import ReleaseConfig, taken_version
from data.reference import PackErrors, ReferencePack
from data.review import Review
from data.workspace import Workspace
from flows.engine.config import ConfigError, build_config
from flows.engine.graph import Build, BuildGraph, ConfigT, Progress
from flows.engine.reference import prepare_pack
from flows.engine.runner import BuildSummary, ProgressArtifact, execute_in_prefect, execute_locally, summary_markdown

if TYPE_CHECKING:
    from data.publish.images import ReleasedImages
    from data.publish.manifest import TakedownRecord
    from data.takedown.patch import DerivedPatch, ParentRelease

    #: (parent, request, the parent's images) -> what taking the request down gives, decided and not written. The
    #: request is curation's `TakedownRequest`, which the engine does not name (`flows/operations/takedown.py` does).
    DerivePatch = Callable[[ParentRelease, Any, ReleasedImages], DerivedPatch]
    #: (parent, its images, the takedown record, the derivation) -> the written patch release.
    WritePatch = Callable[[ParentRelease, ReleasedImages, TakedownRecord, DerivedPatch], ReleaseResult]

Engine = Literal["local", "prefect"]
PROJECT_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Benchmark(Generic[ConfigT]):
    name: str  # as the CLI names it: 3xcm, mixcube
    title: str  # as cards and summaries name it: 3XCM, MixCuBe
    flow_name: str  # the Prefect flow: build-3xcm
    # Where prefect.yaml finds the flow, `<module file>:<name>`: that module binds `flow` to that name.
    entrypoint: str
    description: str  # the flow's docstring, shown by Prefect
    config: type[ConfigT]
    graph: BuildGraph[ConfigT]
    # The build's human review, made by its review backend (annotation/backends.py `BuildReview`): how long a
    # suspended build waits for the reviewers, and whether they are done (`flows/sync_reviews.py` asks).
    review: Callable[[ConfigT], Review]
    # Fails fast (ConfigError, FileNotFoundError, MissingExtraError) on a config that cannot build: a missing
    # weights file must not surface after hours of search, download or inpainting. Cheap: nothing large is loaded.
    preflight: Callable[[ConfigT], None]
    # Checks the build's copy of its reference pack before the first stage: whatever the build needs and the pack
    # lacks is refused in one line (or, where a backend can draft it, drafted into the copy). (config, pack, the
    # copy's URL, workspace).
    check_reference: Callable[[ConfigT, ReferencePack, str, Workspace], None]
    # Validate and materialise the release, reporting the rows written as the stage "release".
    release: Callable[[Build[ConfigT], Progress | None], ReleaseResult]
    provenance: Callable[[Build[ConfigT]], Provenance]  # what the manifest records of the build
    nothing_released: type[Exception]  # raised when the build's tables must not (or cannot) be released
    # Checks a release folder against the benchmark's rules, (folder, patch) -> ValidationReport; None where the
    # benchmark has no rule checker. `patch`: a takedown patch, which `flows/operations/validate.py` also replays.
    validate_release: Callable[[Path, bool], Any] | None = None
    # Where its releases keep their images (config and key column): `validate` and `takedown` check each image's
    # bytes against its sha256, and a patch reads its parent's images from there.
    image_config: ImageConfig | None = None
    # Takedowns (`flows/operations/takedown.py`): what removing images from a release gives, and the patch release
    # writing it.
    # None (both): `culturebench takedown` refuses the benchmark's releases.
    derive_patch: DerivePatch | None = None
    write_patch: WritePatch | None = None

    def __post_init__(self) -> None:
        # `fetch-release` reads a release without its benchmark's code (data/publish/format.py's table): the two agree.
        listed = IMAGE_CONFIGS.get(self.name)
        if listed is not None and self.image_config != listed:
            raise ValueError(
                f"benchmark {self.name}: image_config {self.image_config} is not IMAGE_CONFIGS[{self.name!r}] "
                f"{listed} (data/publish/format.py)"
            )

    def build(self, config: ConfigT) -> Build[ConfigT]:
        return self.graph.build(config)

    def prepare_reference(self, build: Build[ConfigT]) -> ReferencePack:
        """The build's copy of its reference pack, taken and checked before the first stage."""
        return prepare_pack(
            build.config, build.ws, lambda pack, url: self.check_reference(build.config, pack, url, build.ws)
        )

    def run(
        self,
        config: ConfigT,
        engine: Engine = "local",
        progress: Progress | None = None,
        close_reviews: bool = False,
    ) -> BuildSummary:
        """One build of `config`: the preflight, once, then the whole build in this process (`local`; open reviews
        raise `WaitingForReviewers`: rerun when done) or as a run of the Prefect flow (`prefect`; it publishes its own
        progress artifacts, so `progress` is not used). The flow run does not check the config again."""
        if engine not in ("local", "prefect"):
            raise ValueError(f"unknown engine {engine!r}: local or prefect")
        self._before_work(config)
        if engine == "local":
            build = self.build(config)
            self.prepare_reference(build)
            return execute_locally(build, lambda: self.release(build, progress), progress, close_reviews)
        return self._flow_after_preflight(config, close_reviews=close_reviews)

    def build_locally(
        self, config: ConfigT, progress: Progress | None = None, close_reviews: bool = False
    ) -> BuildSummary:
        """The whole build in this process, without Prefect. Open reviews raise `WaitingForReviewers`: rerun when
        done."""
        return self.run(config, "local", progress, close_reviews)

    def _before_work(self, config: ConfigT) -> None:
        """The benchmark's preflight, and a release version that another build has taken refused
        (`ReleaseExistsError`, as the release stage would, but before any work). A config without a release (a test's
        toy benchmark) has no version to take."""
        self.preflight(config)
        release = getattr(config, "release", None)
        if isinstance(release, ReleaseConfig):
            taken = taken_version(release, self.name, config.resolved_build_id())
            if taken:
                raise ReleaseExistsError(taken)

    def build_in_flow(self, config: ConfigT, close_reviews: bool) -> BuildSummary:
        """The body of the benchmark's flow: the preflight, a task per stage, a suspend per open review, the
        release, a summary."""
        return self._in_flow(config, close_reviews, preflight=True)

    @cached_property
    def flow(self) -> Flow[..., BuildSummary]:
        """The benchmark's Prefect flow, `(config, close_reviews) -> BuildSummary`: what deployments run. It checks
        its config first, since nothing did before a deployment's run."""
        return self._make_flow(preflight=True)

    @cached_property
    def _flow_after_preflight(self) -> Flow[..., BuildSummary]:
        """The same flow (its name and parameters) for `run`, which has checked the config already."""
        return self._make_flow(preflight=False)

    def _in_flow(self, config: ConfigT, close_reviews: bool, preflight: bool) -> BuildSummary:
        if preflight:
            self._before_work(config)
        build = self.build(config)
        self.prepare_reference(build)
        summary = execute_in_prefect(
            build, self.review(config), close_reviews, lambda: self.release(build, ProgressArtifact())
        )
        create_markdown_artifact(
            key=f"{self.flow_name}-summary",
            markdown=summary_markdown(self.title, summary),
            description="Release, counts and validation of this build.",
        )
        return summary

    def _make_flow(self, preflight: bool) -> Flow[..., BuildSummary]:
        """A flow named `flow_name` whose function looks like one written in the entrypoint's module: its name,
        module, docstring, typed parameters and the demo config as the default, so Prefect derives the same
        parameter schema, entrypoint and version."""
        path, function = self.entrypoint.rsplit(":", 1)
        module = path.removesuffix(".py").replace("/", ".")

        demo = self.config.demo()  # type: ignore[attr-defined]  # the flow's default config: the offline demo

        def body(config: Any = demo, close_reviews: bool = False) -> BuildSummary:
            if not isinstance(config, self.config):
                # A deployment's parameters, validated here rather than by Prefect: a selection outside the pack (or
                # any bad field) fails the run with one line per field, not a traceback of pydantic's errors.
                try:
                    raw = dict(config or {})
                    config = build_config(raw, source="the config parameter", model=self.config)  # type: ignore[type-var]
                except (ConfigError, PackErrors) as exc:
                    get_run_logger().error(str(exc))
                    return Failed(message=str(exc))  # type: ignore[return-value]  # a State ends the run so
            return self._in_flow(config, close_reviews, preflight)

        body.__name__ = body.__qualname__ = function
        body.__module__ = module
        body.__doc__ = self.description
        body.__annotations__ = {"config": self.config, "close_reviews": bool, "return": BuildSummary}
        source = PROJECT_ROOT / path  # prefect.yaml's entrypoints are relative to the project's root
        version = file_hash(str(source)) if source.is_file() else None  # as Prefect versions a flow: its file's hash
        return prefect_flow(
            name=self.flow_name, log_prints=True, persist_result=True, version=version, validate_parameters=False
        )(body)
