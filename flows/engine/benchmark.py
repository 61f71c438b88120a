"""What defines a benchmark to the rest of the code: one record per benchmark, read by the CLI, the flows, the
sync-reviews deployment and the evaluation (`flows/benchmarks.py` lists them).

A record names the benchmark's config class, its stage graph, the preflight that checks the config before any stage
runs, how it releases and what its release records, and how a release folder is checked against its rules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic

from prefect.artifacts import create_markdown_artifact

from data.release import ReleaseResult
from flows.engine.graph import Build, BuildGraph, ConfigT, Progress
from flows.engine.runner import BuildSummary, execute_in_prefect, execute_locally, summary_markdown


@dataclass(frozen=True)
class Benchmark(Generic[ConfigT]):
    name: str  # as the CLI names it: 3xcm, mixcube
    title: str  # as cards and summaries name it: 3XCM, MixCuBe
    flow_name: str  # the Prefect flow: build-3xcm
    config: type[ConfigT]
    graph: BuildGraph
    # Fails fast (ConfigError, FileNotFoundError, MissingExtraError) on a config that cannot build: a missing
    # weights file must not surface after hours of search, download or inpainting. Cheap: nothing large is loaded.
    preflight: Callable[[ConfigT], None]
    release: Callable[[Build[ConfigT]], ReleaseResult]  # validate and materialise the release
    provenance: Callable[[Build[ConfigT]], dict[str, Any]]  # what the manifest records of the build
    nothing_released: type[Exception]  # raised when the build's tables must not (or cannot) be released
    flow: Callable[..., BuildSummary]  # the Prefect flow: (config, close_reviews) -> BuildSummary
    # Checks a release folder against the benchmark's rules, (folder, patch) -> ValidationReport; None where the
    # benchmark has no rule checker. `patch`: a takedown patch, which `flows/release_check.py` also replays.
    validate_release: Callable[[Path, bool], Any] | None = None

    def build(self, config: ConfigT) -> Build[ConfigT]:
        return self.graph.build(config)

    def build_locally(
        self, config: ConfigT, progress: Progress | None = None, close_reviews: bool = False
    ) -> BuildSummary:
        """The whole build in this process, without Prefect. Open reviews raise `ReviewPending`: rerun when done."""
        self.preflight(config)
        build = self.build(config)
        return execute_locally(build, lambda: self.release(build), progress, close_reviews)

    def build_in_flow(self, config: ConfigT, close_reviews: bool) -> BuildSummary:
        """The body of the benchmark's flow: a task per stage, a suspend per open review, the release, a summary."""
        self.preflight(config)
        build = self.build(config)
        summary = execute_in_prefect(build, close_reviews, lambda: self.release(build))
        create_markdown_artifact(
            key=f"{self.flow_name}-summary",
            markdown=summary_markdown(self.title, summary),
            description="Release, counts and validation of this build.",
        )
        return summary
