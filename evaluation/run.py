"""One evaluation, from its config to its result folder, for any registered benchmark (`evaluation.registry`): the
typed config union the `evaluate` flow and its deployment take, and the runner. Each benchmark's own config and
runner sit in its room (`evaluation/xcm/evaluate.py`, `evaluation/mixcube/evaluate.py`); model calls hold the `gpu`
slot when the model runs here; precomputed vectors and remote APIs hold none.

`evaluate_and_write` refuses whatever it can refuse cheaply before any model works: the release's manifest (read
strictly) and the tables the benchmark reads (hashed against it), the result path (never an input, never inside a
release or result folder), the model's config (built, which checks its files, not run), and an existing result at
the path that holds another release, model or settings (an identical rerun stays `unchanged`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Union

from pydantic import Field

from data.output_paths import OutputPathError, check_output
from data.publish.folder import ReleaseExistsError, ReleaseResult
from data.publish.reader import Release
from evaluation import registry
from evaluation.config import EvaluateCommon, GpuSlot, Prepared, no_slot, open_release, with_display_name
from evaluation.results.folder import EvaluationResult, default_out, existing_result_conflict, write_results

if TYPE_CHECKING:
    from evaluation.models.embed import Progress

#: Every registered benchmark's config, told apart by `benchmark` (the `evaluate` flow's typed parameter).
if TYPE_CHECKING:
    EvaluationConfig = EvaluateCommon
else:
    EvaluationConfig = Annotated[
        Union[tuple(b.config.load() for b in registry.benchmarks())],  # noqa: UP007 (a union built at run time)
        Field(discriminator="benchmark"),
    ]


@dataclass
class Written:
    result: EvaluationResult
    out: str
    release: ReleaseResult  # status created | unchanged


def prepare(config: EvaluateCommon, release: Release) -> Prepared:
    """The config's benchmark's evaluation, its model built and its settings known, nothing run; the config's
    `display_name`, if any, on its identity (every backend's, the demo model's and a prediction file's alike)."""
    prepared: Prepared = registry.get(config.benchmark).prepare.load()(config, release)
    return with_display_name(prepared, config.display_name)


def run(config: EvaluateCommon, progress: Progress | None = None, gpu_slot: GpuSlot = no_slot) -> EvaluationResult:
    return prepare(config, open_release(config)).run(progress, gpu_slot)


def evaluate_and_write(
    config: EvaluateCommon, progress: Progress | None = None, gpu_slot: GpuSlot = no_slot
) -> Written:
    """Check everything cheap (release, tables, result path, model config, an existing result there), then run the
    model and write the result folder: a refusal never comes after the model has worked."""
    release = open_release(config)
    if config.out is not None:
        check_result_path(config.out, release, "--out")
    prepared = prepare(config, release)
    identity = prepared.identity
    out = config.out or default_out(config.results_root, config.benchmark, release, identity.model_id, config.task)
    if config.out is None:
        check_result_path(out, release, "--results-root")
    model: dict[str, Any] = identity.model_dump(mode="json")
    conflict = existing_result_conflict(out, config.benchmark, release, model, prepared.settings)
    if conflict is not None:
        raise ReleaseExistsError(conflict)
    result = prepared.run(progress, gpu_slot)
    return Written(result, out, write_results(result, out))


def check_result_path(out: str, release: Release, option: str) -> None:
    """A result folder may be written at `out`: not a file, not the release nor inside it, not inside a release or
    result folder (`data.output_paths.check_output`). An earlier result at exactly `out` is allowed here: it is
    compared with (`existing_result_conflict`, then the writer), so an identical rerun is `unchanged`."""
    if "://" in out and not out.startswith("file://"):
        return  # an object store: no local folder to compare paths with; the writer never overwrites
    path = Path(out.removeprefix("file://"))
    if path.exists() and not path.is_dir():
        raise OutputPathError(f"{option} {out} is a file: a result is a folder; choose another path")
    check_output(path, inputs=[release.path], option=option, immutable_target=True)
