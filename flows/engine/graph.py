"""A build as a graph of stages, shared by 3XCM and MixCuBe: fingerprints, skip-if-done, and the stage context.

The engine knows no benchmark and no domain: a benchmark hands it a graph of stages typed by its config class
(`Stage[ConfigT]`), and reviews reach it through `data/review.py`.

Each stage's fingerprint hashes its name, version, its config section and its upstream fingerprints, so a changed
config reruns that stage and everything after it, and an unchanged one is skipped.

The build runs the stages; the workspace only stores. Everything a stage's marker records (its fingerprint, the
digests of the upstream stages it was computed from, the files a rerun repaired) is computed here and passed to the
workspace explicitly; a whole-table stage is written here, a sharded one by `flows/engine/shards.py`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Generic, Protocol, TypeVar

import pyarrow as pa

from data.reference import ReferencePack
from data.review import ReviewContext
from data.stage import stats_from_table
from data.stage_stats import StageStats
from data.workspace import StageMarker, Workspace, fingerprint
from flows.engine.reference import prepare_pack, workspace_pack
from flows.engine.shards import Placement, ShardPlan, attempt_key, in_order, run_sharded, write_shard
from flows.engine.task_runner import TaskRunnerConfig

Progress = Callable[[str, int, int], None]


class BuildConfig(Protocol):
    workspace_root: str
    task_runner: TaskRunnerConfig

    def resolved_build_id(self) -> str: ...

    def pack(self) -> ReferencePack: ...


ConfigT = TypeVar("ConfigT", bound=BuildConfig)


@dataclass
class StageContext(Generic[ConfigT]):
    config: ConfigT
    ws: Workspace
    fingerprint: str
    stage: str = ""  # the stage's name
    progress: Progress | None = None
    accept_incomplete: bool = False  # an operator closed the open reviews: missing votes become undecided
    # Where the build's copy of its reference pack comes from (read when a stage first asks for it).
    pack_source: Callable[[], ReferencePack] | None = None

    @property
    def pack(self) -> ReferencePack:
        """The build's copy of its reference pack (flows/engine/reference.py)."""
        if self.pack_source is None:
            raise LookupError(f"stage {self.stage!r} runs without a reference pack")
        return self.pack_source()

    def table(self, stage: str) -> pa.Table:
        return self.ws.read_table(stage)

    def on_progress(self, stage: str) -> Callable[[int, int], None] | None:
        progress = self.progress
        if progress is None:
            return None
        return lambda done, total: progress(stage, done, total)

    def review_context(self) -> ReviewContext:
        """What a review stage hands its review backend."""
        return ReviewContext.of_workspace(self.ws, self.accept_incomplete)


@dataclass(frozen=True)
class StageOutput:
    """What a whole-table stage returns: its table, its named side tables, and its counts. The graph writes them.
    Without `stats`, the counts come from the table's status/error/keep columns."""

    table: pa.Table
    side_tables: Mapping[str, pa.Table] = field(default_factory=dict)
    stats: StageStats | None = None


@dataclass(frozen=True)
class Stage(Generic[ConfigT]):
    """One step of a build of a `ConfigT`. `run` returns a `StageOutput` (a whole table) or a `ShardPlan` (item by
    item, shard by shard); only the graph writes, with the schemas declared here."""

    name: str
    version: int
    deps: tuple[str, ...]
    settings: Callable[[ConfigT], object]  # the config's share in the stage's fingerprint
    run: Callable[[StageContext[ConfigT]], StageOutput | ShardPlan[Any]]
    schema: pa.Schema
    side_schemas: Mapping[str, pa.Schema] = field(default_factory=dict)
    gpu: bool = False  # its shards need a GPU: on Dask they go only to workers that offer one
    # How its stats are read back: a StageStats subclass types the details this stage reports (a model id, say).
    stats_model: type[StageStats] = StageStats


@dataclass(frozen=True)
class BuildGraph(Generic[ConfigT]):
    """The stages of one benchmark's build, in run order. `stages_for` may depend on the config (MixCuBe's number
    of synthesis rounds does)."""

    name: str  # the benchmark, as the CLI names it
    stages_for: Callable[[ConfigT], tuple[Stage[ConfigT], ...]]

    def stages(self, config: ConfigT) -> tuple[Stage[ConfigT], ...]:
        return self.stages_for(config)

    def names(self, config: ConfigT) -> list[str]:
        return [s.name for s in self.stages(config)]

    def build(self, config: ConfigT) -> Build[ConfigT]:
        return Build(self, config)


class Build(Generic[ConfigT]):
    """One build: a graph and a config, with its stages, workspace and fingerprints resolved once and passed along.

    It travels to Dask workers by its graph and config; each process resolves its own workspace."""

    def __init__(self, graph: BuildGraph[ConfigT], config: ConfigT) -> None:
        self.graph = graph
        self.config = config
        self.stages = {stage.name: stage for stage in graph.stages(config)}
        self.ws = Workspace(config.workspace_root, config.resolved_build_id())
        self.fingerprints = self._fingerprints()
        # Stage -> damaged files discarded before it ran again: its next stats say what was redone.
        self._repaired: dict[str, dict[str, str]] = {}

    def __reduce__(self) -> tuple[Any, ...]:
        return (Build, (self.graph, self.config))

    @property
    def build_id(self) -> str:
        return self.ws.build_id

    @property
    def names(self) -> list[str]:
        return list(self.stages)

    def stage(self, name: str) -> Stage[ConfigT]:
        return self.stages[name]

    @property
    def pack(self) -> ReferencePack:
        """The build's copy of its reference pack, taken before the first stage (`prepare_pack`, which a benchmark's
        run calls with its checks); a build driven stage by stage without it takes the copy now."""
        try:
            return workspace_pack(self.ws)
        except FileNotFoundError:
            return prepare_pack(self.config, self.ws)

    def stats(self) -> list[StageStats]:
        """Every stage's stats, each read as its stage's `stats_model`."""
        return [self.stage_stats(name) for name in self.stages]

    def stage_stats(self, name: str) -> StageStats:
        return self.ws.stats(name, self.stage(name).stats_model)

    def _fingerprints(self) -> dict[str, str]:
        """Each stage's fingerprint from its own settings and its dependencies' fingerprints (transitively)."""
        out: dict[str, str] = {}
        for stage in self.stages.values():
            out[stage.name] = fingerprint(
                stage.name, stage.version, stage.settings(self.config), [out[d] for d in stage.deps]
            )
        return out

    def context(
        self, name: str, progress: Progress | None = None, accept_incomplete: bool = False
    ) -> StageContext[ConfigT]:
        return StageContext(
            config=self.config,
            ws=self.ws,
            fingerprint=self.fingerprints[name],
            pack_source=lambda: self.pack,
            stage=name,
            progress=progress,
            accept_incomplete=accept_incomplete,
        )

    def run(
        self,
        name: str,
        progress: Progress | None = None,
        accept_incomplete: bool = False,
        placement: Placement | None = None,
    ) -> tuple[StageMarker, bool]:
        """Run one stage unless its output with the same fingerprint exists. Returns (marker, skipped).

        A sharded stage's shards run where `placement` puts its plan (the runner's, decided for the whole build:
        `flows/engine/runner.py`); without one, one after another here. A review stage raises `WaitingForReviewers`
        (data/review.py) while annotators are at work; it writes nothing until they are done."""
        ws, fp, stage = self.ws, self.fingerprints[name], self.stage(name)
        inputs = self.input_digests(name)
        if ws.is_current(name, fp, inputs):
            current = ws.marker(name)
            if current is not None:  # is_current read it; gone since only if another process discarded the stage
                return current, True
        damaged = ws.repair(name)
        if damaged:
            self._repaired[name] = damaged
        context = self.context(name, progress, accept_incomplete)
        result = stage.run(context)
        if isinstance(result, ShardPlan):
            plan = self._planned(stage, result)
            marker = run_sharded(
                ws,
                name,
                fp,
                plan,
                inputs=inputs,
                on_progress=context.on_progress(name),
                map_shards=(placement or in_order)(name, plan),
                finalize=lambda stats: self._with_repairs(name, stats),
            )
        else:
            marker = self._write(stage, fp, result, inputs)
        self._repaired.pop(name, None)
        return marker, False

    def _with_repairs(self, name: str, stats: StageStats) -> StageStats:
        """The stats to write for `name`: with the damaged files this run redid, if it redid any."""
        if name not in self._repaired:
            return stats
        return stats.model_copy(update={"repaired_files": self._repaired[name]})

    def _write(self, stage: Stage[ConfigT], fp: str, output: StageOutput, inputs: dict[str, str]) -> StageMarker:
        unknown = set(output.side_tables) ^ set(stage.side_schemas)
        if unknown:
            raise TypeError(
                f"stage {stage.name!r} returned side tables {sorted(output.side_tables)}, "
                f"declared {sorted(stage.side_schemas)}"
            )
        stats = self._with_repairs(stage.name, output.stats or stats_from_table(stage.name, output.table))
        side = {key: (output.side_tables[key], schema) for key, schema in stage.side_schemas.items()}
        return self.ws.write_stage(
            stage.name,
            fp,
            output.table,
            stage.schema,
            stats,
            extra_tables=side,
            inputs=inputs,
            attempt=attempt_key(fp, inputs),
        )

    @staticmethod
    def _planned(stage: Stage[Any], plan: ShardPlan[Any]) -> ShardPlan[Any]:
        return plan if plan.schema is not None else replace(plan, schema=stage.schema)

    def input_digests(self, name: str) -> dict[str, str]:
        """The content digests of `name`'s upstream stages now: a stage computed from other upstream bytes (one
        repaired since, say) is stale even when every config is the same."""
        digests = {}
        for dep in self.stage(name).deps:
            digest = self.ws.marker_digest(dep)
            if digest is None:
                raise FileNotFoundError(
                    f"stage {name!r} needs {dep!r}, which has not completed in {self.ws.build_id!r}"
                )
            digests[dep] = digest
        return digests

    def is_current(self, name: str) -> bool:
        """The stage finished for this config and these upstream bytes, and its files are intact: running it would
        change nothing."""
        try:
            inputs = self.input_digests(name)
        except FileNotFoundError:
            return False
        return self.ws.is_current(name, self.fingerprints[name], inputs)

    def write_shard(self, name: str, index: int) -> int:
        """Process and write one shard of a sharded stage, in whichever process calls it (a Dask worker does).
        Returns its rows. The plan, and the models it builds at its first shard, are kept for the process's next
        shard of the same stage."""
        ws, fp, stage = self.ws, self.fingerprints[name], self.stage(name)
        inputs = self.input_digests(name)
        key = (ws.url, name, fp)
        with _plans_lock:
            plan = _plans.get(key)
            if plan is None:
                result = stage.run(self.context(name))
                if not isinstance(result, ShardPlan):
                    raise TypeError(f"stage {name!r} of {self.graph.name} is not sharded")
                _plans.clear()  # one stage at a time: a new stage frees the last one's models
                plan = _plans[key] = self._planned(stage, result)
        return write_shard(ws, name, fp, plan, index, inputs=inputs)


# The shard plan of the stage this process last worked on, by (workspace, stage, fingerprint).
_plans: dict[tuple[str, str, str], ShardPlan[Any]] = {}
_plans_lock = threading.Lock()
