"""Scoring models on releases: the evaluation consumes releases and builds nothing. One room per concern:

- `models/`: what is scored (the text and image encoders, the vision-language models, the image-vector cache, the
  vector checks);
- `xcm/`: how 3XCM is scored (the triplet task and its metrics, the whole-pool retrieval with GlobalRG's and
  RAVENEA's protocols, the figures);
- `mixcube/`: how MixCuBe is scored (the questions task, the answer rule, and `bias_audit/`, the multilingual CLIP
  bias audit of Al Sahili et al. run on MixCuBe);
- `harnesses/`: the exports to lmms-eval, VLMEvalKit, MTEB and clip_benchmark, and their prediction files read back;
- `results/`: the result folder, its parts and the compare figure;
- `leaderboard/`: the tables, the HTML page, the published baselines and the demo tables.

`run.py` is the generic runner, from a config to a result folder. `registry.py` is the benchmark registry: a
benchmark registers its tasks, headline keys, breakdowns, card sections and exports there, and the generic code (the
runner, the result folder and its card, `compare`, the leaderboard, the CLI) asks the registry and never names a
benchmark.

Not here: building or changing a release (`flows/`, `curation/`, `data/publish/`), the `evaluate` and `export`
commands and the `evaluate` flow (`flows/cli/`, `flows/evaluate.py`: wiring only), and the API clients, retries and
secrets (`data/clients/`). A domain folder: it imports `data/` and itself only, apart from tests/test_layers.py's
`EXCEPTIONS` (the demo models of `--demo-model`, assembly's relevance rule for the retrieval)."""
