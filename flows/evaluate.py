"""The `evaluate` flow: a release and a model (typed parameters) in, an immutable result folder out, with the
metrics as table artifacts and the figures linked. The work is `evaluation.run`; this is wiring."""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel

from evaluation.results.folder import METRICS, headline_names, headline_rows, headline_value
from evaluation.run import EvaluationConfig, Written, evaluate_and_write
from flows.engine.runner import ProgressArtifact, artifact_key
from flows.engine.slots import gpu_slot


class EvaluationSummary(BaseModel):
    benchmark: str
    release_version: str
    model_id: str
    out: str
    status: str  # created | unchanged
    headline: dict[str, float | None]


# No retries: a model or release error repeats (transient API errors are retried per request inside). No cache:
# the result folder is the cache (an identical rerun finds it `unchanged`; image vectors and answers are cached).
@task(name="evaluate-model", cache_policy=NO_CACHE)
def evaluate_task(config: EvaluationConfig) -> Written:
    return evaluate_and_write(config, ProgressArtifact(), gpu_slot=gpu_slot)


def publish_artifacts(written: Written) -> None:
    result = written.result
    task = result.settings.get("task")  # named only for a task other than the paper's, as its folder is
    key = artifact_key(f"{result.benchmark}-{result.model_id}" + (f"--{task}" if task else ""))
    document = written.release.manifest
    create_table_artifact(
        key=f"{key}-headline",
        table=headline_rows(result.benchmark, {**result.metrics}),
        description=f"{result.benchmark} {result.release.version}, {result.model_id}"
        + (": random demo model, the numbers are meaningless" if result.demo else "")
        + "".join(f". Warning: {w}" for w in result.warnings),
    )
    tables = dict(result.tables)
    tables.update({f"{part}/{name}": t for part, p in result.parts.items() for name, t in p.tables.items()})
    for name, table in sorted(tables.items()):
        if table.num_rows <= 500 and name != "per_query_rq3" and name != "similarity_drift":
            create_table_artifact(key=f"{key}-{artifact_key(name)}", table=table.to_pylist(), description=name)
    folder = Path(written.out).resolve()
    figures = [f"figures/{name}" for name in result.figures]
    figures += [f"{part}/figures/{name}" for part, p in result.parts.items() for name in p.figures]
    for path in sorted(figures):
        name = path.rpartition("/")[2]
        label = name if path.startswith("figures/") else path  # a part's figure is named with its part
        create_link_artifact(key=f"{key}-{artifact_key(label)}", link=(folder / path).as_uri(), link_text=name)
    create_markdown_artifact(
        key=f"{key}-card",
        markdown=f"Results in `{written.out}` ({written.release.status}); metrics in `{METRICS}`; "
        f"release manifest sha256 `{document.get('release_manifest_sha256')}`.",
    )


@flow(name="evaluate", log_prints=True)
def evaluate(config: EvaluationConfig) -> EvaluationSummary:
    """Evaluate one model on one release (3XCM triplets and/or whole-pool retrieval; MixCuBe VLM questions or the
    encoder bias audit) and write its result folder."""
    written = evaluate_task(config)
    publish_artifacts(written)
    result = written.result
    get_run_logger().info("%s results (%s): %s", result.benchmark, written.release.status, written.out)
    return EvaluationSummary(
        benchmark=result.benchmark,
        release_version=result.release.version,
        model_id=result.model_id,
        out=written.out,
        status=written.release.status,
        headline={
            name: headline_value(result.metrics, name) for name in headline_names(result.benchmark, result.metrics)
        },
    )
