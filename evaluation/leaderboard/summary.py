"""`comparison.json`: what `evaluate compare` found, for a script to read (`--out DIR/comparison.json`, and beside the
leaderboard page): each model by its short display name and its full identity, its headline figures with their
intervals, and every table's paired tests between the models of one release (`paired.py`), Holm-adjusted."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from evaluation.leaderboard.paired import ALPHA, CORRECTION, TEST
from evaluation.leaderboard.spec import Cell
from evaluation.leaderboard.tables import Result, Table, tables

FILE = "comparison.json"


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Figure(_Record):
    value: float | None
    ci_low: float | None
    ci_high: float | None


class Model(_Record):
    position: int  # in the order the results were given
    display_name: str  # as the page and the figure show it
    model_id: str  # the full id (folders, the embedding cache)
    name: str | None
    backend: str | None
    release_version: str
    release_manifest_sha256: str
    meaningless_demo_model: bool
    headline: dict[str, Figure]


class Pair(_Record):
    a: str  # model ids
    b: str
    a_position: int
    b_position: int
    queries: int
    a_only: int  # right for a, wrong for b
    b_only: int
    p_value: float
    p_holm: float
    distinguishable: bool


class PairedTests(_Record):
    table: str
    metric: str
    test: str
    correction: str
    alpha: float
    pairs: list[Pair]


class Comparison(_Record):
    benchmark: str
    models: list[Model]
    paired_tests: list[PairedTests]


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _figure(cell: Cell) -> Figure:
    return Figure(value=cell.value, ci_low=cell.low, ci_high=cell.high)


def comparison(
    results: Sequence[Result], names: Sequence[str], page_tables: Sequence[Table] | None = None
) -> Comparison:
    """The document for `results` (one benchmark), `names` their display names as shown (made unique)."""
    page_tables = tables(results) if page_tables is None else page_tables
    models = []
    for position, (result, shown) in enumerate(zip(results, names, strict=True)):
        headline = {name: _figure(c) for task in result.tasks for name, c in result.headline(task).items()}
        model = result.metrics["model"]
        models.append(
            Model(
                position=position,
                display_name=shown,
                model_id=result.model_id,
                name=_text(model.get("name")),
                backend=_text(model.get("backend")),
                release_version=result.release[1],
                release_manifest_sha256=result.release[2],
                meaningless_demo_model=result.demo,
                headline=headline,
            )
        )
    tests = [
        PairedTests(
            table=t.key,
            metric=t.rank_by or "",
            test=TEST,
            correction=CORRECTION,
            alpha=ALPHA,
            pairs=[
                Pair(
                    a=results[p.a].model_id,
                    b=results[p.b].model_id,
                    a_position=p.a,
                    b_position=p.b,
                    queries=p.queries,
                    a_only=p.a_only,
                    b_only=p.b_only,
                    p_value=p.p_value,
                    p_holm=p.p_holm,
                    distinguishable=p.distinguishable,
                )
                for p in t.tests
            ],
        )
        for t in page_tables
        if t.tests
    ]
    return Comparison(benchmark=results[0].benchmark, models=models, paired_tests=tests)


def comparison_json(document: Comparison) -> bytes:
    return (document.model_dump_json(indent=1) + "\n").encode()
