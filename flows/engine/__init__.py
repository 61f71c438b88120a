"""The build engine: a benchmark's stages run as a graph, skipped when done, sharded where they work item by item.

Its public interface, all that a benchmark's package (`flows/xcm/`, `flows/mixcube/`) imports of it
(`tests/test_layers.py` checks): `benchmark` (the `Benchmark` record), `config` (`BuildConfigBase`, `ConfigError`),
`graph` (`BuildGraph`, `Stage`, `StageContext`, `StageOutput`, `Build`), `shards` (`ShardPlan`), `slots`
(`gpu_slot`) and `placement` (`local_workers`, `run_apart`: local worker processes for a CPU-bound step). Where a
stage's shards run is the runner's decision (`runner.py`), made once per build; the rest is the engine's own.
"""
