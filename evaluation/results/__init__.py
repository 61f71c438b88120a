"""The result folder: `folder.py` writes an evaluation's `per_query.parquet`, tables,
`metrics.json`, figures and card once, immutable like a release (an identical rerun is `unchanged`, a different one
is refused); `parts.py` a further task's part folder (`retrieval/`, `audit/`); `figures.py` the figure that compares
models on their headline figures (`evaluate compare`).

Belongs here: what every benchmark's result folder shares. Not here: what a benchmark puts into it (its metrics and
card sections: `evaluation/xcm/`, `evaluation/mixcube/`, found through `evaluation.registry`), the leaderboard's
tables and page (`evaluation/leaderboard/`), and the immutable-folder machinery it is written with
(`data/publish/folder.py`)."""
