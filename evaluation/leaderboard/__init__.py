"""The leaderboard: `tables.py` reads the result folders of one benchmark back into its
headline and breakdown tables, with the papers' published rows beside ours (`published_baselines.py`); `page.py`
draws the static HTML page that works offline (`culturebench evaluate compare --html DIR`); `demo_tables.py` renders
the README's and the docs' demo tables from `make demo`'s results (`--check`, `--write`).

Belongs here: reading results back and showing them side by side. Not here: which tables a benchmark has and how its
breakdowns are read (its room's leaderboard module, named by its registry entry), writing results
(`evaluation/results/`), and computing the numbers (`evaluation/xcm/`, `evaluation/mixcube/`)."""
