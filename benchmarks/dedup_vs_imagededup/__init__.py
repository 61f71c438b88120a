"""Quality and speed benchmark of our file deduplicator against imagededup 0.3's PHash (culturebench issue 4).

.venv/bin/python -m benchmarks.dedup_vs_imagededup.run [--seed 0] [--bases 240] [--repeats 3]
"""
