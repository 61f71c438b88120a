"""Orchestration: the Prefect flows, which are wiring (`evaluate.py`, `generate_concepts.py`,
`sync_reviews.py` and each benchmark's build), the CLI (`flows/cli/`, one module per command group), the registry of
the benchmarks this project builds (`benchmarks.py`), the engine (`flows/engine/`: graph, runner, work shards,
scale-out, retries, the GPU slot, the `Benchmark` record), the operations that are not flows (`flows/operations/`),
and one package per benchmark (`flows/xcm/`, `flows/mixcube/`: its config, stage graph and flow, and its release
content: writer, card and Croissant facts, deviations from the paper, takedown patches).

Belongs here: what ties stages, backends and releases together, and what a benchmark's build and release are. Not
here: the work itself (a stage's per-item logic goes in its domain folder, its schema in `data/schemas.py`), generic
publishing (`data/publish/`) and scoring models (`evaluation/`). `flows/` may import anything and nothing outside it
imports it; the engine knows no benchmark and no domain folder (tests/test_layers.py)."""
