"""3XCM's registry entry (`evaluation.registry`): its tasks and their headline keys, the release tables its
evaluation reads, and where its config, evaluator, card sections, leaderboard, published rows, command line and
exports are. The generic code finds 3XCM here and nowhere else."""

from __future__ import annotations

from evaluation.registry import Benchmark, Ref, Task

BENCHMARK = Benchmark(
    name="3xcm",
    title="3XCM",
    tasks=(
        Task("triplet", ("M_cr", "M_lb", "M_ti", "SP")),  # 3XCM §3.2.2, Table 2 (Eq. 3-4)
        # GlobalRG §3.2 and RAVENEA §3.1 on 3XCM's pool (evaluation/xcm/retrieval.py): first the row comparable with
        # GlobalRG's Table 3 (English queries only), then every query language, then RAVENEA's own scoring (gdeval.py)
        Task(
            "retrieval",
            (
                *(
                    f"{m}@{k}{u}_en"
                    for k in (5, 10)
                    for m, u in (("precision", ""), ("diversity", "_country"), ("diversity", "_region"))
                ),
                "precision@5",
                "diversity@5_country",
                "diversity@5_region",
                "mrr",
                "ndcg@5",
                "ravenea",
            ),
            part=True,
        ),
    ),
    reads=("benchmark", "benchmark_cd", "image_metadata"),
    per_query_row="benchmark row",
    config=Ref("evaluation.xcm.evaluate:Evaluate3XCMConfig"),
    prepare=Ref("evaluation.xcm.evaluate:prepare"),
    card_sections=Ref("evaluation.xcm.card:detail_sections"),
    leaderboard=Ref("evaluation.xcm.leaderboard:LEADERBOARD"),
    published=Ref("evaluation.leaderboard.published_baselines:xcm_rows"),
    published_notice=Ref("evaluation.leaderboard.published_baselines:XCM_NOTICE"),
    cli=Ref("flows.cli.evaluate_xcm:command"),
    metrics_model=Ref("evaluation.results.metrics:XcmMetrics"),
    exports=("mteb", "clip-benchmark"),
)
