"""What a finished stage reports: its counts (rows in, kept, dropped by reason) and its details.

`StageStats` is the generic record the workspace keeps next to each stage's table (`_stats.json`), the runner
publishes and the release manifests list (`stage_stats`). Its typed details are the ones the engine itself reads back
(who reviewed, a contact sheet, a side table to publish, the files a rerun redid). A stage whose other details are
read back (MixCuBe's face detector, 3XCM's candidate reuse, ...) declares them on a subclass next to its stage, and
its stage names that subclass (`flows.engine.graph.Stage.stats_model`): the details are typed where they are read,
and the generic record carries none of them.

On disk every typed detail is written inside `extra`, as it always was, so stats files and release manifests keep
their shape and bytes whichever class wrote or reads them.
"""

from __future__ import annotations

from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)


class ReviewSummary(BaseModel):
    """Who decided a review stage's items and how it went: the auto-accept policy gives only `reviewer`; a human
    round adds its tasks, decisions and agreement, plus backend-specific outcome counts."""

    model_config = ConfigDict(extra="allow")

    reviewer: str
    location: str | None = None
    tasks: int | None = None
    new_tasks: int | None = None
    decided: int | None = None
    undecided: int | None = None
    closed_early: bool | None = None
    agreement: dict[str, Any] | None = None


COUNTS = ("stage", "rows_in", "kept", "dropped", "dropped_by_reason", "extra")


class StageStats(BaseModel):
    """Per-stage counters: rows in, kept, dropped and dropped by reason, plus the stage's details.

    Every field that is not a count is a typed detail: written inside `extra`, lifted out of it when read. A
    subclass adds a stage's own details as fields (`detector: str | None = None`); read with the generic class, the
    same file keeps them in `extra`, untyped."""

    # A detail that is no field of this class is refused, never dropped: pass it in `extra`, or read and write the
    # stage's stats with the subclass that declares it.
    model_config = ConfigDict(extra="forbid")

    stage: str
    rows_in: int = 0
    kept: int = 0
    dropped: int = 0
    dropped_by_reason: dict[str, int] = Field(default_factory=dict)
    review: ReviewSummary | None = None  # review stages: who reviewed and how it went
    contact_sheet: str | None = None  # a PNG of what was merged, relative to the workspace
    summary_table: str | None = None  # a side table the flow publishes as a table artifact
    repaired_files: dict[str, str] | None = None  # damaged files redone: name -> what was wrong
    extra: dict[str, Any] = Field(default_factory=dict)  # informative details nobody reads back

    @classmethod
    def typed_details(cls) -> tuple[str, ...]:
        """Every field that is not a count (derived, so a new typed detail is one field)."""
        return tuple(name for name in cls.model_fields if name not in COUNTS)

    @model_validator(mode="before")
    @classmethod
    def _lift_typed_details(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("extra"), dict):
            extra = dict(data["extra"])
            lifted = {key: extra.pop(key) for key in cls.typed_details() if key in extra}
            data = {**data, **lifted, "extra": extra}
        return data

    @model_serializer(mode="wrap")
    def _fold_typed_details(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        extra = dict(out.get("extra", {}))
        for key in type(self).typed_details():
            # A subclass's own details are missing from `out` where it is serialized as a plain StageStats (a field
            # declared `StageStats`): they are read from the instance.
            value = out.pop(key) if key in out else getattr(self, key)
            if key in self.model_fields_set:  # set, even to None: written as it was given
                if key == "review" and self.review is not None:
                    value = self.review.model_dump(mode=info.mode, exclude_unset=True)
                extra[key] = value
        out["extra"] = extra
        return out

    def reasons_text(self) -> str:
        """Drop reasons as one readable cell, e.g. `too_small: 2, not_an_image: 1`."""
        return ", ".join(f"{k}: {v}" for k, v in self.dropped_by_reason.items()) or "-"
