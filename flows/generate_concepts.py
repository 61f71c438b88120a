"""`generate-concepts`: ask Gemini for candidate concepts (3XCM paper App. H) and merge them into a review file.

Nothing generated enters a build here: an operator accepts candidates in the review file (or with
`culturebench concepts accept`), and a build reads only the accepted ones (`concepts.backend: reviewed`).
"""

from __future__ import annotations

import fsspec
from prefect import flow, get_run_logger
from prefect.artifacts import create_table_artifact
from pydantic import BaseModel

from collectors.concept_generation import (
    GeminiConceptGenerationConfig,
    generate_concept_candidates,
    write_review_file,
)


class GenerationSummary(BaseModel):
    review_file: str
    candidates: int
    added: int
    failures: list[dict]


def default_cache_dir(review_file: str) -> str:
    """Answers are cached next to the review file, so asking again costs no API call."""
    return f"{review_file}.model-cache"


def generate_concepts(
    config: GeminiConceptGenerationConfig, review_file: str, cache_dir: str | None = None
) -> GenerationSummary:
    candidates, failures = generate_concept_candidates(config, cache_dir or default_cache_dir(review_file))
    fs, path = fsspec.core.url_to_fs(review_file)
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    added = write_review_file(candidates, review_file, config.pack()) if candidates.num_rows else 0
    return GenerationSummary(
        review_file=review_file,
        candidates=candidates.num_rows,
        added=added,
        failures=failures.to_pylist(),
    )


@flow(name="generate-concepts", log_prints=True)
def generate_concepts_flow(
    review_file: str,
    config: GeminiConceptGenerationConfig = GeminiConceptGenerationConfig(),  # noqa: B008
) -> GenerationSummary:
    """Generate candidate concepts with Gemini and add the new ones to the operator's review file as pending."""
    summary = generate_concepts(config, review_file)
    logger = get_run_logger()
    logger.info("%d candidates, %d new in %s", summary.candidates, summary.added, review_file)
    for failure in summary.failures:
        logger.warning("generation failed: %s: %s", failure["error"], failure["detail"])
    create_table_artifact(
        key="concept-candidates",
        table=[{"candidates": summary.candidates, "added": summary.added, "failures": len(summary.failures)}],
        description=f"Review and accept candidates in `{review_file}`.",
    )
    return summary
