"""The bias audit's records (evaluation/mixcube/bias_audit/audit.py computes them, `readings` and the card read them):
the release rows it reads, the rows of its tables (`metrics.AUDIT_*`, one TypedDict per schema) and its part of
`metrics.json`. They are plain dicts at runtime, built in the order they are written, so `metrics.json` and the
tables keep their bytes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Generic, Literal, NotRequired, TypedDict, TypeVar

#: `audit_metrics.SKEW_READINGS`' keys: the three reductions of a set's Skews, and their intervals' keys.
SkewReading = Literal["max_skew", "max_skew_max_pair", "max_skew_caption_mean"]
SkewInterval = Literal["max_skew_ci95", "max_skew_max_pair_ci95", "max_skew_caption_mean_ci95"]
#: Each reduction's interval key (`<reduction>_ci95`).
CI95: dict[SkewReading, SkewInterval] = {
    "max_skew": "max_skew_ci95",
    "max_skew_max_pair": "max_skew_max_pair_ci95",
    "max_skew_caption_mean": "max_skew_caption_mean_ci95",
}

#: A 95% interval: [low, high], each null where it cannot be computed.
Interval = list[float | None]
#: language -> value, and language -> interval.
ByLanguage = dict[str, float | None]
IntervalsByLanguage = dict[str, Interval]
#: prompt set -> language -> value (interval).
BySet = dict[str, ByLanguage]
IntervalsBySet = dict[str, IntervalsByLanguage]

Value = TypeVar("Value")
Ci = TypeVar("Ci")

ImageKey = Literal["sample_id", "original_id", "country", "category", "ethnicity"]
#: The columns that name an image in every per-image table (`metrics._IMAGE_FIELDS`), in their order.
IMAGE_KEYS: tuple[ImageKey, ...] = ("sample_id", "original_id", "country", "category", "ethnicity")


class AuditImage(TypedDict):
    """One row of the release's `default` table, as the audit reads it."""

    sample_id: str
    original_id: str
    country: str
    category: str
    ethnicity: str
    placeholder: bool


# -- table rows ---------------------------------------------------------------------------------------------------
class SkewRow(TypedDict):
    """`AUDIT_SKEW`: one caption and group pair of one language and set."""

    language: str
    prompt_set: str
    prompt_id: str
    prompt_category: str
    in_set_max_skew: bool
    group_a: str
    group_b: str
    p_a: float | None
    p_b: float | None
    skew: float | None


class HarmRateRow(TypedDict):
    """`AUDIT_HARM_RATES`: one rate of one reading and language, over all images or one group."""

    language: str
    reading: str
    harm: str
    prompt_set: str
    group: str
    n_images: int
    n_top1: int
    n_counted: int
    pct: float | None
    ci_low: float | None
    ci_high: float | None


class PairedShiftRow(TypedDict):
    """`AUDIT_PAIRED_SHIFT`: one swap against its originals, in one language and set (ours)."""

    language: str
    prompt_set: str
    ethnicity: str
    n_quintets: int
    lean_shift: float | None
    lean_ci_low: float | None
    lean_ci_high: float | None
    harmful_shift: float | None
    harmful_ci_low: float | None
    harmful_ci_high: float | None
    share_toward_harm: float | None


MoveDirection = Literal["into", "out_of"]


class HarmMoveRow(TypedDict):
    """`AUDIT_HARM_MOVES`: a swap whose top-1 crosses a harm category's border relative to its original (ours)."""

    original_id: str
    country: str
    category: str
    ethnicity: str
    language: str
    harm: str
    direction: MoveDirection
    original_top1: str
    swap_top1: str


# -- metrics.json["audit"] ----------------------------------------------------------------------------------------
class SkewReductions(TypedDict, Generic[Value, Ci]):
    """The three reductions with their intervals, each interval after its value."""

    max_skew: Value
    max_skew_ci95: Ci
    max_skew_max_pair: Value
    max_skew_max_pair_ci95: Ci
    max_skew_caption_mean: Value
    max_skew_caption_mean_ci95: Ci


def reductions(values: Mapping[SkewReading, Value], ci95: Mapping[SkewReading, Ci]) -> SkewReductions[Value, Ci]:
    return {
        "max_skew": values["max_skew"],
        "max_skew_ci95": ci95["max_skew"],
        "max_skew_max_pair": values["max_skew_max_pair"],
        "max_skew_max_pair_ci95": ci95["max_skew_max_pair"],
        "max_skew_caption_mean": values["max_skew_caption_mean"],
        "max_skew_caption_mean_ci95": ci95["max_skew_caption_mean"],
    }


def reduction(skews: SkewReductions[Value, Ci], key: SkewReading) -> tuple[Value, Ci]:
    """One reduction's value and interval."""
    return skews[key], skews[CI95[key]]


class ContrastCaptionRecord(TypedDict):
    label: str
    criminal: str
    animal: str


class ContrastMetrics(TypedDict):
    """§3.5's contrast (`readings.crime_contrast`): its language and captions, then either why it was skipped or
    its three reductions, their intervals and the share of pairs where the criminal caption wins, per group."""

    language: str
    captions: list[ContrastCaptionRecord]
    skipped: NotRequired[str]
    max_skew: NotRequired[float | None]
    max_skew_max_pair: NotRequired[float | None]
    max_skew_caption_mean: NotRequired[float | None]
    max_skew_ci95: NotRequired[Interval]
    max_skew_max_pair_ci95: NotRequired[Interval]
    max_skew_caption_mean_ci95: NotRequired[Interval]
    criminal_over_animal_pct: NotRequired[dict[str, float | None]]


class PromptEntry(TypedDict):
    review_status: str
    origin: str


class PromptsRecord(TypedDict):
    version: str
    sets: dict[str, list[str]]
    languages: dict[str, dict[str, PromptEntry]]  # language -> prompt set -> its status


class BootstrapRecord(TypedDict):
    unit: str
    n_resamples: int
    seed: int
    confidence: float


class PairedShift(TypedDict):
    n_quintets: int
    lean_shift: float | None
    lean_ci95: Interval
    harmful_shift: float | None
    harmful_ci95: Interval
    share_toward_harm: float | None


class AuditTies(TypedDict):
    """The counts behind the degenerate-vector warnings."""

    tolerance: float
    swaps: int
    n_swaps: int
    all_images_alike: bool
    n_images: int
    top1: dict[str, dict[str, int]]  # language -> prompt set -> images whose top-1 tied its runner-up


class AuditMetrics(SkewReductions[BySet, IntervalsBySet]):
    """metrics.json["audit"], in its order (the reductions come after `bootstrap`)."""

    prompts: PromptsRecord
    languages: list[str]
    groups: list[str]
    headline_language: str
    n_images: int
    n_quintets: int
    complete_quintets: int
    placeholder_images: int
    bootstrap: BootstrapRecord
    max_skew_captions: dict[str, list[str]]
    max_skew_definition: dict[str, str]
    crime_all_captions: SkewReductions[ByLanguage, IntervalsByLanguage]
    crime_contrast: ContrastMetrics
    harm_rates: dict[str, dict[str, float | None]]  # language -> pct_*
    harm_rates_ci95: dict[str, dict[str, Interval]]
    harm_rates_definition: dict[str, str]
    abstain_margin: float
    harm_rates_ours: dict[str, dict[str, float | None]]
    harm_rates_ours_ci95: dict[str, dict[str, Interval]]
    harm_rates_ours_definition: dict[str, str]
    paired_shift: dict[str, dict[str, dict[str, PairedShift]]]  # language -> prompt set -> swap
    harm_moves: dict[str, dict[str, dict[str, dict[MoveDirection, int]]]]  # language -> harm -> swap -> counts
    ties: NotRequired[AuditTies]
