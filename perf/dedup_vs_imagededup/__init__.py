"""Quality and speed benchmark of our file deduplicator against imagededup 0.3's PHash.

.venv/bin/python -m perf.dedup_vs_imagededup.run [--seed 0] [--bases 240] [--repeats 3]
"""
