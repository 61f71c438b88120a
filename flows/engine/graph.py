"""A build as a graph of stages, shared by 3XCM and MixCuBe: fingerprints, skip-if-done, and the stage context.

Each stage's fingerprint hashes its name, version, its config section and its upstream fingerprints, so a changed
config reruns that stage and everything after it, and an unchanged one is skipped.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import pyarrow as pa

from annotation.backends import LabelStudioFilesReviewConfig, ReviewConfig, ReviewContext
from annotation.label_configs import ReviewKind
from collectors.concept_generation import review_file_sha256
from data.shards import MapShards, ShardPlan
from data.workspace import StageMarker, Workspace, fingerprint

Progress = Callable[[str, int, int], None]


class BuildConfig(Protocol):
    workspace_root: str

    def resolved_build_id(self) -> str: ...


ConfigT = TypeVar("ConfigT", bound=BuildConfig)


@dataclass
class StageContext(Generic[ConfigT]):
    config: ConfigT
    ws: Workspace
    fingerprint: str
    progress: Progress | None = None
    accept_incomplete: bool = False  # an operator closed the open reviews: missing votes become undecided

    def table(self, stage: str) -> pa.Table:
        return self.ws.read_table(stage)

    def on_progress(self, stage: str) -> Callable[[int, int], None] | None:
        if self.progress is None:
            return None
        return lambda done, total: self.progress(stage, done, total)  # type: ignore[misc]

    def review_context(self) -> ReviewContext:
        storage = self.ws.storage
        local = "file" in storage.fs.protocol
        return ReviewContext(
            build_id=self.ws.build_id,
            # Label Studio reads the export from a local disk; a remote workspace exports to the temp folder.
            files_folder=Path(self.ws.file_path() if local else tempfile.gettempdir())
            / ("" if local else self.ws.build_id),
            load_blob=self.ws.blobs.get,
            blob_path=(lambda sha: self.ws.blobs.path(sha)) if local else (lambda sha: None),
            accept_incomplete=self.accept_incomplete,
        )


@dataclass(frozen=True)
class Stage:
    name: str
    version: int
    deps: tuple[str, ...]
    settings: Callable[[Any], Any]
    # A whole-table stage writes its table and returns the marker; a sharded one returns its plan.
    run: Callable[[StageContext[Any]], StageMarker | ShardPlan]
    gpu: bool = False  # its shards need a GPU: on Dask they go only to workers that offer one


@dataclass(frozen=True)
class BuildGraph:
    """The stages of one benchmark's build, in run order. `stages_for` may depend on the config (MixCuBe's number
    of synthesis rounds does)."""

    name: str  # the benchmark: 3xcm | mixcube
    stages_for: Callable[[Any], tuple[Stage, ...]]
    review_field: str  # the config section of its human review
    review_kind: ReviewKind  # which review that is

    def review(self, config: BuildConfig) -> ReviewConfig:
        return getattr(config, self.review_field)

    def stages(self, config: BuildConfig) -> tuple[Stage, ...]:
        return self.stages_for(config)

    def names(self, config: BuildConfig) -> list[str]:
        return [s.name for s in self.stages(config)]

    def workspace(self, config: BuildConfig) -> Workspace:
        return Workspace(config.workspace_root, config.resolved_build_id())

    def fingerprints(self, config: BuildConfig) -> dict[str, str]:
        """Each stage's fingerprint from its own settings and its dependencies' fingerprints (transitively)."""
        out: dict[str, str] = {}
        for stage in self.stages(config):
            out[stage.name] = fingerprint(
                stage.name, stage.version, stage.settings(config), [out[d] for d in stage.deps]
            )
        return out

    def stage(self, name: str, config: BuildConfig) -> Stage:
        return next(s for s in self.stages(config) if s.name == name)

    def run(
        self,
        name: str,
        config: BuildConfig,
        progress: Progress | None = None,
        accept_incomplete: bool = False,
        map_shards: MapShards | None = None,
    ) -> tuple[StageMarker, bool]:
        """Run one stage unless its output with the same fingerprint exists. Returns (marker, skipped).

        A sharded stage's shards run where `map_shards` puts them (default: in order, here). A review stage raises
        `ReviewPending` while annotators are at work; it writes nothing until they are done."""
        ws = self.workspace(config)
        fp = self.fingerprints(config)[name]
        ws.bind_inputs(name, self.input_digests(ws, name, config))
        if ws.is_current(name, fp):
            return ws.marker(name), True  # type: ignore[return-value]
        ws.repair(name)
        context = StageContext(
            config=config, ws=ws, fingerprint=fp, progress=progress, accept_incomplete=accept_incomplete
        )
        result = self.stage(name, config).run(context)
        if isinstance(result, ShardPlan):
            return ws.run_sharded(name, fp, result, context.on_progress(name), map_shards), False
        return result, False

    def input_digests(self, ws: Workspace, name: str, config: BuildConfig) -> dict[str, str]:
        """The content digests of `name`'s upstream stages now: a stage computed from other upstream bytes (one
        repaired since, say) is stale even when every config is the same."""
        digests = {}
        for dep in self.stage(name, config).deps:
            marker = ws.marker(dep)
            if marker is None:
                raise FileNotFoundError(f"stage {name!r} needs {dep!r}, which has not completed in {ws.build_id!r}")
            digests[dep] = marker.digest()
        return digests

    def is_current(self, name: str, config: BuildConfig) -> bool:
        """The stage finished for this config and these upstream bytes, and its files are intact: running it would
        change nothing."""
        ws = self.workspace(config)
        try:
            ws.bind_inputs(name, self.input_digests(ws, name, config))
        except FileNotFoundError:
            return False
        return ws.is_current(name, self.fingerprints(config)[name])

    def write_shard(self, name: str, config: BuildConfig, index: int) -> int:
        """Process and write one shard of a sharded stage, in whichever process calls it (a Dask worker does).
        Returns its rows. The plan, and the models it builds at its first shard, are kept for the process's next
        shard of the same stage."""
        ws = self.workspace(config)
        fp = self.fingerprints(config)[name]
        ws.bind_inputs(name, self.input_digests(ws, name, config))
        key = (ws.url, name, fp)
        with _plans_lock:
            plan = _plans.get(key)
            if plan is None:
                result = self.stage(name, config).run(StageContext(config=config, ws=ws, fingerprint=fp))
                if not isinstance(result, ShardPlan):
                    raise TypeError(f"stage {name!r} of {self.name} is not sharded")
                _plans.clear()  # one stage at a time: a new stage frees the last one's models
                plan = _plans[key] = result
        return ws.write_shard(name, fp, plan, index)


# The shard plan of the stage this process last worked on, by (workspace, stage, fingerprint).
_plans: dict[tuple[str, str, str], ShardPlan] = {}
_plans_lock = threading.Lock()


def review_settings(review: ReviewConfig) -> Any:
    """A review's part of its stage fingerprint: a new completed export at the same path is new input, so its
    content counts."""
    if isinstance(review, LabelStudioFilesReviewConfig) and review.completed_export:
        return (review, review_file_sha256(review.completed_export))
    return review
