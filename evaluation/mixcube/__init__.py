"""How MixCuBe is scored: the paper's questions to a vision-language model (Country
Identification, and Cultural Marker Identification with a judge: `task.py`), its answer rule as text matching
(`answer_match.py`, copied verbatim into the lmms-eval export), and `bias_audit/`, the multilingual CLIP bias audit
(Al Sahili et al.) run on MixCuBe's quintets; with MixCuBe's registry entry and what it names (its evaluation config
and runners, its card sections, its leaderboard tables).

Belongs here: what knows a MixCuBe release's tables or a number of the papers scored on it. Not here: the models
asked (`evaluation/models/vlm/`; the audit's encoders, `evaluation/models/encoders/`), a harness's prediction file
read back (`evaluation/harnesses/predictions/`, which hands its answers to this scorer), the result folder
(`evaluation/results/`), and the rules a MixCuBe release keeps (`curation/validate_mixcube.py`)."""
