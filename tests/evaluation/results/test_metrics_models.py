"""Every metrics.json `make demo` writes reads through the typed models (issue 58, part 5): each benchmark's model
(`evaluation.results.metrics`, named by its registry entry) takes the whole file, and dumping the model gives back
the same JSON, so the models hold every field the writers write, no more and no less. A field of the wrong type, or
one the models do not know, is refused naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from evaluation.results.metrics import MixCubeMetrics, XcmMetrics, parse_metrics
from tests.support.paths import REPO_ROOT

DEMO_METRICS = sorted((REPO_ROOT / "evaluations").glob("*/0.1.0-demo/*/metrics.json"))


def test_the_demo_wrote_each_kind_of_result() -> None:
    kinds = {(p.parts[-4], p.parent.name.rpartition("--")[2]) for p in DEMO_METRICS}
    assert {("3xcm", "all"), ("mixcube", "audit"), ("mixcube", "demo-random-vlm")} <= kinds, "run `make demo`"


@pytest.mark.parametrize("path", DEMO_METRICS, ids=lambda p: f"{p.parts[-4]}/{p.parent.name}")
def test_every_demo_metrics_json_reads_through_its_model(path: Path) -> None:
    document = json.loads(path.read_text(encoding="utf-8"))
    parsed = parse_metrics(document)
    assert isinstance(parsed, XcmMetrics if document["benchmark"] == "3xcm" else MixCubeMetrics)
    # Nothing is lost or made up: the model's dump is the document (defaults of absent fields left out).
    dumped = parsed.model_dump(mode="json", by_alias=True, exclude_unset=True)
    assert dumped == document


def test_a_drifting_field_is_refused_by_name() -> None:
    path = next(p for p in DEMO_METRICS if p.parts[-4] == "3xcm")
    document = json.loads(path.read_text(encoding="utf-8"))
    with pytest.raises(ValidationError, match=r"rq2\.overall\.n"):
        parse_metrics({**document, "rq2": {**document["rq2"], "overall": {**document["rq2"]["overall"], "n": "36"}}})
    with pytest.raises(ValidationError, match="M_cr_typo"):
        parse_metrics({**document, "M_cr_typo": 0.5})
