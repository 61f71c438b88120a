"""An lmms-eval plugin package for tests/evaluation/harnesses/exports/test_lmms_eval.py (found through
LMMS_EVAL_PLUGINS)."""
