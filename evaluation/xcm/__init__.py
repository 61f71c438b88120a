"""How 3XCM is scored: the paper's triplet task (RQ2 and RQ3, `task.py`) and its arithmetic as the
authors' evaluator computes it (`metrics.py`: M_k, SP, App. P's chi-squared tests, Δsim), the whole-pool retrieval
with GlobalRG's precision and diversity and RAVENEA's own scoring (`retrieval*.py`, `ravenea_metrics.py`), and the
figures; with 3XCM's registry entry and what it names (its evaluation config and runner, its card sections, its
leaderboard tables).

Belongs here: what knows a 3XCM release's tables or a number of the papers scored on it. Not here: the encoders that
make the vectors (`evaluation/models/`), the result folder the numbers are written into (`evaluation/results/`), the
generic leaderboard (`evaluation/leaderboard/`), the MTEB and clip_benchmark exports (`evaluation/harnesses/`), and
the rules a 3XCM release is built by (`curation/rules.py`, whose relevance rule the retrieval reads)."""
