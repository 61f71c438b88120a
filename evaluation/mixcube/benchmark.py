"""MixCuBe's registry entry (`evaluation.registry`): its tasks and their headline keys, the release tables its
evaluation reads, and where its config, evaluator, card sections, leaderboard, published rows, command line and
exports are. The generic code finds MixCuBe here and nowhere else."""

from __future__ import annotations

from evaluation.registry import Benchmark, Ref, Task

BENCHMARK = Benchmark(
    name="mixcube",
    title="MixCuBe",
    tasks=(
        # MixCuBe §3 with App. A.5's aliases; then with our extra aliases too (evaluation/mixcube/answer_match.py)
        Task("questions", ("accuracy", "marker_accuracy", "accuracy_with_our_aliases")),
        # the multilingual CLIP bias audit (Al Sahili et al.), §3.5-3.6 and App. A (evaluation/mixcube/bias_audit/)
        Task("audit", ("max_skew", "max_skew_max_pair", "pct_NA", "pct_NC", "pct_C", "pct_NH"), part=True),
    ),
    reads=("default",),
    per_query_row="image",
    config=Ref("evaluation.mixcube.evaluate:EvaluateMixCubeConfig"),
    prepare=Ref("evaluation.mixcube.evaluate:prepare"),
    card_sections=Ref("evaluation.mixcube.card:detail_sections"),
    leaderboard=Ref("evaluation.mixcube.leaderboard:LEADERBOARD"),
    published=Ref("evaluation.leaderboard.published_baselines:mixcube_rows"),
    published_notice=Ref("evaluation.leaderboard.published_baselines:MIXCUBE_NOTICE"),
    cli=Ref("flows.cli.evaluate_mixcube:command"),
    metrics_model=Ref("evaluation.results.metrics:MixCubeMetrics"),
    exports=("lmms-eval", "vlmevalkit"),
)
