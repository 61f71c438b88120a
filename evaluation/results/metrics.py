"""The records of a result's `metrics.json`, typed: what every result carries (`ResultEnvelope`: the benchmark, the
release, the model, the settings, the intervals) and each benchmark's figures (`XcmMetrics`, `MixCubeMetrics`), with
the shared shapes (`Estimate`, `WinRateGroup`, ...). The file on disk is what the writers have always written; these
models read it back strictly (numbers are numbers, no field beyond those listed), so a writer that drifts from them
fails `tests/evaluation/results/test_metrics_models.py`, which reads every metrics.json the demo writes through them.
`parse_metrics` picks the model by the document's benchmark (its registry entry's `metrics_model`)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from evaluation import registry

#: A 95% interval, [low, high], either end null where undefined.
Interval = Annotated[list[float | None], Field(min_length=2, max_length=2)]


class Record(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, allow_inf_nan=False, populate_by_name=True)


class ReleaseRef(Record):
    name: str
    version: str
    manifest_sha256: str


class Estimate(Record):
    value: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    n: int | None = None  # the queries it is over, where a metric leaves some out (RAVENEA's MRR)


class ResultEnvelope(Record):
    """What every result's metrics.json carries beside its figures."""

    benchmark: str
    release: ReleaseRef
    model: dict[str, JsonValue]  # the backend's identity (ModelIdentity or VlmIdentity as JSON)
    settings: dict[str, JsonValue]
    meaningless_demo_model: bool
    ci95: dict[str, Interval] = Field(default_factory=dict)
    tasks: list[str] | None = None  # absent when only the paper's task ran


# -- 3XCM --------------------------------------------------------------------------------------------------------
class WinRateGroup(Record):
    task: str
    group_by: str
    group: str
    n: int
    wins: dict[str, int]
    rates: dict[str, Estimate]
    sp: Estimate | None = None


class WinRateReport(Record):
    """RQ2's or RQ3's winner shares (Eq. 3), overall and per query language and country, with bootstrap intervals."""

    task: str
    n_resamples: int
    confidence: float
    seed: int
    overall: WinRateGroup
    by_language: list[WinRateGroup]
    by_country: list[WinRateGroup]


class PreferenceTest(Record):
    """One App. P.2 chi-squared test of two categories' wins."""

    test: str
    group_by: str
    group: str
    n: int
    category_a: str
    category_b: str
    wins_a: int
    wins_b: int
    rate_a: float | None
    rate_b: float | None
    diff: float | None
    statistic: float | None
    dof: int
    p_value: float | None
    significant: bool


class DriftMeans(Record):
    """Δsim (Eq. 5) per candidate category, over one group's queries."""

    group_by: str
    group: str
    n: int
    mean_drift: dict[str, float]


class RetrievalGroup(Record):
    n: int
    metrics: dict[str, Estimate]


class RetrievalConcept(RetrievalGroup):
    concept_id: int
    concept: str


class RetrievalSection(Record):
    """The whole-pool retrieval part (GlobalRG §3.2, RAVENEA §3.1): its settings, overall, per query language and
    per concept."""

    settings: dict[str, JsonValue]
    overall: RetrievalGroup
    by_language: dict[str, RetrievalGroup]
    by_concept: list[RetrievalConcept]
    boundary_ties: dict[str, int]
    skipped: list[str]
    warnings: list[str]


class XcmMetrics(ResultEnvelope):
    # the triplet task (3XCM §3.2.2-3.2.3, App. P)
    M_cr: float | None = None
    M_lb: float | None = None
    M_ti: float | None = None
    SP: float | None = None
    n_queries: int | None = None
    rq2: WinRateReport | None = None
    rq3: WinRateReport | None = None
    preference_tests: list[PreferenceTest] = Field(default_factory=list)
    delta_sim: list[DriftMeans] = Field(default_factory=list)
    skipped: list[str] = Field(default_factory=list)
    # the retrieval task's headline, at the top level (its section under `retrieval`)
    precision_at_5_en: float | None = Field(default=None, alias="precision@5_en")
    diversity_at_5_country_en: float | None = Field(default=None, alias="diversity@5_country_en")
    diversity_at_5_region_en: float | None = Field(default=None, alias="diversity@5_region_en")
    precision_at_10_en: float | None = Field(default=None, alias="precision@10_en")
    diversity_at_10_country_en: float | None = Field(default=None, alias="diversity@10_country_en")
    diversity_at_10_region_en: float | None = Field(default=None, alias="diversity@10_region_en")
    precision_at_5: float | None = Field(default=None, alias="precision@5")
    diversity_at_5_country: float | None = Field(default=None, alias="diversity@5_country")
    diversity_at_5_region: float | None = Field(default=None, alias="diversity@5_region")
    mrr: float | None = None
    ndcg_at_5: float | None = Field(default=None, alias="ndcg@5")
    ravenea: dict[str, float | None] | None = None
    retrieval: RetrievalSection | None = None


# -- MixCuBe -----------------------------------------------------------------------------------------------------
class AnswerRule(Record):
    accuracy: str
    accuracy_with_our_aliases: str
    negated_answers: str
    terms: dict[str, dict[str, list[str]]]


class Coverage(Record):
    answered_images: int
    release_images: int
    share: float


class AuditSection(Record):
    """The multilingual CLIP bias audit's part (Al Sahili et al. §3.5-3.6, App. A): its settings and every reading,
    per prompt set and language."""

    prompts: dict[str, JsonValue]
    languages: list[str]
    groups: list[str]
    headline_language: str
    n_images: int
    n_quintets: int
    complete_quintets: int
    placeholder_images: int
    bootstrap: dict[str, JsonValue]
    max_skew: dict[str, dict[str, float | None]]
    max_skew_ci95: dict[str, dict[str, Interval]]
    max_skew_max_pair: dict[str, dict[str, float | None]]
    max_skew_max_pair_ci95: dict[str, dict[str, Interval]]
    max_skew_caption_mean: dict[str, dict[str, float | None]]
    max_skew_caption_mean_ci95: dict[str, dict[str, Interval]]
    max_skew_captions: dict[str, list[str]]
    max_skew_definition: dict[str, str]
    crime_all_captions: dict[str, JsonValue]
    crime_contrast: dict[str, JsonValue]
    harm_rates: dict[str, dict[str, float | None]]
    harm_rates_ci95: dict[str, dict[str, Interval]]
    harm_rates_definition: dict[str, str]
    abstain_margin: float
    harm_rates_ours: dict[str, dict[str, float | None]]
    harm_rates_ours_ci95: dict[str, dict[str, Interval]]
    harm_rates_ours_definition: dict[str, str]
    paired_shift: dict[str, JsonValue]
    harm_moves: dict[str, JsonValue]
    warnings: list[str] = Field(default_factory=list)


class MixCubeMetrics(ResultEnvelope):
    # the questions task (MixCuBe §3, App. B.2-B.3; our aliases apart)
    images: int | None = None
    answered: int | None = None
    correct: int | None = None
    failed: int | None = None
    accuracy: float | None = None
    accuracy_by_ethnicity: dict[str, float | None] = Field(default_factory=dict)
    accuracy_by_country: dict[str, float | None] = Field(default_factory=dict)
    accuracy_by_category: dict[str, float | None] = Field(default_factory=dict)
    accuracy_original: float | None = None
    accuracy_synthesized: float | None = None
    drop_original_minus_synthesized: float | None = None
    accuracy_with_our_aliases: float | None = None
    correct_with_our_aliases: int | None = None
    accuracy_with_our_aliases_by_country: dict[str, float | None] = Field(default_factory=dict)
    negated_answers: int | None = None
    negated_answers_with_our_aliases: int | None = None
    answer_rule: AnswerRule | None = None
    answers_naming_several_cultures: int | None = None
    correct_naming_several_cultures: int | None = None
    marker_images: int | None = None
    marker_judged: int | None = None
    marker_accuracy: float | None = None
    marker_accuracy_by_ethnicity: dict[str, float | None] = Field(default_factory=dict)
    failures: dict[str, int] = Field(default_factory=dict)
    errors: dict[str, int] = Field(default_factory=dict)
    marker_errors: dict[str, int] = Field(default_factory=dict)
    placeholder_images: int | None = None
    coverage: Coverage | None = None
    # the bias audit's headline, at the top level (its section under `audit`)
    max_skew: dict[str, float | None] | None = None
    max_skew_max_pair: dict[str, float | None] | None = None
    pct_NA: float | None = None
    pct_NC: float | None = None
    pct_C: float | None = None
    pct_NH: float | None = None
    audit: AuditSection | None = None


def parse_metrics(document: dict[str, Any]) -> ResultEnvelope:
    """A metrics.json document read through its benchmark's model (the envelope alone for a benchmark that names
    none); pydantic's ValidationError names the field that differs."""
    benchmark = registry.get(str(document.get("benchmark")))
    model: type[ResultEnvelope] = benchmark.metrics_model.load() if benchmark.metrics_model else ResultEnvelope
    return model.model_validate(document)
